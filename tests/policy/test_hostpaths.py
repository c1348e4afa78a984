"""The classes of host paths that hand out GPUs (webhook/policy/hostpaths.py): a file or directory
of a node for every path of every class, reached as the node resolves it, and the near misses
left open; docs/security.md's table of the classes, path for path; and the paths the rules show
in their messages, cut keeping their end.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.engine.rule_cases import lab
from tests.support.kube import T4_MPS, container, make_policy, pod, review
from webhook.engine import reviewing
from webhook.engine.decision import shown
from webhook.policy import hostpaths

SECURITY = Path(__file__).resolve().parents[2] / "docs" / "security.md"

DEVICES = "device nodes"
MPS = "MPS pipes"
DRIVER = "NVIDIA driver and toolkit"
KUBELET = "kubelet plugins and state"
CDI = "CDI specs"
RUNTIME = "container runtime"
SERVICES = "service managers"

# A path of a node for each path of the classes, as a pod could write it, and the class it
# reaches. Removing a path from a class fails its case here; a class path with no case here
# fails `test_every_path_of_the_classes_has_a_case`.
REACHED = [
    ("/dev/nvidia0", DEVICES), ("/dev/nvidia-uvm", DEVICES), ("/dev/char/195:255", DEVICES),
    ("/dev/dri/renderD128", DEVICES), ("/dev/vfio/12", DEVICES), ("/dev/gdrdrv", DEVICES),
    ("/dev/mem", DEVICES), ("/dev/kmem", DEVICES), ("/dev/port", DEVICES),
    ("/var/run/nvidia/mps/nvidia.com/gpu.shared/pipe", MPS), ("/tmp/nvidia-mps/control", MPS),
    ("/run/nvidia-persistenced/socket", DRIVER), ("/usr/local/nvidia/toolkit", DRIVER),
    ("/home/kubernetes/bin/nvidia/lib64", DRIVER), ("/var/lib/nvidia/lib64", DRIVER),
    ("/etc/nvidia-container-runtime/config.toml", DRIVER),
    ("/etc/nvidia-container-toolkit/cdi", DRIVER), ("/bin/nvidia-smi", DRIVER),
    ("/lib/modules/6.8.0-45-generic/kernel/drivers/video", DRIVER),
    ("/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin", DRIVER),
    ("/var/lib/kubelet/device-plugins/kubelet.sock", KUBELET),
    ("/etc/kubernetes/manifests", KUBELET), ("/var/snap/microk8s/common/run", KUBELET),
    ("/var/lib/k0s/kubelet/device-plugins", KUBELET),
    ("/etc/cdi/nvidia.yaml", CDI), ("/var/run/cdi/nvidia.yaml", CDI),
    ("/run/containerd/containerd.sock", RUNTIME), ("/var/lib/containerd", RUNTIME),
    ("/etc/containerd/config.toml", RUNTIME), ("/var/run/crio/crio.sock", RUNTIME),
    ("/var/lib/crio", RUNTIME), ("/etc/crio/crio.conf.d", RUNTIME),
    ("/run/containers/storage", RUNTIME), ("/var/lib/containers/storage", RUNTIME),
    ("/etc/containers/oci/hooks.d", RUNTIME), ("/var/run/docker.sock", RUNTIME),
    ("/run/docker/containerd", RUNTIME), ("/var/lib/docker", RUNTIME),
    ("/run/cri-dockerd.sock", RUNTIME), ("/run/dockershim.sock", RUNTIME),
    ("/run/k3s/containerd/containerd.sock", RUNTIME),
    ("/var/lib/rancher/k3s/agent/etc/containerd", RUNTIME),
    ("/run/k0s/containerd.sock", RUNTIME), ("/etc/k0s/containerd.toml", RUNTIME),
    ("/run/podman/podman.sock", RUNTIME), ("/var/run/buildkit/buildkitd.sock", RUNTIME),
    ("/var/lib/buildkit", RUNTIME), ("/etc/buildkit/buildkitd.toml", RUNTIME),
    ("/run/vc/sbs/3f2a/shim-monitor.sock", RUNTIME), ("/run/vc/vm/3f2a/qmp.sock", RUNTIME),
    ("/run/kata/3f2a/shim-monitor.sock", RUNTIME),
    ("/etc/kata-containers/configuration.toml", RUNTIME),
    ("/usr/share/defaults/kata-containers/configuration-qemu.toml", RUNTIME),
    ("/opt/kata/share/defaults/kata-containers/configuration-qemu-nvidia-gpu.toml", RUNTIME),
    ("/run/runc", RUNTIME), ("/var/run/crun", RUNTIME),
    ("/run/kata-containers/shared/sandboxes", RUNTIME),
    ("/usr/share/kata-containers/vmlinux.container", RUNTIME),
    ("/var/run/nri/nri.sock", RUNTIME), ("/etc/nri/conf.json", RUNTIME),
    ("/opt/nri/plugins", RUNTIME),
    ("/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json", RUNTIME),
    ("/usr/libexec/oci/hooks.d", RUNTIME), ("/etc/docker/daemon.json", RUNTIME),
    ("/etc/rancher/k3s/k3s.yaml", RUNTIME), ("/run/user/0/podman/podman.sock", RUNTIME),
    ("/run/systemd/private", SERVICES), ("/var/run/dbus/system_bus_socket", SERVICES),
    ("/sys/bus/pci/devices/0000:3b:00.0/reset", "sysfs"), ("/proc/1/root", "procfs"),
]

# The driver's files as the toolkit finds them, each in every directory a distribution puts
# them in (spelled through the /lib and /lib32 links too).
LIBRARIES = [
    "libnvidia-ml.so.550.54.15", "libcuda.so.1", "libcudadebugger.so.1", "libnvcuvid.so.1",
    "libnvoptix.so.1", "libEGL_nvidia.so.0", "libGLX_nvidia.so.0", "libGLESv2_nvidia.so.2",
    "libGLESv1_CM_nvidia.so.1", "libvdpau_nvidia.so.550.54.15",
    "vdpau/libvdpau_nvidia.so.550.54.15", "gbm/nvidia-drm_gbm.so", "nvidia/current/libcuda.so.1",
]
LIBRARY_DIRS = [
    "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
    "/usr/lib/i386-linux-gnu", "/lib32",
]
CONFIGS = [
    "vulkan/icd.d/nvidia_icd.json", "vulkan/icd.d/nvidia_icd.x86_64.json",
    "vulkan/implicit_layer.d/nvidia_layers.json", "glvnd/egl_vendor.d/10_nvidia.json",
    "egl/egl_external_platform.d/15_nvidia_gbm.json", "OpenCL/vendors/nvidia.icd",
    "nvidia/nvoptix.bin",
]
CONFIG_DIRS = ["/etc", "/usr/share", "/usr/local/share"]
DRIVER_FILES = [f"{d}/{f}" for d in LIBRARY_DIRS for f in LIBRARIES] + [
    f"{d}/{f}" for d in CONFIG_DIRS for f in CONFIGS]

# Beside the classes: other vendors' files in the same directories, and names that only
# start like a class path.
LEFT_OPEN = [
    "/usr/lib/x86_64-linux-gnu/libEGL_mesa.so.0", "/usr/lib/x86_64-linux-gnu/libEGL.so.1",
    "/usr/lib/x86_64-linux-gnu/libGLX_mesa.so.0", "/usr/lib64/libcrypto.so.3",
    "/usr/lib/x86_64-linux-gnu/vdpau/libvdpau_va_gl.so.1",
    "/usr/lib/x86_64-linux-gnu/gbm/dri_gbm.so", "/usr/lib/python3.12",
    "/usr/share/glvnd/egl_vendor.d/50_mesa.json", "/usr/share/vulkan/icd.d/radeon_icd.json",
    "/etc/OpenCL/vendors/intel.icd", "/usr/share/fonts", "/usr/share/zoneinfo",
    "/var/lib/nvidia-models", "/opt/models", "/opt/katana", "/run/vcs", "/run/podman-data",
    "/etc/k0s-backup", "/var/lib/k0smotron", "/run/buildkit-cache", "/etc/ssl/certs",
]


@pytest.mark.parametrize(("path", "reached"), REACHED, ids=[p for p, _ in REACHED])
def test_a_path_of_a_class_is_reached_as_the_node_resolves_it(path: str, reached: str) -> None:
    assert reached in hostpaths.classes_of(path)


@pytest.mark.parametrize("path", DRIVER_FILES)
def test_the_driver_files_the_toolkit_mounts_are_reached_in_every_library_directory(
    path: str,
) -> None:
    assert hostpaths.classes_of(path) == [DRIVER]


@pytest.mark.parametrize(
    "path",
    ["/usr/lib/x86_64-linux-gnu/vdpau", "/usr/lib64/gbm", "/usr/share/vulkan",
     "/usr/share/glvnd/egl_vendor.d", "/etc/OpenCL", "/usr/share", "/run/vc", "/opt",
     "/usr/share/defaults"],
)
def test_a_directory_that_holds_a_class_path_reaches_it(path: str) -> None:
    assert hostpaths.classes_of(path)


@pytest.mark.parametrize("path", LEFT_OPEN)
def test_files_beside_the_classes_are_left_open(path: str) -> None:
    assert hostpaths.classes_of(path) == []


def _case_of(path: str, entry: str) -> bool:
    """Whether `path` is `entry`'s (the entry itself, under it, or for a `*` entry, starting
    with it), both as the node resolves them."""
    p, e = hostpaths.canonical(path), hostpaths.canonical_entry(entry)
    if e.endswith("*"):
        return p.startswith(e[:-1])
    return p == e or p.startswith(e + "/")


def test_every_path_of_the_classes_has_a_case() -> None:
    cases = [(p, name) for p, name in REACHED] + [(p, DRIVER) for p in DRIVER_FILES]
    missing = [
        (c.name, entry)
        for c in hostpaths.CLASSES
        for entry in c.paths
        if not any(name == c.name and _case_of(p, entry) for p, name in cases)
    ]
    assert missing == []


def _class_table() -> dict[str, str]:
    """docs/security.md's table of the classes: the paths cell of each class, by name."""
    text = SECURITY.read_text(encoding="utf-8")
    table = text[text.index("**The classes**"):].split("\n\n")[1]
    rows = [line.strip("|").split("|") for line in table.splitlines()[2:]]
    return {name.strip(): paths for name, paths, _ in rows}


