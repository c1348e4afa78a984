"""Hostile AdmissionReviews, and what the admission server may answer them.

Shared by tests/server/test_fuzz.py (a few thousand examples through the aiohttp application, in
process, over TLS) and bench/fuzz.py (a real `serve` process, as many as asked for).

The strategies make `Case`s: a path, a content type and the exact bytes of a body.

- `pod_cases`, `workload_cases`: reviews shaped as the API server sends them, of Pods (create,
  `kubectl debug`, update, delete) and of every workload kind the server reviews (the
  built-in ones and those of webhook/policy/workload-kinds.yaml), with GPU resources, quantities
  both sane and hostile, device and MPS variables, volumes, security contexts, annotations;
- `mangled_cases`, `envelope_cases`: the same with wrong JSON at any node (or at a node of
  the AdmissionReview around the object): other types, nulls, huge strings, deep nesting,
  numbers no encoder writes, values right elsewhere, missing and extra keys, long lists;
- `hollow_cases`: tame pods with null, empty or mistyped values where the patch writes;
- `raw_cases`: bytes that are no AdmissionReview, and content types other than JSON;
- `oversized_cases`: bodies just under, at and over the 7 MiB limit;
- `any_cases`: the mix bench/fuzz.py sends.

Strategies are built once, at import (hypothesis validates each new one, which costs more
than drawing from it); constant values are copied before they go into a document.

`judge` says what an answer is (a row of the tables: "200 allowed", "400", ...) and what is
wrong with it (a failure class and the detail); an allowed review with a patch is followed by
`Verdict.again`, the same review of the patched object, which `judge_again` requires to be
allowed with no patch. The transport (how the case is sent, what a dropped connection looks
like) is the caller's.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import orjson
from hypothesis import strategies as st

from tests.support import apiserver, kube
from tests.support.strategies import (
    LABELS,
    TOLERATIONS,
    affinity,
    booleans,
    integers,
    lists,
    made_once,
    sampled_from,
)
from webhook.policy import kinds as workload_kinds
from webhook.server import codec
from webhook.server.limits import Limits

JSON = "application/json"
# The body limit of the contract (SPEC: 413 over 7 MiB).
MAX_BODY_BYTES = Limits().max_body_bytes
# What the API server adds to every call (the webhook configurations' timeoutSeconds).
QUERY = "timeout=10s"
POLICIES = ("default", "not-renamed", "no-such-policy")
# The workload kinds whose templates the server reviews: built-in, and the shipped extras.
KINDS = workload_kinds.all_kinds()

# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One request: `POST <path>` with `content_type` (None: no header) and `body`; `source`
    names the strategy that made it, `what` says more."""

    path: str
    content_type: str | None
    body: bytes
    source: str = ""
    what: str = ""
    # The contract says it is allowed whatever it holds: a DELETE, an update of a Pod other
    # than of its ephemeral containers, an update that leaves the pod templates as they were.
    must_allow: bool = False

    def __repr__(self) -> str:
        return (
            f"Case({self.source} {self.what!r}, path={self.path!r},"
            f" content_type={self.content_type!r},"
            f" body={shorten(self.body)})"
        )


def shorten(body: bytes, limit: int = 3000) -> str:
    """`body` as a bytes literal, whole when short, else its ends and its length."""
    if len(body) <= limit:
        return repr(body)
    half = limit // 2
    return f"{body[:half]!r} + ... + {body[-half:]!r} ({len(body)} bytes)"


@dataclass(frozen=True)
class Raw:
    """JSON text put into a body as it is: numbers that no encoder writes (`1e999999`, 5000
    digits), nesting deeper than an encoder allows."""

    text: str

    def __repr__(self) -> str:
        text = self.text if len(self.text) <= 40 else f"{self.text[:40]}...({len(self.text)})"
        return f"Raw({text!r})"


_TOKEN = secrets.token_hex(8)


def encode(doc: Any) -> bytes:
    """`doc` as JSON bytes, each `Raw` written as its text."""
    raws: list[str] = []

    def default(value: Any) -> str:
        if isinstance(value, Raw):
            raws.append(value.text)
            return f"{_TOKEN}{len(raws) - 1}"
        raise TypeError(type(value).__name__)

    out = orjson.dumps(doc, default=default)
    for i, text in enumerate(raws):
        out = out.replace(f'"{_TOKEN}{i}"'.encode(), text.encode(), 1)
    return out


def path_of(endpoint: str, policy: str | None) -> str:
    base = f"/{endpoint}" if policy is None else f"/{endpoint}/{policy}"
    return f"{base}?{QUERY}"


# --------------------------------------------------------------------------- values


def _deep(depth: int, opener: str) -> Raw:
    if opener == "[":
        return Raw("[" * depth + "]" * depth)
    return Raw('{"a":' * depth + "null" + "}" * depth)


# Nesting around the limit of the server's JSON parser (orjson: 1024) and of Python's
# recursion (1000 frames), and far beyond.
deep_values = st.builds(
    _deep, st.sampled_from((20, 100, 254, 256, 400, 600, 1000, 1010, 1030, 5000)),
    st.sampled_from("[{"),
)


def _repeat(char: str, count: int) -> str:
    return char * count


# Strings of 1 kB to 1 MB, of one character: ASCII, one that needs escaping, one of 3 bytes.
huge_strings = st.builds(
    _repeat, st.sampled_from(("a", '"', "⓽", "/")),
    st.sampled_from((1000, 1000, 64 * 1024, 1024 * 1024)),
)  # fmt: skip


def rarely(strategy: st.SearchStrategy[Any], otherwise: st.SearchStrategy[Any]) -> Any:
    """`strategy` about one time in 30, else `otherwise` (for values that make bodies large)."""
    return st.integers(0, 29).flatmap(lambda n: strategy if n == 0 else otherwise)


