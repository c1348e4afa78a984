"""Paths as the node resolves them, and the host paths that hand out GPUs, by class.

A pod spec's paths are not what the node uses. The kubelet makes a relative `mountPath`
absolute before the runtime sees it (`mount_destination`), and the NVIDIA runtime cleans the
destinations it reads as a device list; a hostPath is bind-mounted by the runtime, and the
kernel follows every symbolic link on the way, `/proc/self/root` (the host's root) and
`/var/run` (a link to `/run`) included. So a path is judged here cleaned, with the links every
Linux node has replaced by what they lead to (`canonical`), and a host path is refused when it
is in a class below, under one, or holds one (`/`, `/var`, `/var/lib`): a mount of a directory
gives everything in it.

What a site's own links lead to cannot be known at admission: docs/security.md says so, and a
policy can name more paths (`hostAccess.deniedHostPaths`).

This module imports nothing of the project but `names`: the policies (which check their
allowlists against the classes) and the rules both use it.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable
from typing import NamedTuple

from webhook.policy import names


class HostPathClass(NamedTuple):
    """Host paths that hand out GPUs for one reason. A path ending in `*` is a string prefix
    (`/dev/nvidia*` takes /dev/nvidia0 and /dev/nvidiactl); the others take the path and what
    is under it."""

    name: str
    # Why a mount of it reaches more GPU than the pod was given, in one line.
    reason: str
    paths: tuple[str, ...]


def _in(directories: tuple[str, ...], entries: tuple[str, ...]) -> tuple[str, ...]:
    """Every entry in every directory: files a driver puts in whichever of them the node's
    distribution uses."""
    return tuple(f"{d}/{e}" for d in directories for e in entries)


# Where the driver's user-space libraries are: Debian's and Ubuntu's (x86 and Arm), RHEL's
# `/usr/lib64`, `/usr/lib` (Arch's; RHEL's 32-bit ones), and Debian's 32-bit directories:
# the toolkit mounts the 32-bit libraries too.
LIBRARY_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/lib/i386-linux-gnu",
    "/usr/lib32",
)
# The driver's libraries by name, as the toolkit finds them there and mounts them into GPU
# containers: management and CUDA, video (NVCUVID, VDPAU), OptiX, the GLVND vendor
# libraries of EGL, GLX and GLES, GBM's backend, and Debian's driver directory.
DRIVER_LIBRARIES = (
    "libnvidia*",
    "libcuda*",
    "libnvcuvid*",
    "libnvoptix*",
    "libEGL_nvidia*",
    "libGLX_nvidia*",
    "libGLESv2_nvidia*",
    "libGLESv1_CM_nvidia*",
    "libvdpau_nvidia*",
    "vdpau/libvdpau_nvidia*",
    "gbm/nvidia-drm_gbm*",
    "nvidia",
)
# Where the toolkit looks for the driver's configuration files (the system's settings and
# the XDG data directories), and those files: the ICD and vendor files by which the Vulkan,
# EGL and OpenCL loaders of a GPU container find the driver, and its data (`nvoptix.bin`).
CONFIG_DIRS = ("/etc", "/usr/share", "/usr/local/share")
DRIVER_CONFIGS = (
    "vulkan/icd.d/nvidia*",
    "vulkan/implicit_layer.d/nvidia*",
    "glvnd/egl_vendor.d/10_nvidia*",
    "egl/egl_external_platform.d",
    "OpenCL/vendors/nvidia*",
    "nvidia",
)

# The classes, with their paths as `canonical` spells them (`/run`, not `/var/run`). Sources:
# the NVIDIA container toolkit and device plugin (device nodes, /run/nvidia/driver,
# /run/nvidia/mps, /usr/local/nvidia/toolkit, /etc/nvidia-container-runtime/config.toml, the
# libraries and configuration files it mounts), the kubelet (/var/lib/kubelet/device-plugins,
# pod-resources, plugins_registry), CDI (/etc/cdi, /var/run/cdi), the container runtimes'
# defaults, GKE (/home/kubernetes/bin/nvidia) and Container-Optimized OS (/var/lib/nvidia).
CLASSES: tuple[HostPathClass, ...] = (
    HostPathClass(
        "device nodes",
        "a GPU's device nodes (or, /dev/char, a link to every device node by number; /dev/mem"
        " and /dev/port, physical memory and GPU registers)",
        (
            "/dev/nvidia*",
            "/dev/char",
            "/dev/dri",
            "/dev/vfio",
            "/dev/gdrdrv",
            "/dev/mem",
            "/dev/kmem",
            "/dev/port",
        ),
    ),
    HostPathClass(
        "MPS pipes",
        "the MPS daemon's control pipes: a pod can raise its own limits, change other pods' or"
        " stop the daemon",
        # The device plugin's MPS root, and the MPS daemon's own default pipe directory.
        ("/run/nvidia/mps", "/tmp/nvidia-mps"),
    ),
    HostPathClass(
        "NVIDIA driver and toolkit",
        "the driver, its libraries, ICD files and kernel modules, and the container toolkit's"
        " binaries and settings: a pod that changes them decides what every later GPU container"
        " gets",
        (
            "/run/nvidia*",
            "/usr/local/nvidia",
            "/home/kubernetes/bin/nvidia",
            "/var/lib/nvidia",
            "/etc/nvidia-container-runtime",
            "/etc/nvidia-container-toolkit",
            "/usr/bin/nvidia*",
            "/usr/lib/modules",
            "/usr/lib/firmware/nvidia",
            *_in(LIBRARY_DIRS, DRIVER_LIBRARIES),
            *_in(CONFIG_DIRS, DRIVER_CONFIGS),
        ),
    ),
    HostPathClass(
        "kubelet plugins and state",
        "the device-plugin and pod-resources sockets (a pod can register a plugin for a GPU"
        " resource and answer its allocations), DRA plugin sockets, the allocation checkpoint,"
        " the static pod manifests (the kubelet runs whatever is written there)",
        # The kubelet's own, and the data directories of distributions that keep it there.
        ("/var/lib/kubelet", "/etc/kubernetes", "/var/snap/microk8s", "/var/lib/k0s"),
    ),
    HostPathClass(
        "CDI specs",
        "the CDI specifications: they decide which device nodes every CDI-mode GPU container"
        " gets",
        ("/etc/cdi", "/run/cdi"),
    ),
    HostPathClass(
        "container runtime",
        "the container runtime's socket, state and settings: a pod can start containers with"
        " any device",
        (
            "/run/containerd",
            "/var/lib/containerd",
            "/etc/containerd",
            "/run/crio",
            "/var/lib/crio",
            "/etc/crio",
            "/run/containers",
            "/var/lib/containers",
            "/etc/containers",
            "/run/docker.sock",
            "/run/docker",
            "/var/lib/docker",
            "/run/cri-dockerd.sock",
            "/run/dockershim.sock",
            "/run/k3s",
            "/var/lib/rancher",
            "/run/k0s",
            "/etc/k0s",
            "/run/podman",
            "/run/buildkit",
            "/var/lib/buildkit",
            "/etc/buildkit",
            # Kata Containers: the shims' sandbox state and sockets (the Go shim's and the
            # hypervisor's under /run/vc, the Rust shim's under /run/kata), and its settings.
            "/run/vc",
            "/run/kata",
            "/etc/kata-containers",
            "/usr/share/defaults/kata-containers",
            "/opt/kata",
            "/run/kata-containers",
            "/usr/share/kata-containers",
            "/run/runc",
            "/run/crun",
            # NRI: a plugin on its socket edits every container the runtime starts (device
            # nodes, mounts, env).
            "/run/nri",
            "/etc/nri",
            "/opt/nri",
            # OCI hooks (CRI-O's and Podman's default directories, the NVIDIA hook's among
            # them) run as root at every container start; the runtimes' configuration.
            "/usr/share/containers",
            "/usr/libexec/oci",
            "/etc/docker",
            "/etc/rancher",
            # Root's own runtime directory: a runtime root runs "rootless" keeps its socket
            # there.
            "/run/user/0",
        ),
    ),
    HostPathClass(
        "service managers",
        "systemd's and D-Bus's sockets: a pod can start any process on the node as root",
        ("/run/systemd", "/run/dbus"),
    ),
    HostPathClass(
        "sysfs",
        "the kernel's device trees (a GPU's PCI reset and remove), driver parameters and the"
        " cgroups that decide which devices a container may open",
        ("/sys",),
    ),
    HostPathClass(
        "procfs",
        "process links (/proc/<pid>/root, /proc/self/cwd, fd, map_files lead to any process's"
        " files, the host's root and the MPS daemon's pipes included) and the kernel's settings",
        ("/proc",),
    ),
)

# Links every Linux node has (or that lead to the same files where they are not links), as
# (link, what it leads to). `/var/run` -> `/run` is the FHS's; the `/usr` merge's are on every
# current distribution; `/dev/fd` and the standard streams are links into `/proc/self`.
LINKS: tuple[tuple[str, str], ...] = (
    ("/var/run", "/run"),
    ("/var/lock", "/run/lock"),
    ("/lib", "/usr/lib"),
    ("/lib32", "/usr/lib32"),
    ("/lib64", "/usr/lib64"),
    ("/libx32", "/usr/libx32"),
    ("/bin", "/usr/bin"),
    ("/sbin", "/usr/sbin"),
    ("/dev/fd", "/proc/self/fd"),
    ("/dev/stdin", "/proc/self/fd/0"),
    ("/dev/stdout", "/proc/self/fd/1"),
    ("/dev/stderr", "/proc/self/fd/2"),
    ("/dev/core", "/proc/kcore"),
    ("/etc/mtab", "/proc/self/mounts"),
)

_SLASHES = re.compile(r"/+")
# The class of a relative host path, and of a policy's own paths.
RELATIVE = "relative path"
DENIED_BY_POLICY = "denied by policy"


def clean(path: str) -> str:
    """A path cleaned as Go's `filepath.Clean` does it, lexically: `//dev/./x/..` -> `/dev`.
    A relative path stays relative (`./a/../b` -> `b`)."""
    if not path:
        return "."
    cleaned = posixpath.normpath(_SLASHES.sub("/", path))
    # normpath keeps a leading "//" (POSIX leaves it to the system); Go's Clean does not.
    return "/" + cleaned.lstrip("/") if cleaned.startswith("/") else cleaned


def mount_destination(path: str) -> str:
    """A volumeMount's path as the container runtime gets it: the kubelet makes a relative
    one absolute (pkg/kubelet/kubelet_pods.go, `makeMounts`: `MakeAbsolutePath`, which is
    `filepath.Clean("/" + path)` on Linux), cleaned as the NVIDIA runtime cleans the
    destinations it reads (`filepath.Clean(m.Destination)`)."""
    return clean(path if path.startswith("/") else "/" + path)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/") or root == "/"


def canonical(path: str) -> str:
    """An absolute path cleaned, with the links of `LINKS` replaced by what they lead to
    (`/var/run/nvidia/mps` -> `/run/nvidia/mps`, `/dev/fd/3` -> `/proc/self/fd/3`)."""
    p = clean(path)
    for _ in range(len(LINKS) + 1):
        for link, target in LINKS:
            if _under(p, link):
                p = target + p[len(link) :]
                break
        else:
            return p
    return p


def _meets(path: str, entry: str) -> bool:
    """Whether a mount of `path` reaches `entry` (a class path, `*` for a string prefix): it
    is `entry`, is under it, or holds it."""
    if entry.endswith("*"):
        prefix = entry[:-1]
        if path.startswith(prefix):
            return True
        parent = prefix.rsplit("/", 1)[0] or "/"
        return _under(parent, path)
    return _under(path, entry) or _under(entry, path)


def classes_of(path: str, extra: Iterable[str] = ()) -> list[str]:
    """The names of the classes a hostPath reaches (`extra`: a policy's own paths, named
    "denied by policy"); empty when it reaches none. A relative path is its own class: the
    runtime resolves it against a working directory Kubernetes does not define. Linear in
    the path's length, however many segments it has."""
    extra = tuple(extra)
    if len(path) > _CACHED_LENGTH:
        return list(_classes(path, extra))
    return list(_cached_classes(path, extra))