def test_the_security_page_lists_the_classes_in_order() -> None:
    assert list(_class_table()) == [c.name for c in hostpaths.CLASSES]


def test_the_security_page_names_every_path_of_every_class() -> None:
    table = _class_table()
    spelled = {f"{d}/{n}" for d in hostpaths.LIBRARY_DIRS for n in hostpaths.DRIVER_LIBRARIES}
    spelled |= {f"{d}/{n}" for d in hostpaths.CONFIG_DIRS for n in hostpaths.DRIVER_CONFIGS}
    missing = [
        (c.name, entry)
        for c in hostpaths.CLASSES
        for entry in c.paths
        if entry not in spelled and f"`{entry}`" not in table[c.name]
    ]
    # The driver's files are listed once by name, once by directory.
    parts = [*hostpaths.LIBRARY_DIRS, *hostpaths.DRIVER_LIBRARIES, *hostpaths.CONFIG_DIRS,
             *hostpaths.DRIVER_CONFIGS]
    missing += [(DRIVER, part) for part in parts if f"`{part}`" not in table[DRIVER]]
    assert missing == []


def test_every_path_the_security_page_lists_for_a_class_reaches_it() -> None:
    wrong = [
        (name, path)
        for name, paths in _class_table().items()
        for path in re.findall(r"`(/[^`]*)`", paths)
        if name not in hostpaths.classes_of(path)
    ]
    assert wrong == []