# Digit strings around the int64 limit and of 5000 digits.
long_digits = st.builds(
    _repeat, st.sampled_from("19"), st.sampled_from((18, 19, 20, 64, 65, 400, 5000))
)

SANE_QUANTITIES = ("0", "1", "1", "1", "2", "3", "4", "1000m", "500m", "+1", "01", "1e0", "1.0")
HOSTILE_QUANTITIES = (
    "1e999999", "⓽", "²", "-1", "0.5", "1Ki", "1e-999999", "1e18", "1e19", "8Ei", "9Ei",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1e4294967296",
    "1e2147483647", "1e-2147483648", "", " 1", "1 ", "1\n", "٣", "\uff11", "0x1", "NaN", "Infinity",
    "-inf", "1_000", ".", "+", "-", "1.", ".5", "-0", "1ki", "1K", "1e", "e1", "1e+", "1m", "1n",
    "1u", "1µ", "0.0000000001", "999999999999999999999m", "1/2", "1,5", "1\x00", "true", "null",
    "1Ei", "1.5Gi", "1e3Ki", "100%", "  ", "\uff11\uff12", "1\u200b",
)  # fmt: skip
RAW_NUMBERS = (
    "1e999999", "-1e999999", "1E400", "1e308", "9" * 5000, "-" + "9" * 5000, "9" * 19,
    "18446744073709551616", "-0.0", "1e-400", "0.5", "-1", "1.0", "1e0", "100000000000000000000",
)  # fmt: skip

sane_quantities = st.sampled_from(SANE_QUANTITIES) | st.integers(0, 2)
quantities = st.one_of(
    st.sampled_from(SANE_QUANTITIES),
    st.integers(0, 4),
    st.sampled_from(HOSTILE_QUANTITIES),
    st.sampled_from(HOSTILE_QUANTITIES),
    long_digits,
    st.sampled_from(RAW_NUMBERS).map(Raw),
    st.sampled_from([1.5, -1, 0.5, 1e300, -0.0, True, False, None, [], {}, [1], {"n": 1}]),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=6),
)

GPU_RESOURCES = (
    "nvidia.com/gpu.shared", "nvidia.com/gpu.shared", "nvidia.com/gpu", "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb.shared", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb.shared",
    "nvidia.com/GPU.shared", "nvidia.com/gpu.shared ", "cpu", "memory", "example.com/foo",
)  # fmt: skip
TAME_RESOURCES = (
    "nvidia.com/gpu.shared", "nvidia.com/gpu.shared", "nvidia.com/gpu.shared", "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb.shared", "cpu", "memory",
)  # fmt: skip


@st.composite
def resources(draw: st.DrawFn, *, hostile: bool) -> dict[str, Any]:
    """Limits and requests. Tame: sane quantities, requests equal to limits when both."""
    names = GPU_RESOURCES if hostile else TAME_RESOURCES
    values = quantities if hostile else sane_quantities
    ways = ("limits", "limits", "both", "requests", "differ") if hostile else ("limits", "both")
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    for name in draw(lists(sampled_from(names), min_size=1, max_size=3, unique=True)):
        value = draw(values)
        how = draw(sampled_from(ways))
        if how in ("limits", "both", "differ"):
            limits[name] = value
        if how == "both":
            requests[name] = value
        elif how in ("requests", "differ"):
            requests[name] = draw(values)
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    if hostile and draw(integers(0, 9)) == 0:
        out["claims"] = [{"name": "gpu"}]
    return out


ENV_NAMES = (
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_IMEX_CHANNELS", "NVIDIA_REQUIRE_CUDA",
    "CUDA_VISIBLE_DEVICES", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY",
    "HF_HOME", "nvidia_visible_devices", "NVIDIA_VISIBLE_DEVICES ", "", "A=B", "$(X)",
)  # fmt: skip
ENV_VALUES = (
    "void", "none", "", "all", "0", "1,2", "VOID", " void", "void\n", "GPU-8a9b0c1d", "$(X)",
    "$$(X)", "0=1G", "0=3840M", "0=1536M", "0=99999999999G", "0=1e999999M", "0=-1M", "1=2G,0=1G",
    "GPU-1=1G", "4096", "10", "25", "50", "100", "101", "-5", "1e2", "⓽", "50.0", "0x10",
    "/tmp/mps", "compute,utility", "cuda>=12.0",
)  # fmt: skip
# Variables a tame pod sets: harmless ones, and device and MPS ones within the rules.
TAME_ENV = (
    ("HF_HOME", "/cache"), ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
    ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "10"), ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G"),
    ("NVIDIA_VISIBLE_DEVICES", "void"), ("OMP_NUM_THREADS", "4"),
)  # fmt: skip
VALUE_FROM = [
    {"configMapKeyRef": {"name": "cm", "key": "k"}},
    {"secretKeyRef": {"name": "s", "key": "k", "optional": True}},
    {"fieldRef": {"fieldPath": "metadata.name"}},
    {"resourceFieldRef": {"resource": "limits.nvidia.com/gpu.shared"}},
    {},
]


_env_names = st.sampled_from(ENV_NAMES) | st.text(max_size=8)
_value_from = st.sampled_from(VALUE_FROM)
_env_text = rarely(huge_strings, st.text(max_size=10))


@st.composite
def env_var(draw: st.DrawFn, *, hostile: bool) -> dict[str, Any]:
    if not hostile:
        name, value = draw(sampled_from(TAME_ENV))
        return {"name": name, "value": value}
    name = draw(_env_names)
    how = draw(integers(0, 11))
    if how == 0:
        return {"name": name, "valueFrom": draw(_value_from)}
    if how == 1:
        return {"name": name}
    if how == 2:
        return {"name": name, "value": draw(_env_text)}
    return {"name": name, "value": draw(sampled_from(ENV_VALUES))}