# Paths up to this long are remembered (a pod repeats a few, and so do replicas); longer ones,
# which no node has, are worked out each time rather than held.
_CACHED_LENGTH = 512


def _classes(path: str, extra: tuple[str, ...]) -> tuple[str, ...]:
    if not path.startswith("/"):
        return (RELATIVE,)
    p = canonical(path)
    found = set(_HOLDERS.get(p, ()))
    # The path and the directories above it, as deep as the deepest class path: a path is
    # under a class path exactly when its first segments spell it.
    found.update(_AT.get("/", ()))
    end = 0
    for _ in range(_DEEPEST):
        end = p.find("/", end + 1)
        found.update(_AT.get(p if end < 0 else p[:end], ()))
        if end < 0:
            break
    for prefix, name in _STARS:
        if p.startswith(prefix):
            found.add(name)
    names_found = [c.name for c in CLASSES if c.name in found]
    if any(_meets(p, canonical_entry(e)) for e in extra):
        names_found.append(DENIED_BY_POLICY)
    return tuple(names_found)


_cached_classes = functools.lru_cache(maxsize=4096)(_classes)


def canonical_entry(entry: str) -> str:
    """A class path (or a policy's) as `canonical` spells it, its `*` kept."""
    if entry.endswith("*"):
        return canonical(entry[:-1]) + "*"
    return canonical(entry)