# --------------------------------------------------------------------------- paths in messages


def test_a_long_value_keeps_its_start_and_a_long_path_its_end() -> None:
    path = "/proc/1/root/" + "x/../" * 40 + "run/nvidia/mps"
    assert shown(path) == f'"{path[:32]}... ({len(path)} characters)"'
    assert shown(path, keep="end") == f'"...{path[-32:]} ({len(path)} characters)"'
    assert shown(path, keep="end").endswith('/../x/../run/nvidia/mps (227 characters)"')


@pytest.mark.parametrize("value", ["", "/dev/nvidia0", "/" + "d" * 39])
def test_a_short_path_is_shown_whole(value: str) -> None:
    assert shown(value, keep="end") == shown(value) == f'"{value}"'


def test_a_path_is_shown_in_bounded_length_however_long() -> None:
    assert len(shown("/a" * 500_000, keep="end")) < 60


def _message(obj: dict[str, Any], policy: Any) -> str:
    decision = review(obj, policy)
    assert not decision.allowed
    return decision.message


LONG_MPS = "/proc/1/root/" + "x/../" * 40 + "run/nvidia/mps"
LONG_DEVICE_LIST = "x/../" * 20 + "var/run/nvidia-container-devices/all"
LONG_MODELS = "/srv/" + "m" * 60 + "/weights"