MOUNT_PATHS = (
    "/data", "/var/run/nvidia-container-devices", "/var/run/nvidia-container-devices/0",
    "/var/run/nvidia-container-devices/../x", "/var/run//nvidia-container-devices", "/dev/nvidia0",
    "/run/nvidia", "", "relative", "var/run/nvidia-container-devices/all",
    "../var/run/nvidia-container-devices/0", "./var/run/nvidia-container-devices",
)  # fmt: skip
CAPABILITIES = ("SYS_ADMIN", "ALL", "NET_ADMIN", "sys_admin", "CAP_SYS_ADMIN", "all", "",
                "SYS_PTRACE", "CHOWN", "cap_kill", "SYS_MODULE")
TAME_NAMES = ("main", "cuda", "sidecar", "init", "c-1", "debugger", "trainer", "loader")

tame_names = st.sampled_from(TAME_NAMES)
container_names = tame_names | st.text(alphabet=st.characters(codec="utf-8"), max_size=10)


_resources = {h: resources(hostile=h) for h in (False, True)}
_envs = {h: st.lists(env_var(hostile=h), max_size=4) for h in (False, True)}


@st.composite
def containers(draw: st.DrawFn, *, hostile: bool) -> dict[str, Any]:
    """A container, its name left to the caller (`named`)."""
    c: dict[str, Any] = {"image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    if draw(integers(0, 4)) > 0:
        c["resources"] = draw(_resources[hostile])
    if draw(booleans):
        c["env"] = draw(_envs[hostile])
    if draw(integers(0, 6)) == 0:
        c["envFrom"] = [{"configMapRef": {"name": "settings"}}]
    if draw(integers(0, 4)) == 0:
        paths = st.sampled_from(MOUNT_PATHS if hostile else ["/data", "/cache"])
        c["volumeMounts"] = [
            {"name": draw(sampled_from(("dev", "data", "devices"))), "mountPath": path,
             **({"readOnly": True} if draw(booleans) else {})}
            for path in draw(lists(paths, min_size=1, max_size=2))
        ]
    if draw(integers(0, 4)) == 0:
        context: dict[str, Any] = {"runAsNonRoot": True}
        if hostile and draw(booleans):
            context["privileged"] = draw(booleans)
        if hostile and draw(booleans):
            context["capabilities"] = {
                "add": draw(lists(sampled_from(CAPABILITIES), max_size=2)),
                "drop": ["ALL"],
            }
        if draw(booleans):
            context["allowPrivilegeEscalation"] = draw(booleans)
        c["securityContext"] = context
    return c


_containers = {h: containers(hostile=h) for h in (False, True)}


def named(draw: st.DrawFn, name: str, *, hostile: bool) -> dict[str, Any]:
    return {"name": name, **draw(_containers[hostile])}


VOLUMES = [
    {"name": "dev", "hostPath": {"path": "/dev"}},
    {"name": "dev", "hostPath": {"path": "/dev/nvidia0", "type": "CharDevice"}},
    {"name": "dev", "hostPath": {"path": "/run/nvidia/driver"}},
    {"name": "dev", "hostPath": {"path": "/var/run/nvidia-persistenced"}},
    {"name": "dev", "hostPath": {"path": "/"}},
    {"name": "dev", "hostPath": {"path": "/dev/../dev/nvidiactl"}},
    {"name": "data", "hostPath": {"path": "/srv/data"}},
    {"name": "dev", "hostPath": {"path": "/proc/self/root/run/nvidia/mps"}},
    {"name": "dev", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
    {"name": "data", "hostPath": {"path": "models"}},
    {"name": "data", "emptyDir": {}},
    {"name": "devices", "configMap": {"name": "devices"}},
]
TAME_VOLUMES = [
    {"name": "data", "emptyDir": {}},
    {"name": "cache", "persistentVolumeClaim": {"claimName": "cache"}},
]
PROFILES = ("small", "medium", "half", "quarter", "large", "nope", "", "Small", " small")
ANNOTATION_KEYS = (
    "gpu-share.io/mutations", "gpu-share.io/policy", "cdi.k8s.io/gpu", "a~b/c~1d", "~", "/",
    "x/y/z", "",
)  # fmt: skip


_profiles = {
    False: st.sampled_from(PROFILES[:4]),
    True: rarely(huge_strings, st.sampled_from(PROFILES) | st.text(max_size=5)),
}


@st.composite
def object_meta(draw: st.DrawFn, *, hostile: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": draw(sampled_from(("p", "train", "w")))}
    meta["namespace"] = "team-a"
    annotations: dict[str, Any] = {}
    if draw(booleans):
        annotations["gpu-share.io/profile"] = draw(_profiles[hostile])
    keys = ANNOTATION_KEYS if hostile else ["example.com/team", "a~b/c~1d", "x/y"]
    for key in draw(lists(sampled_from(keys), max_size=2)):
        annotations[key] = draw(sampled_from(("tolerations", "default", "x", "")))
    if annotations or draw(integers(0, 3)) == 0:
        meta["annotations"] = annotations
    if draw(booleans):
        meta["labels"] = {"app": "x"}
    return meta


_tolerations = st.lists(st.sampled_from(TOLERATIONS), max_size=3)
_label_keys = st.lists(st.sampled_from(tuple(sorted(LABELS))), max_size=3, unique=True)
_label_values = {k: st.sampled_from(tuple(v)) for k, v in LABELS.items()}
_volumes = {
    True: st.lists(st.sampled_from(VOLUMES), max_size=3),
    False: st.lists(st.sampled_from(TAME_VOLUMES), max_size=3),
}


_container_names = {
    False: st.lists(tame_names, min_size=1, max_size=5, unique=True),
    True: st.lists(container_names, min_size=1, max_size=5, unique=True),
}


@st.composite
def pod_specs(draw: st.DrawFn, *, hostile: bool) -> dict[str, Any]:
    names = draw(_container_names[hostile])
    if hostile and draw(integers(0, 9)) == 0:
        names.append(names[0])  # two containers of one name: invalid, but it can be sent
    split = draw(integers(0, len(names) - 1))
    spec: dict[str, Any] = {"containers": [named(draw, n, hostile=hostile) for n in names[split:]]}
    if split:
        spec["initContainers"] = [named(draw, n, hostile=hostile) for n in names[:split]]
    if draw(booleans):
        spec["tolerations"] = draw(_tolerations)
    if draw(integers(0, 3)) == 0:
        keys = draw(_label_keys)
        spec["nodeSelector"] = {k: draw(_label_values[k]) for k in keys}
    if draw(integers(0, 3)) == 0:
        spec["affinity"] = draw(affinity())
    runtimes = [None, None, None, "nvidia", "runc", "", "NVIDIA"] if hostile else [None, "nvidia"]
    runtime = draw(sampled_from(runtimes))
    if runtime is not None:
        spec["runtimeClassName"] = runtime
    if hostile and draw(integers(0, 6)) == 0:
        spec[draw(sampled_from(("hostPID", "hostIPC", "hostNetwork")))] = draw(booleans)
    if draw(integers(0, 3)) == 0:
        spec["volumes"] = draw(_volumes[hostile])
    if hostile and draw(integers(0, 9)) == 0:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "a-gpu"}]
    if draw(integers(0, 5)) == 0:
        spec["restartPolicy"] = "Never"
    return spec


_metas = {h: object_meta(hostile=h) for h in (False, True)}
_specs = {h: pod_specs(hostile=h) for h in (False, True)}


@st.composite
def pod_objects(draw: st.DrawFn, *, hostile: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": draw(_metas[hostile]),
        "spec": draw(_specs[hostile]),
    }


@st.composite
def pod_templates(draw: st.DrawFn, *, hostile: bool) -> dict[str, Any]:
    meta = draw(_metas[hostile])
    meta.pop("name")
    meta.pop("namespace")
    return {"metadata": meta, "spec": draw(_specs[hostile])}


_templates = {h: pod_templates(hostile=h) for h in (False, True)}


def _place(
    node: dict[str, Any], steps: tuple[str, ...], make: Callable[[], Any], count: int
) -> None:
    """Put templates made by `make` where `steps` (a `workload_kinds.Kind` path) says, `count` of
    them at a `[]` or `{}`; a second path into the same object adds to what the first made."""
    key, rest = steps[0], steps[1:]
    if not rest:
        node[key] = make()
        return
    if rest[0] == workload_kinds.EACH_ITEM:
        if not rest[1:]:
            node[key] = [make() for _ in range(count)]
            return
        items = node.setdefault(key, [])
        items.extend({} for _ in range(count - len(items)))
        for item in items:
            _place(item, rest[1:], make, count)
        return
    if rest[0] == workload_kinds.EACH_VALUE:
        names = ["Master", "Worker", "Launcher"][:count]
        if not rest[1:]:
            node[key] = {name: make() for name in names}
            return
        values = node.setdefault(key, {})
        for name in names:
            _place(values.setdefault(name, {}), rest[1:], make, count)
        return
    _place(node.setdefault(key, {}), rest, make, count)


@st.composite
def workloads(draw: st.DrawFn, kind: workload_kinds.Kind, *, hostile: bool) -> dict[str, Any]:
    version = draw(sampled_from(kind.versions))
    obj: dict[str, Any] = {
        "apiVersion": f"{kind.group}/{version}" if kind.group else version,
        "kind": kind.kind,
        "metadata": draw(_metas[hostile]),
        "spec": {},
    }
    count = draw(integers(1, 2))
    template = _templates[hostile]
    for steps in kind.paths:
        _place(obj, steps, lambda: draw(template), count)
    if draw(booleans):
        obj["spec"]["replicas"] = draw(quantities if hostile else integers(0, 5))
    return obj


# --------------------------------------------------------------------------- reviews


def review_doc(
    obj: dict[str, Any] | None,
    *,
    kind: tuple[str, str, str],
    operation: str,
    uid: str,
    old: dict[str, Any] | None = None,
    sub_resource: str = "",
) -> dict[str, Any]:
    """An AdmissionReview v1 request as the API server sends it (kind: group, version, kind)."""
    group, version, name = kind
    resource = {"group": group, "version": version, "resource": kube.plural(name)}
    if sub_resource:
        resource["subResource"] = sub_resource
    meta = (obj or old or {}).get("metadata") or {}
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": name},
        "resource": resource,
        "requestKind": {"group": group, "version": version, "kind": name},
        "requestResource": resource,
        "name": meta.get("name", ""),
        "namespace": "team-a",
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


uids = st.uuids().map(str)
_pods = {h: pod_objects(hostile=h) for h in (False, True)}
_workloads = {(k, h): workloads(k, hostile=h) for k in KINDS for h in (False, True)}
endpoints = st.sampled_from(("mutate", "mutate", "validate"))
policy_names = st.sampled_from((None, None, *POLICIES))


def _copy(value: Any) -> Any:
    """A copy that shares nothing (the strategies reuse constant dicts)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@made_once
@st.composite
def pod_reviews(draw: st.DrawFn, *, hostile: bool | None = None) -> dict[str, Any]:
    """Reviews of Pods: CREATE, `kubectl debug`, other updates, DELETE. `hostile` (drawn when
    None): values outside the rules and outside the grammar, else tame ones."""
    if hostile is None:
        hostile = draw(booleans)
    pod = _copy(draw(_pods[hostile]))
    uid = draw(uids)
    kind = ("", "v1", "Pod")
    how = draw(sampled_from(("create",) * 6 + ("debug", "debug", "update", "delete", "status")))
    if how == "create":
        return review_doc(pod, kind=kind, operation="CREATE", uid=uid)
    if how == "debug":
        new = _copy(pod)
        names = draw(lists(tame_names, min_size=1, max_size=2, unique=True))
        new["spec"]["ephemeralContainers"] = [
            {"targetContainerName": "main", **named(draw, n, hostile=hostile)} for n in names
        ]
        return review_doc(
            new, kind=kind, operation="UPDATE", uid=uid, old=pod, sub_resource="ephemeralcontainers"
        )
    if how == "update":
        return review_doc(pod, kind=kind, operation="UPDATE", uid=uid, old=_copy(pod))
    if how == "delete":
        return review_doc(None, kind=kind, operation="DELETE", uid=uid, old=pod)
    return review_doc(pod, kind=kind, operation="UPDATE", uid=uid, old=_copy(pod),
                      sub_resource="status")  # fmt: skip


@made_once
@st.composite
def workload_reviews(draw: st.DrawFn, *, hostile: bool | None = None) -> dict[str, Any]:
    """Reviews of the workload kinds: CREATE, scaling, other updates, DELETE."""
    if hostile is None:
        hostile = draw(booleans)
    kind = draw(sampled_from(KINDS))
    obj = _copy(draw(_workloads[kind, hostile]))
    group, _, version = obj["apiVersion"].rpartition("/")
    names = (group, version, kind.kind)
    uid = draw(uids)
    how = draw(sampled_from(("create", "create", "create", "scale", "update", "delete")))
    if how == "create":
        return review_doc(obj, kind=names, operation="CREATE", uid=uid)
    if how == "scale":
        # The same templates, another replica count: never refused.
        old = _copy(obj)
        obj["spec"]["replicas"] = draw(integers(0, 9))
        return review_doc(obj, kind=names, operation="UPDATE", uid=uid, old=old)
    if how == "update":
        return review_doc(obj, kind=names, operation="UPDATE", uid=uid,
                          old=_copy(draw(_workloads[kind, hostile])))  # fmt: skip
    return review_doc(None, kind=names, operation="DELETE", uid=uid, old=obj)


def _without_replicas(obj: Any) -> Any:
    if not isinstance(obj, dict) or not isinstance(obj.get("spec"), dict):
        return obj
    return {**obj, "spec": {k: v for k, v in obj["spec"].items() if k != "replicas"}}


def must_allow(doc: dict[str, Any]) -> bool:
    """Whether the contract allows the review `doc` whatever its object holds."""
    request = doc["request"]
    if request["operation"] == "DELETE":
        return True
    if request["operation"] != "UPDATE":
        return False
    if request["kind"]["kind"] == "Pod":
        return request.get("subResource") != "ephemeralcontainers"
    return _without_replicas(request["object"]) == _without_replicas(request["oldObject"])


@st.composite
def pod_cases(draw: st.DrawFn) -> Case:
    doc = draw(pod_reviews())
    path = path_of(draw(endpoints), draw(policy_names))
    request = doc["request"]
    what = f"Pod {request['operation']} {request.get('subResource', '')}".strip()
    return Case(path, JSON, encode(doc), "pod", what, must_allow(doc))


@st.composite
def workload_cases(draw: st.DrawFn) -> Case:
    doc = draw(workload_reviews())
    endpoint = draw(sampled_from(("validate", "validate", "validate", "mutate")))
    path = path_of(endpoint, draw(policy_names))
    request = doc["request"]
    what = f"{request['kind']['kind']} {request['operation']}"
    return Case(path, JSON, encode(doc), "workload", what, must_allow(doc))


# --------------------------------------------------------------------------- mangling

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
small_json = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8,
)  # fmt: skip
# Values that are right somewhere: another apiVersion, kind, operation, subresource, a kind
# that is not the object's.
PLAUSIBLE = (
    "admission.k8s.io/v1beta1", "admission.k8s.io/v1", "admission.k8s.io/v2", "v1", "apps/v1",
    "AdmissionReview", "AdmissionReviewList", "Pod", "Deployment", "apps", "batch", "ray.io",
    "CREATE", "UPDATE", "DELETE", "CONNECT", "create", "PATCH", "ephemeralcontainers", "status",
    "scale", "default", "no-such-policy", "admission.k8s.io/v1\n", "AdmissionReview\r\n",
    {"group": "", "version": "v1", "kind": "Pod"},
    {"group": "apps", "version": "v1", "kind": "Deployment"},
    {"group": "batch", "version": "v1", "kind": "CronJob"},
    {"group": "ray.io", "version": "v1", "kind": "RayJob"},
    {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
)  # fmt: skip
hostile_values = st.one_of(
    st.sampled_from([None, None, 0, -1, 1, True, False, "", [], {}, [None], {"": None}, "⓽"]),
    st.sampled_from(PLAUSIBLE),
    small_json,
    huge_strings,
    deep_values,
    st.sampled_from(RAW_NUMBERS).map(Raw),
    long_digits,
    st.sampled_from(HOSTILE_QUANTITIES),
)


def nodes(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, Any, tuple[Any, ...]]]:
    """(parent, key, path) of every node below `doc`, parents before their children."""
    if isinstance(doc, dict):
        items: Any = doc.items()
    elif isinstance(doc, list):
        items = enumerate(doc)
    else:
        return
    for key, value in list(items):
        yield doc, key, (*path, key)
        yield from nodes(value, (*path, key))


def _in_envelope(path: tuple[Any, ...]) -> bool:
    return not (len(path) > 1 and path[0] == "request" and path[1] in ("object", "oldObject"))


_actions = st.sampled_from(
    ("replace",) * 12 + ("delete",) * 4 + ("wrap",) * 2 + ("extra",) * 4 + ("many",)
)
# Lists of 10,000 items take ~0.3 s to review (~25 us an item): rarely.
_many = st.sampled_from((10, 100, 100, 1000, 1000, 10000))
# What the copies of one "many" may come to, encoded: a little over the body limit (past it
# the answer is 413 whatever the body holds). Unbounded, the count multiplied whatever the
# item held: a 1 MB string put in by another mangling, or a list made by an earlier "many"
# (10,000 copies of 10,000), and a body took tens of GB to build (bench/fuzz.py --seed 4).
MANY_BYTES = MAX_BODY_BYTES + 1024 * 1024
_extra_keys = st.sampled_from(("", "x", "~1", "a/b", "__proto__", "0"))


def _mangle_once(draw: st.DrawFn, doc: dict[str, Any], *, envelope: bool) -> str:
    found = [n for n in nodes(doc) if not envelope or _in_envelope(n[2])]
    if not found:
        return "nothing"
    parent, key, path = found[draw(integers(0, len(found) - 1))]
    action = draw(_actions)
    where = ".".join(str(p) for p in path)
    if action == "replace":
        parent[key] = _copy(draw(hostile_values))
    elif action == "delete":
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
    elif action == "many":
        # A list of many (copies of its first item, or of the node): what a review costs.
        value = parent[key]
        item = value[0] if isinstance(value, list) and value else value
        count = min(draw(_many), max(1, MANY_BYTES // (len(encode(item)) + 1)))
        parent[key] = [_copy(item) for _ in range(count)]
    elif action == "wrap":
        parent[key] = [parent[key]] if draw(booleans) else {"value": parent[key]}
    else:
        value = parent[key]
        if isinstance(value, dict):
            value[draw(_extra_keys)] = _copy(draw(hostile_values))
        elif isinstance(value, list):
            value.append(_copy(draw(hostile_values)))
        else:
            parent[key] = _copy(draw(hostile_values))
    return f"{action} {where}"


@st.composite
def mangled_cases(draw: st.DrawFn, *, envelope: bool = False) -> Case:
    """A review of a pod or a workload with wrong JSON at 1-3 nodes (`envelope`: only in the
    AdmissionReview around the objects)."""
    doc = _copy(draw(pod_reviews() | workload_reviews()))
    done = [_mangle_once(draw, doc, envelope=envelope) for _ in range(draw(integers(1, 3)))]
    path = path_of(draw(endpoints), draw(policy_names))
    source = "envelope" if envelope else "mangled"
    return Case(path, JSON, encode(doc), source, "; ".join(done))


def envelope_cases() -> st.SearchStrategy[Case]:
    return mangled_cases(envelope=True)


# Where a patch writes into a pod (or a template's spec), and what may be there instead of
# what a patch expects: null, empty, another type.
WRITE_TARGETS = (
    ("metadata",), ("metadata", "annotations"), ("metadata", "labels"), ("spec", "tolerations"),
    ("spec", "nodeSelector"), ("spec", "affinity"), ("spec", "affinity", "nodeAffinity"),
    ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
     "nodeSelectorTerms"),
    ("spec", "runtimeClassName"), ("spec", "containers", 0, "env"),
    ("spec", "containers", 0, "env", 0), ("spec", "containers", 0, "resources"),
    ("spec", "containers", 0, "resources", "limits"), ("spec", "initContainers"),
    ("spec", "initContainers", 0, "env"), ("spec", "ephemeralContainers"),
    ("spec", "containers", 0, "securityContext"), ("spec", "volumes"),
    ("spec", "containers", 0, "volumeMounts"),
)  # fmt: skip
HOLLOW = (None, None, {}, [], "", 0, False, [None], {"": None}, [[]], "x", {"0": {}})
_targets = st.lists(st.sampled_from(WRITE_TARGETS), min_size=1, max_size=3)
_hollow = st.sampled_from(HOLLOW)


def _set(node: Any, steps: tuple[Any, ...], value: Any) -> bool:
    """Put `value` at `steps` below `node`, making missing objects on the way; False where a
    step cannot be taken (an index past a list's end, a step into a scalar)."""
    *parents, last = steps
    for step in parents:
        if isinstance(node, dict) and isinstance(step, str):
            node = node.setdefault(step, {})
        elif isinstance(node, list) and isinstance(step, int) and step < len(node):
            node = node[step]
        else:
            return False
    if isinstance(node, dict) and isinstance(last, str):
        node[last] = value
        return True
    if isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = value
        return True
    return False


@st.composite
def hollow_cases(draw: st.DrawFn) -> Case:
    """A tame pod (most are admitted with a patch) with null, empty or mistyped values where
    the patch writes: the patch must still apply, or the pod be refused or a 400."""
    doc = draw(pod_reviews(hostile=False))
    obj = doc["request"]["object"]
    done = []
    for steps in draw(_targets):
        value = _copy(draw(_hollow))
        if obj is not None and _set(obj, steps, value):
            done.append(f"{'.'.join(map(str, steps))}={value!r}")
    path = path_of(draw(endpoints), draw(policy_names))
    return Case(path, JSON, encode(doc), "hollow", "; ".join(done))


# --------------------------------------------------------------------------- raw bytes

RAW_BODIES = (
    b"", b"null", b"[]", b"{}", b"0", b'"x"', b"NaN", b"{", b"}", b'{"apiVersion":', b"true",
    b"\xef\xbb\xbf{}", b"\x00", b"\xff\xfe{\x00}\x00", b'{"a":1}{"b":2}', b"[" * 100000,
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}',
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}',
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}',
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"\xff"}}',
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"\\ud800"}}',
)  # fmt: skip
CONTENT_TYPES = (
    JSON, JSON, JSON, "application/json; charset=utf-8", "Application/JSON", "application/json;",
    "text/plain", "application/x-www-form-urlencoded", "application/merge-patch+json",
    "application/jsonx", "application/yaml", "*/*", "", None,
)  # fmt: skip