def _ancestors(path: str) -> list[str]:
    """The directories that hold `path` (clean, absolute), "/" included."""
    out = []
    while path != "/":
        path = path.rsplit("/", 1)[0] or "/"
        out.append(path)
    return out


def _index() -> tuple[dict[str, set[str]], dict[str, set[str]], tuple[tuple[str, str], ...]]:
    """The classes' paths as `canonical` spells them, worked out once, for lookups by a
    path's directories (`_classes_of` is `_meets` over every path, in a few dict lookups):
    the class names at each path, at each directory that holds one, and the `*` prefixes."""
    at: dict[str, set[str]] = {}
    holders: dict[str, set[str]] = {}
    stars: list[tuple[str, str]] = []
    for c in CLASSES:
        for entry in c.paths:
            e = canonical_entry(entry)
            if e.endswith("*"):
                stars.append((e[:-1], c.name))
                parent = e[:-1].rsplit("/", 1)[0] or "/"
                held = [parent, *_ancestors(parent)]
            else:
                at.setdefault(e, set()).add(c.name)
                held = _ancestors(e)
            for h in held:
                holders.setdefault(h, set()).add(c.name)
    return at, holders, tuple(stars)


_AT, _HOLDERS, _STARS = _index()
# How many segments the deepest class path has.
_DEEPEST = max(e.count("/") for e in _AT)


def reason(name: str) -> str:
    for c in CLASSES:
        if c.name == name:
            return c.reason
    if name == RELATIVE:
        return "a relative host path is resolved against the runtime's working directory"
    return "a path the policy names (hostAccess.deniedHostPaths)"


def pod_security_enforced(level: str | None) -> bool:
    """Whether a namespace whose enforce label has `level` has Pod Security refuse host
    access (baseline or restricted)."""
    return level in names.POD_SECURITY_HOST_ACCESS_LEVELS