def _host_path(path: str, **mount: Any) -> dict[str, Any]:
    return pod(container(volumeMounts=[{"name": "h", "mountPath": "/h", **mount}]),
               volumes=[{"name": "h", "hostPath": {"path": path}}])


def _shows_the_end(message: str, path: str) -> None:
    assert f"...{path[-32:]} ({len(path)} characters)" in message
    assert path[:32] not in message


def test_host_path_shows_the_end_of_the_path_it_refuses() -> None:
    _shows_the_end(_message(_host_path(LONG_MPS), lab()), LONG_MPS)


def test_device_list_mount_shows_the_end_of_the_mount_path() -> None:
    obj = pod(container(volumeMounts=[{"name": "e", "mountPath": LONG_DEVICE_LIST}]),
              volumes=[{"name": "e", "emptyDir": {}}])
    _shows_the_end(_message(obj, lab()), LONG_DEVICE_LIST)


def test_host_access_shows_the_end_of_a_path_the_policy_does_not_allow() -> None:
    _shows_the_end(_message(_host_path(LONG_MODELS), lab()), LONG_MODELS)


def test_host_access_shows_the_end_of_an_allowed_path_mounted_writable() -> None:
    policy = make_policy([T4_MPS], name="team",
                         hostAccess={"allowedHostPaths": [{"pathPrefix": "/srv"}]})
    _shows_the_end(_message(_host_path(LONG_MODELS), policy), LONG_MODELS)


def test_an_ephemeral_container_mounting_a_refused_host_path_is_shown_its_end() -> None:
    running = _host_path(LONG_MPS)
    debug = {"name": "dbg", "image": "busybox", "volumeMounts": [{"name": "h", "mountPath": "/x"}]}
    updated = {**running, "spec": {**running["spec"], "ephemeralContainers": [debug]}}
    decision = reviewing.admit(updated, policy=lab(), endpoint="mutate", group="", kind="Pod",
                               operation="UPDATE", sub_resource="ephemeralcontainers",
                               old=running)
    assert [v.rule for v in decision.violations] == ["host-path"]
    _shows_the_end(decision.message, LONG_MPS)


def test_the_end_of_a_path_is_made_printable() -> None:
    path = "/proc/" + "a" * 60 + "/\x1b[2J\u202envidia0"
    message = _message(_host_path(path), lab())
    assert "\x1b" not in message
    assert "\u202e" not in message
    assert "/\\u001b[2J\\u202envidia0 (" in message