_raw_ways = st.sampled_from(("bytes", "text", "fixed", "cut", "tail", "utf16", "badutf8", "type"))


@st.composite
def raw_cases(draw: st.DrawFn) -> Case:
    how = draw(_raw_ways)
    review = encode(draw(pod_reviews(hostile=False)))
    content_type: str | None = JSON
    if how == "bytes":
        body = draw(st.binary(max_size=300))
    elif how == "text":
        body = draw(st.text(max_size=100)).encode("utf-8", "surrogatepass")
    elif how == "fixed":
        body = draw(sampled_from(RAW_BODIES))
    elif how == "cut":
        body = review[: draw(integers(0, len(review) - 1))]
    elif how == "tail":
        body = review + draw(sampled_from((b"x", b" {}", b"\x00", b"]", b"\n\n")))
    elif how == "utf16":
        body = review.decode().encode(draw(sampled_from(("utf-16", "utf-32", "utf-16-le"))))
    elif how == "badutf8":
        at = review.index(b'"name"')
        bad = draw(sampled_from((b"\xff", b"\xc3", b"\xed\xa0\x80")))  # not UTF-8
        body = review[:at] + bad + review[at:]
    else:
        body = review
        content_type = draw(sampled_from(CONTENT_TYPES))
    if how != "type" and draw(integers(0, 3)) == 0:
        content_type = draw(sampled_from(CONTENT_TYPES))
    return Case(path_of(draw(endpoints), draw(policy_names)), content_type, body, "raw", how)


def _padded(review: dict[str, Any], size: int) -> bytes:
    """`review` with an annotation that makes the body exactly `size` bytes."""
    review = _copy(review)
    obj = review["request"]["object"]
    obj.setdefault("metadata", {}).setdefault("annotations", {})["pad"] = ""
    base = len(encode(review))
    obj["metadata"]["annotations"]["pad"] = "x" * max(0, size - base)
    return encode(review)


@st.composite
def oversized_cases(draw: st.DrawFn) -> Case:
    """Bodies just under, at and over the limit: a valid review, padded, or garbage."""
    size = MAX_BODY_BYTES + draw(sampled_from((-4096, 0, 1, 4096, 1024 * 1024)))
    if draw(booleans):
        doc = draw(pod_reviews(hostile=False).filter(lambda d: d["request"]["object"] is not None))
        body = _padded(doc, size)
    else:
        body = b"[" * size
    path = path_of(draw(endpoints), draw(policy_names))
    content_type = draw(sampled_from((JSON, JSON, JSON, "text/plain")))
    return Case(path, content_type, body, "oversized", f"{len(body)} bytes")


def any_cases() -> st.SearchStrategy[Case]:
    """The mix bench/fuzz.py sends."""
    choices = [pod_cases()] * 6 + [workload_cases()] * 4 + [mangled_cases()] * 5
    choices += [hollow_cases()] * 3 + [envelope_cases()] * 1 + [raw_cases()] * 2
    mix = st.sampled_from(choices).flatmap(lambda s: s)
    # About one in 400; not on 0, which each run of hypothesis starts with.
    return st.integers(0, 399).flatmap(lambda n: oversized_cases() if n == 199 else mix)


# --------------------------------------------------------------------------- judging

# Rows of the tables: what an answer was.
ALLOWED = "200 allowed"
DENIED = "200 denied"
SHED = "429"  # only where requests run concurrently (`judge(busy=True)`)
OUTCOMES = (ALLOWED, DENIED, "400", "413", "415", SHED)

# Failure classes.
SERVER_ERROR = "5xx"
UNEXPECTED_STATUS = "unexpected status"
INTERNAL_ERROR = "internal-error denial"
MALFORMED = "malformed answer"
DROPPED = "dropped connection"
BAD_PATCH = "patch does not apply"
NOT_IDEMPOTENT = "patch not idempotent"
REFUSED = "refused what must pass"
FAILURES = (
    SERVER_ERROR, UNEXPECTED_STATUS, INTERNAL_ERROR, MALFORMED, DROPPED, BAD_PATCH, NOT_IDEMPOTENT,
    REFUSED,
)  # fmt: skip

_SAMPLE = orjson.loads(codec.internal_error("u", "REFERENCE"))["response"]["status"]
_INTERNAL_MESSAGE = re.compile(re.escape(_SAMPLE["message"]).replace("REFERENCE", r"\S+"))


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str  # as sent, parameters included
    body: bytes


@dataclass
class Verdict:
    outcome: str
    problems: list[tuple[str, str]] = field(default_factory=list)
    # The review of the patched object, to be sent and judged by `judge_again`.
    again: Case | None = None


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def expected_statuses(case: Case) -> set[int]:
    """What the contract allows for `case`: 415 not JSON, 413 over 7 MiB, else 200 or 400."""
    large = len(case.body) > MAX_BODY_BYTES
    if media_type(case.content_type) != JSON:
        return {415, 413} if large else {415}
    return {413} if large else {200, 400}


def _failed_check(exc: BaseException) -> str:
    """The line of the API server's checks (tests/support/apiserver.py) that failed."""
    frames = traceback.extract_tb(exc.__traceback__)
    line = frames[-1].line if frames else ""
    return f"{type(exc).__name__} {exc} at `{line}`".replace("  ", " ")


def judge(case: Case, answer: Answer, *, busy: bool = False) -> Verdict:
    """What `answer` to `case` is, and what is wrong with it. `busy`: other requests run at
    the same time, so a 429 (review bytes in flight over the limit) is a fair answer."""
    status = answer.status
    if status >= 500:
        return Verdict(str(status), [(SERVER_ERROR, f"{status}: {shorten(answer.body, 500)}")])
    expected = expected_statuses(case) | ({429} if busy else set())
    outcome = str(status)
    problems: list[tuple[str, str]] = []
    if status not in expected:
        problems.append(
            (UNEXPECTED_STATUS, f"{status} where {sorted(expected)}: {shorten(answer.body, 500)}")
        )
    if status != 200:
        problems += _reason_problems(answer)
        return Verdict(outcome, problems)
    verdict = _judge_review(case, answer)
    verdict.problems[:0] = problems
    if case.must_allow and verdict.outcome == DENIED:
        verdict.problems.append((REFUSED, _message_of(answer)))
    return verdict


def _reason_problems(answer: Answer) -> list[tuple[str, str]]:
    """A 4xx has a one-line text reason."""
    if media_type(answer.content_type) != "text/plain":
        return [(MALFORMED, f"{answer.status} with content type {answer.content_type!r}")]
    try:
        text = answer.body.decode()
    except UnicodeDecodeError:
        return [(MALFORMED, f"{answer.status} with a reason that is not UTF-8")]
    line = text.removesuffix("\n")
    if not line.strip() or "\n" in line or "\r" in line:
        return [(MALFORMED, f"{answer.status} without a one-line reason: {shorten(answer.body)}")]
    return []


def _judge_review(case: Case, answer: Answer) -> Verdict:
    if media_type(answer.content_type) != JSON:
        return Verdict("200", [(MALFORMED, f"200 with content type {answer.content_type!r}")])
    uid = codec.uid_of(case.body)
    if uid is None:
        return Verdict("200", [(MALFORMED, "200 for a body without a request uid")])
    try:
        review = orjson.loads(answer.body)
        response = apiserver.answer(review, uid)
    except (orjson.JSONDecodeError, AssertionError, KeyError, TypeError) as exc:
        detail = f"{_failed_check(exc)}: {shorten(answer.body, 1000)}"
        return Verdict("200", [(MALFORMED, detail)])
    if not response["allowed"]:
        status = response["status"]
        if status.get("code") == _SAMPLE["code"] or _INTERNAL_MESSAGE.search(status["message"]):
            return Verdict(DENIED, [(INTERNAL_ERROR, status["message"])])
        return Verdict(DENIED)
    if "patch" not in response:
        return Verdict(ALLOWED)
    try:
        patch = orjson.loads(base64.b64decode(response["patch"], validate=True))
    except (binascii.Error, orjson.JSONDecodeError) as exc:
        return Verdict(ALLOWED, [(BAD_PATCH, f"the patch does not decode: {exc}")])
    if not patch:
        return Verdict(ALLOWED)
    doc = orjson.loads(case.body)
    try:
        # In place: the object may be nested deeper than copy.deepcopy can follow.
        patched = jsonpatch.JsonPatch(patch).apply(doc["request"]["object"], in_place=True)
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}; patch {shorten(orjson.dumps(patch), 2000)}"
        return Verdict(ALLOWED, [(BAD_PATCH, detail)])
    doc["request"]["object"] = patched
    try:
        body = orjson.dumps(doc)
    except orjson.JSONEncodeError:
        return Verdict(ALLOWED)  # deeper than orjson writes: not reviewed again
    if len(body) > MAX_BODY_BYTES:
        return Verdict(ALLOWED)  # the patch took it over the limit: it cannot be sent again
    again = Case(case.path, case.content_type, body, "again", f"patched {case.source}")
    return Verdict(ALLOWED, again=again)


def judge_again(case: Case, answer: Answer, *, busy: bool = False) -> Verdict:
    """The review of a patched object: allowed, with no more to patch (idempotent)."""
    verdict = judge(case, answer, busy=busy)
    if answer.status == 429 and busy:
        return verdict
    if verdict.outcome != ALLOWED or verdict.again is not None:
        detail = verdict.outcome
        if verdict.again is not None:
            detail = f"the second pass patches again: {_patch_of(answer)}"
        elif answer.status == 200:
            detail = f"the second pass answered {shorten(answer.body, 2000)}"
        verdict.problems.append((NOT_IDEMPOTENT, detail))
    return verdict


def _message_of(answer: Answer) -> str:
    return str(orjson.loads(answer.body)["response"]["status"]["message"])


def _patch_of(answer: Answer) -> str:
    response = orjson.loads(answer.body)["response"]
    return base64.b64decode(response["patch"]).decode()


def report(case: Case, problems: list[tuple[str, str]], answer: Answer | None = None) -> str:
    """What a person needs to reproduce a failure."""
    lines = [f"{kind}: {detail}" for kind, detail in problems]
    lines.append(
        f"request: POST {case.path} Content-Type: {case.content_type!r}"
        f" ({case.source}: {case.what})"
    )
    lines.append(f"body: {shorten(case.body)}")
    if answer is not None:
        lines.append(f"answer: {answer.status} {answer.content_type} {shorten(answer.body, 1000)}")
    return "\n".join(lines)
