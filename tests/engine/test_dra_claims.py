"""ResourceClaims and ResourceClaimTemplates under a policy's `dra` section, each
rule through three doors.

1. the core: `reviewing.admit` with group resource.k8s.io, mutate then validate, as the
   endpoints run it;
2. the API server (tests/support/apiserver.py) against the rendered configurations, calling the
   real application over TLS: the rules (CREATE, v1) and the matchConditions decide whether
   the claim reaches the webhook at all, so a refusal the configurations never send fails;
3. `gpu-share-webhook mutate -f FILE -l gpu-share.io/policy=NAME`: the refusal on stderr
   with its rule, the exit code of a refused pod; the patched claim on stdout.

The objects are the documented examples of NVIDIA's GPU DRA driver (tests/support/dra_objects.py),
each as written or with the one field a row is about changed. The policies are the shipped
`dra` one and a few built here (`LAB`), each written as a policy file is.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.support import apiserver, kube
from tests.support import deploy_helpers as dh
from tests.support import dra_objects as dra
from tests.support import server_helpers as h
from webhook import cli
from webhook.engine import reviewing, rules
from webhook.engine.decision import Decision
from webhook.policy import names, policies
from webhook.server import app as server
from webhook.server import codec
from webhook.tools import rendering

SHIPPED = kube.REPO / "policies"
GROUP = names.DRA_GROUP

# --------------------------------------------------------------------------- policies

_NODE_CLASSES = [
    {
        "name": "t4-mps",
        "product": "Tesla-T4",
        "strategy": "mps",
        "replicas": 4,
        "memoryMiB": 15360,
        "gpusPerNode": 1,
    },
]
_SMALL = {"small": {"activeThreadPercentage": 10, "pinnedMemoryMiB": 2048}}
_GPU_MPS = {
    "name": "gpu.nvidia.com",
    "allowed": True,
    "sharing": ["MPS"],
    "mps": {"maxActiveThreadPercentage": 50, "maxPinnedMemoryMiB": 8192},
}


def _lab(
    name: str,
    classes: list[dict[str, Any]],
    *,
    profiles: dict[str, Any] | None = None,
    default: str = "small",
    **spec: Any,
) -> str:
    doc = {
        "apiVersion": policies.API_VERSION,
        "kind": policies.KIND,
        "metadata": {"name": name},
        "spec": {
            "nodeClasses": _NODE_CLASSES,
            "profiles": profiles or _SMALL,
            "defaultProfile": default,
            "dra": {"deviceClasses": classes},
            **spec,
        },
    }
    return yaml.safe_dump(doc, sort_keys=False)


def _shipped_dra(name: str, **spec: Any) -> str:
    """The shipped `dra` policy under another name, with `spec` changed (its mode), and
    `addMpsConfig` left to its default: the webhook adds the profile's MPS configuration to
    a request of a class that allows MPS and has none (the shipped policy adds nothing)."""
    doc = yaml.safe_load((SHIPPED / "dra.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"].update(spec)
    for c in doc["spec"]["dra"]["deviceClasses"]:
        c.pop("addMpsConfig", None)
    return yaml.safe_dump(doc, sort_keys=False)


# Policies built for the rows the shipped one cannot show.
LAB = {
    # Full GPUs with no sharing strategy; MIG time-sliced too; VFIO open.
    "dra-open": _lab(
        "dra-open",
        [
            {"name": "gpu.nvidia.com", "allowed": True},
            {"name": "mig.nvidia.com", "allowed": True, "sharing": ["MPS", "TimeSlicing"]},
            {"name": "vfio.gpu.nvidia.com", "allowed": True},
        ],
    ),
    # A ceiling on consumable capacity (the driver's ConsumableShares, `memory` mode).
    "dra-capacity": _lab("dra-capacity", [{**_GPU_MPS, "capacity": {"memory": "8Gi"}}]),
    # A default profile above the class's ceiling (within the node class's, as a policy
    # must have it), and one that sets threads only.
    "dra-large-profile": _lab(
        "dra-large-profile",
        [{**_GPU_MPS, "mps": {"maxActiveThreadPercentage": 20, "maxPinnedMemoryMiB": 8192}}],
        profiles={
            "large": {"activeThreadPercentage": 25, "pinnedMemoryMiB": 2048},
            "threads-only": {"activeThreadPercentage": 20},
        },
        default="large",
    ),
    # Lists full GPUs only: NVIDIA's other classes stay closed.
    "dra-gpu-only": _lab("dra-gpu-only", [{**_GPU_MPS, "sharing": ["MPS", "TimeSlicing"]}]),
    # Full GPUs that are never given whole: each request must end with an MPS
    # configuration, written by the user or added by the webhook.
    "dra-mps-required": _lab(
        "dra-mps-required", [{**_GPU_MPS, "allowWholeDevice": False, "addMpsConfig": False}]
    ),
    "dra-mps-added": _lab("dra-mps-added", [{**_GPU_MPS, "allowWholeDevice": False}]),
    # The shipped policy as it adds the profile's MPS configuration; rolled out in warn and
    # dry-run mode, and with one rule warned.
    "dra-mps": _shipped_dra("dra-mps"),
    "dra-warn": _shipped_dra("dra-warn", mode="warn"),
    "dra-dry-run": _shipped_dra("dra-dry-run", mode="dry-run"),
    "dra-rule-warn": _shipped_dra("dra-rule-warn", ruleModes={"dra-too-many-devices": "warn"}),
}


@pytest.fixture(scope="module")
def loaded() -> policies.PolicySet:
    lab = [kube.load_policy_text(text) for text in LAB.values()]
    return policies.build_set([*kube.shipped().policies.values(), *lab])


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped policies and LAB's, as files, for `mutate`."""
    directory = h.copy_policies(tmp_path_factory.mktemp("dra") / "policies")
    _write_lab(directory)
    return directory


def _write_lab(directory: Path) -> None:
    for name, text in LAB.items():
        (directory / f"{name}.yaml").write_text(text)


# --------------------------------------------------------------------------- objects


def _spec(o: dict[str, Any]) -> dict[str, Any]:
    """The claim spec: a template's `spec.spec`."""
    spec: dict[str, Any] = (
        o["spec"]["spec"] if o["kind"] == names.CLAIM_TEMPLATE_KIND else o["spec"]
    )
    return spec


def _exactly(o: dict[str, Any], i: int = 0) -> dict[str, Any]:
    exactly: dict[str, Any] = _spec(o)["devices"]["requests"][i]["exactly"]
    return exactly


def _parameters(o: dict[str, Any], i: int = 0) -> dict[str, Any]:
    parameters: dict[str, Any] = _spec(o)["devices"]["config"][i]["opaque"]["parameters"]
    return parameters


def _with(name: str, *edits: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    """The documented object `name`, with `edits` applied (each changes it in place)."""
    o = dra.obj(name)
    for edit in edits:
        edit(o)
    return o


def _mps(**mps: Any) -> dict[str, Any]:
    """NVIDIA's MPS template with this `mpsConfig` instead of its own."""
    return _with("mps-template", lambda o: _parameters(o)["sharing"].__setitem__("mpsConfig", mps))


def _sharing(name: str, **sharing: Any) -> dict[str, Any]:
    """The documented object `name` whose first configuration shares by `sharing`."""
    return _with(name, lambda o: _parameters(o).__setitem__("sharing", sharing))


def _configured(name: str, kind: str, **sharing: Any) -> dict[str, Any]:
    """The documented object `name` (one request) with one configuration of `kind` for it."""

    def add(o: dict[str, Any]) -> None:
        request = _spec(o)["devices"]["requests"][0]["name"]
        parameters: dict[str, Any] = {"apiVersion": names.DRA_CONFIG_API_VERSION, "kind": kind}
        if sharing:
            parameters["sharing"] = sharing
        _spec(o)["devices"]["config"] = [
            {
                "requests": [request],
                "opaque": {"driver": "gpu.nvidia.com", "parameters": parameters},
            }
        ]

    return _with(name, add)


def _annotated(name: str, profile: str, *, where: str = "metadata") -> dict[str, Any]:
    """The documented object `name` with the profile annotation in its `metadata`, or in a
    template's `spec.metadata`."""

    def add(o: dict[str, Any]) -> None:
        meta = o["spec"].setdefault("metadata", {}) if where == "spec" else o["metadata"]
        meta["annotations"] = {names.ANNOTATION_PROFILE: profile}

    return _with(name, add)


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Row:
    rule: str
    obj: dict[str, Any]
    policy: str
    # The refusal, whole, as the API server shows it to the user.
    message: str
    # Refused by the validating endpoint only: the mutating one adds what it asks for. The
    # API server's chain reaches it when the mutating configuration is gone (it did not run);
    # `mutate` always mutates, so that door does not apply.
    validating_only: bool = False
    # The warnings the mutating review gives besides (`mutate` prints them).
    warnings: tuple[str, ...] = ()


ALLOW_CLASS = (
    ". Ask for one of those, or ask the cluster admin to allow the class in the"
    " policy's dra section"
)
MPS_AT = "opaque.parameters.sharing.mpsConfig"
# The warning for a configuration that names a firstAvailable request (template's field).
PARENT_NAMED = (
    "spec.spec.devices.config[0].requests: gpu reaches no subrequest on NVIDIA's driver; name"
    " {subs}"
)


ROWS: dict[str, Row] = {
    # ------------------------------------------------------------ dra-class-not-allowed
    "class-not-allowed": Row(
        "dra-class-not-allowed",
        dra.obj("vfio-template"),
        "dra",
        'claim template "single-gpu" request "gpu": spec.spec.devices.requests[0].exactly'
        '.deviceClassName: device class "vfio.gpu.nvidia.com" is not one policy "dra" allows'
        f" (it allows: gpu.nvidia.com, mig.nvidia.com){ALLOW_CLASS}"
        " (rule dra-class-not-allowed)",
    ),
    # NVIDIA's classes are governed (and closed) where a policy does not list them.
    "class-not-listed": Row(
        "dra-class-not-allowed",
        dra.obj("mig-profile-template"),
        "dra-gpu-only",
        'claim template "mig-profile" request "mig": spec.spec.devices.requests[0].exactly'
        '.deviceClassName: device class "mig.nvidia.com" is not one policy "dra-gpu-only"'
        f" allows (it allows: gpu.nvidia.com){ALLOW_CLASS} (rule dra-class-not-allowed)",
    ),
    # firstAvailable: the subrequest of the closed class is refused, by its own name.
    "class-not-allowed-subrequest": Row(
        "dra-class-not-allowed",
        dra.obj("first-available-template"),
        "dra-gpu-only",
        'claim template "a100-or-mig" subrequest "gpu/mig": spec.spec.devices.requests[0]'
        '.firstAvailable[1].deviceClassName: device class "mig.nvidia.com" is not one policy'
        f' "dra-gpu-only" allows (it allows: gpu.nvidia.com){ALLOW_CLASS}'
        " (rule dra-class-not-allowed)",
    ),
    # ------------------------------------------------------------ dra-all-devices
    "all-devices": Row(
        "dra-all-devices",
        _with("single-gpu-claim", lambda o: _exactly(o).update(allocationMode="All")),
        "dra",
        'claim "single-gpu" request "gpu": spec.devices.requests[0].exactly.allocationMode:'
        ' All asks for every matching device of class "gpu.nvidia.com" on the node. Remove'
        " it, and set count (at most 1) (rule dra-all-devices)",
    ),
    # "Clients must refuse to handle requests with unknown modes" (the v1 API's words).
    "unknown-allocation-mode": Row(
        "dra-all-devices",
        _with("single-gpu-claim", lambda o: _exactly(o).update(allocationMode="Some")),
        "dra",
        'claim "single-gpu" request "gpu": spec.devices.requests[0].exactly.allocationMode:'
        ' "Some" is no allocation mode the webhook knows. Use ExactCount, with count at most'
        " 1 (rule dra-all-devices)",
    ),
    # ------------------------------------------------------------ dra-admin-access
    "admin-access": Row(
        "dra-admin-access",
        _with("single-gpu-claim", lambda o: _exactly(o).update(adminAccess=True)),
        "dra",
        'claim "single-gpu" request "gpu": spec.devices.requests[0].exactly.adminAccess:'
        ' admin access reaches devices of class "gpu.nvidia.com" that are in use by others,'
        " outside any allocation. Remove it (monitoring tools belong in a namespace that has"
        " not opted in) (rule dra-admin-access)",
    ),
    # ------------------------------------------------------------ dra-device-tolerations
    # A toleration of every device taint (DRADeviceTaints): GPUs an admin took out of use.
    "device-tolerations": Row(
        "dra-device-tolerations",
        _with(
            "single-gpu-claim",
            lambda o: _exactly(o).update(tolerations=[{"operator": "Exists"}]),
        ),
        "dra",
        'claim "single-gpu" request "gpu": spec.devices.requests[0].exactly.tolerations:'
        ' tolerating device taints reaches GPUs of class "gpu.nvidia.com" that an admin took'
        " out of use (maintenance, reserved, unhealthy). Remove them (rule"
        " dra-device-tolerations)",
    ),
    # ------------------------------------------------------------ dra-too-many-devices
    # NVIDIA's count example, as written.
    "too-many-devices": Row(
        "dra-too-many-devices",
        dra.obj("count-template"),
        "dra",
        'claim template "double-gpu" request "gpu": spec.spec.devices.requests[0].exactly'
        '.count: 2 devices of class "gpu.nvidia.com"; policy "dra" allows at most 1 per'
        " request. Set count to 1 or less (rule dra-too-many-devices)",
    ),
    "too-many-devices-subrequest": Row(
        "dra-too-many-devices",
        _with(
            "first-available-template",
            lambda o: _spec(o)["devices"]["requests"][0]["firstAvailable"][0].update(count=2),
        ),
        "dra",
        'claim template "a100-or-mig" subrequest "gpu/full": spec.spec.devices.requests[0]'
        '.firstAvailable[0].count: 2 devices of class "gpu.nvidia.com"; policy "dra" allows'
        " at most 1 per request. Set count to 1 or less (rule dra-too-many-devices)",
    ),
    # NVIDIA's MIG example (gpu-test4) with a fifth MIG device: the shipped policy allows
    # four per claim.
    "too-many-devices-per-claim": Row(
        "dra-too-many-devices",
        _with(
            "mig-devices-template",
            lambda o: _spec(o)["devices"]["requests"].append(
                {"name": "mig-1g-5gb-2", "exactly": {"deviceClassName": "mig.nvidia.com"}}
            ),
        ),
        "dra",
        'claim template "mig-devices": spec.spec.devices.requests: 5 devices of class'
        ' "mig.nvidia.com" in 5 requests; policy "dra" allows at most 4 per claim. Ask for 4'
        " or fewer in all (rule dra-too-many-devices)",
    ),
    # ------------------------------------------------------------ dra-capacity
    "capacity-above": Row(
        "dra-capacity",
        _with(
            "memory-sharing-template",
            lambda o: _exactly(o)["capacity"]["requests"].update(memory="16Gi"),
        ),
        "dra-capacity",
        'claim template "gpu-4gi" request "gpu": spec.spec.devices.requests[0].exactly'
        '.capacity.requests[memory]: "16Gi" is more than policy "dra-capacity" allows of'
        ' class "gpu.nvidia.com" (8Gi). Ask for 8Gi or less (rule dra-capacity)',
    ),
    # Nothing consumed of a shared device: free use of it, whatever the ceiling.
    "capacity-zero": Row(
        "dra-capacity",
        _with(
            "memory-sharing-template",
            lambda o: _exactly(o)["capacity"]["requests"].update(memory="0"),
        ),
        "dra-capacity",
        'claim template "gpu-4gi" request "gpu": spec.spec.devices.requests[0].exactly'
        '.capacity.requests[memory]: "0" is not more than zero. Set a quantity of at most 8Gi'
        " (rule dra-capacity)",
    ),
    # The guide's memory selector filters devices; it consumes none of a shared one.
    "capacity-missing": Row(
        "dra-capacity",
        dra.obj("large-gpu-template"),
        "dra-capacity",
        'claim template "large-gpu" request "gpu": spec.spec.devices.requests[0].exactly'
        ".capacity.requests: no memory asked for; without it the driver may give the whole"
        ' device of class "gpu.nvidia.com". Set capacity.requests.memory to at most 8Gi'
        " (rule dra-capacity)",
    ),
    # The capacity qualified by the driver's domain is the same capacity.
    "capacity-qualified": Row(
        "dra-capacity",
        _with(
            "memory-sharing-template",
            lambda o: _exactly(o)["capacity"].__setitem__(
                "requests", {"gpu.nvidia.com/memory": "16Gi"}
            ),
        ),
        "dra-capacity",
        'claim template "gpu-4gi" request "gpu": spec.spec.devices.requests[0].exactly'
        '.capacity.requests[gpu.nvidia.com/memory]: "16Gi" is more than policy "dra-capacity"'
        ' allows of class "gpu.nvidia.com" (8Gi). Ask for 8Gi or less (rule dra-capacity)',
    ),
    "capacity-not-a-quantity": Row(
        "dra-capacity",
        _with(
            "memory-sharing-template",
            lambda o: _exactly(o)["capacity"]["requests"].update(memory="lots"),
        ),
        "dra-capacity",
        'claim template "gpu-4gi" request "gpu": spec.spec.devices.requests[0].exactly'
        '.capacity.requests[memory]: "lots" is not a quantity (the API server\'s grammar: a'
        " number, optional sign, optional suffix such as 1, 500m, 2Gi, 1e3). Set a quantity"
        " of at most 8Gi (rule dra-capacity)",
    ),
    # ------------------------------------------------------------ dra-config
    "config-kind": Row(
        "dra-config",
        _with("timeslicing-claim", lambda o: _parameters(o).update(kind="MigDeviceConfig")),
        "dra",
        'claim "ts-gpu" request "ts-gpu": spec.devices.config[0].opaque.parameters:'
        ' "resource.nvidia.com/v1beta1" "MigDeviceConfig" is not what the gpu.nvidia.com'
        ' driver takes for devices of class "gpu.nvidia.com" (the claim would fail on the'
        " node). Write apiVersion resource.nvidia.com/v1beta1, kind GpuConfig"
        " (rule dra-config)",
    ),
    # The API of the driver's older demos (gpu.nvidia.com/v1alpha1), which it reads no more.
    "config-api-version": Row(
        "dra-config",
        _with(
            "timeslicing-claim",
            lambda o: _parameters(o).update(apiVersion="gpu.nvidia.com/v1alpha1"),
        ),
        "dra",
        'claim "ts-gpu" request "ts-gpu": spec.devices.config[0].opaque.parameters:'
        ' "gpu.nvidia.com/v1alpha1" "GpuConfig" is not what the gpu.nvidia.com driver takes'
        ' for devices of class "gpu.nvidia.com" (the claim would fail on the node). Write'
        " apiVersion resource.nvidia.com/v1beta1, kind GpuConfig (rule dra-config)",
    ),
    # A configuration naming the request applies to each subrequest: a GpuConfig to the MIG
    # one is what the driver refuses ("cannot apply GpuConfig to device ... of type mig").
    "config-kind-of-a-subrequest": Row(
        "dra-config",
        _with(
            "first-available-template",
            lambda o: _spec(o)["devices"].__setitem__(
                "config", copy.deepcopy(_spec(dra.obj("timeslicing-claim"))["devices"]["config"])
            ),
            lambda o: _spec(o)["devices"]["config"][0].__setitem__("requests", ["gpu"]),
        ),
        "dra",
        'claim template "a100-or-mig" subrequest "gpu/mig": spec.spec.devices.config[0]'
        '.opaque.parameters: "resource.nvidia.com/v1beta1" "GpuConfig" is not what the'
        ' gpu.nvidia.com driver takes for devices of class "mig.nvidia.com" (the claim would'
        " fail on the node). Write apiVersion resource.nvidia.com/v1beta1, kind"
        " MigDeviceConfig (rule dra-config)",
        warnings=(PARENT_NAMED.format(subs="gpu/full, gpu/mig"),),
    ),
    # The driver decodes strictly: a misspelt field fails the claim on the node.
    "config-unknown-field": Row(
        "dra-config",
        _mps(defaultActiveThreadPercentage=50, defaultPinnedDeviceMemoryLimits="4Gi"),
        "dra",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[0]'
        f".{MPS_AT}.defaultPinnedDeviceMemoryLimits: is no field the driver reads (it refuses"
        " unknown fields, on the node); remove it (rule dra-config)",
    ),
    # Fabric is a strategy the driver's API names and refuses.
    "config-unknown-strategy": Row(
        "dra-config",
        _sharing("timeslicing-claim", strategy="Fabric"),
        "dra",
        'claim "ts-gpu" request "ts-gpu": spec.devices.config[0].opaque.parameters.sharing'
        '.strategy: "Fabric": the driver knows TimeSlicing and MPS (rule dra-config)',
    ),
    "config-time-slice-on-mig": Row(
        "dra-config",
        _configured(
            "mig-profile-template",
            "MigDeviceConfig",
            strategy="TimeSlicing",
            timeSlicingConfig={"interval": "Long"},
        ),
        "dra-open",
        'claim template "mig-profile" request "mig": spec.spec.devices.config[0].opaque'
        ".parameters.sharing.timeSlicingConfig: MIG devices take no time-slice; remove it"
        " (rule dra-config)",
    ),
    "config-mps-with-time-slicing": Row(
        "dra-config",
        _with(
            "timeslicing-claim",
            lambda o: _parameters(o)["sharing"].update(
                mpsConfig={"defaultActiveThreadPercentage": 50}
            ),
        ),
        "dra",
        'claim "ts-gpu" request "ts-gpu": spec.devices.config[0].opaque.parameters.sharing'
        ".mpsConfig: is for strategy MPS; remove it (rule dra-config)",
    ),
    "config-time-slicing-with-mps": Row(
        "dra-config",
        _with(
            "mps-template",
            lambda o: _parameters(o)["sharing"].update(timeSlicingConfig={"interval": "Long"}),
            lambda o: _parameters(o)["sharing"]["mpsConfig"].update(
                defaultPinnedDeviceMemoryLimit="8Gi"
            ),
        ),
        "dra",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[0].opaque'
        ".parameters.sharing.timeSlicingConfig: is for strategy TimeSlicing; remove it"
        " (rule dra-config)",
    ),
    "config-interval": Row(
        "dra-config",
        _with(
            "timeslicing-claim",
            lambda o: _parameters(o)["sharing"]["timeSlicingConfig"].update(interval="VeryLong"),
        ),
        "dra",
        'claim "ts-gpu" request "ts-gpu": spec.devices.config[0].opaque.parameters.sharing'
        '.timeSlicingConfig.interval: "VeryLong": the driver knows Default, Short, Medium,'
        " Long (rule dra-config)",
    ),
    "config-vfio-sharing": Row(
        "dra-config",
        _configured("vfio-template", "VfioDeviceConfig", strategy="TimeSlicing"),
        "dra-open",
        'claim template "single-gpu" request "gpu": spec.spec.devices.config[0].opaque'
        ".parameters.sharing: passthrough devices are not shared; remove it (rule dra-config)",
    ),
    # VfioDeviceConfig's IOMMU section, as the driver checks it.
    "config-iommu-backend": Row(
        "dra-config",
        _with(
            "vfio-config-template",
            lambda o: _parameters(o)["iommu"].update(backendPolicy="IommuFD"),
        ),
        "dra-open",
        'claim template "single-gpu-full-vfioconfig" request "gpu": spec.spec.devices'
        '.config[0].opaque.parameters.iommu.backendPolicy: "IommuFD": the driver knows'
        " PreferIommuFD and LegacyOnly (and refuses any other) (rule dra-config)",
    ),
    "config-iommu-unknown-field": Row(
        "dra-config",
        _with(
            "vfio-config-template",
            lambda o: _parameters(o)["iommu"].update(enableApiDevice=True),
        ),
        "dra-open",
        'claim template "single-gpu-full-vfioconfig" request "gpu": spec.spec.devices'
        ".config[0].opaque.parameters.iommu.enableApiDevice: is no field the driver reads (it"
        " refuses unknown fields, on the node); remove it (rule dra-config)",
    ),
    # A full GPU's field on a passthrough device.
    "config-vfio-unknown-field": Row(
        "dra-config",
        _with("vfio-config-template", lambda o: _parameters(o).update(mig={})),
        "dra-open",
        'claim template "single-gpu-full-vfioconfig" request "gpu": spec.spec.devices'
        ".config[0].opaque.parameters.mig: is no field the driver reads (it refuses unknown"
        " fields, on the node); remove it (rule dra-config)",
    ),
    "config-not-an-object": Row(
        "dra-config",
        _with(
            "timeslicing-claim",
            lambda o: _spec(o)["devices"]["config"][0]["opaque"].update(parameters="MPS"),
        ),
        "dra",
        'claim "ts-gpu" request "ts-gpu": spec.devices.config[0].opaque.parameters: the'
        " gpu.nvidia.com driver reads an object here, not a string. Write a GpuConfig of"
        " resource.nvidia.com/v1beta1 (rule dra-config)",
    ),
    # ------------------------------------------------------------ dra-sharing
    "sharing-not-allowed": Row(
        "dra-sharing",
        _configured("mig-profile-template", "MigDeviceConfig", strategy="TimeSlicing"),
        "dra",
        'claim template "mig-profile" request "mig": spec.spec.devices.config[0].opaque'
        '.parameters.sharing.strategy: TimeSlicing is not a sharing strategy policy "dra" allows on'
        ' class "mig.nvidia.com". Use MPS, or remove the sharing section (rule dra-sharing)',
    ),
    # NVIDIA's time-sliced GPU where the class allows no strategy.
    "sharing-none-allowed": Row(
        "dra-sharing",
        dra.obj("timeslicing-claim"),
        "dra-open",
        'claim "ts-gpu" request "ts-gpu": spec.devices.config[0].opaque.parameters.sharing'
        '.strategy: TimeSlicing is not a sharing strategy policy "dra-open" allows on class'
        ' "gpu.nvidia.com". Remove the sharing section (the driver then time-slices by'
        " default) (rule dra-sharing)",
    ),
    # ------------------------------------------------------------ dra-mps-limits
    # NVIDIA's MPS example, as written: 10Gi of pinned memory, above the shipped 8192Mi.
    "mps-pinned-above": Row(
        "dra-mps-limits",
        dra.obj("mps-template"),
        "dra",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[0]'
        f'.{MPS_AT}.defaultPinnedDeviceMemoryLimit: "10Gi" is above the ceiling of class'
        ' "gpu.nvidia.com" in policy "dra" (8192Mi). Set it to 8192Mi or less'
        " (rule dra-mps-limits)",
    ),
    "mps-threads-above": Row(
        "dra-mps-limits",
        _mps(defaultActiveThreadPercentage=75, defaultPinnedDeviceMemoryLimit="8Gi"),
        "dra",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[0]'
        f".{MPS_AT}.defaultActiveThreadPercentage: 75% is above the ceiling of class"
        ' "gpu.nvidia.com" in policy "dra" (50%). Set defaultActiveThreadPercentage to 50 or'
        " less (rule dra-mps-limits)",
    ),
    "mps-threads-not-a-percentage": Row(
        "dra-mps-limits",
        _mps(defaultActiveThreadPercentage=150, defaultPinnedDeviceMemoryLimit="8Gi"),
        "dra",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[0]'
        f".{MPS_AT}.defaultActiveThreadPercentage: 150 is not a percentage the webhook admits"
        " (a whole number 1..100) (rule dra-mps-limits)",
    ),
    "mps-threads-unset": Row(
        "dra-mps-limits",
        _mps(defaultPinnedDeviceMemoryLimit="8Gi"),
        "dra",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[0]'
        f".{MPS_AT}.defaultActiveThreadPercentage: unset (100%) is above the ceiling of class"
        ' "gpu.nvidia.com" in policy "dra" (50%). Set defaultActiveThreadPercentage to 50 or'
        " less (rule dra-mps-limits)",
    ),
    "mps-pinned-not-a-quantity": Row(
        "dra-mps-limits",
        _mps(defaultActiveThreadPercentage=50, defaultPinnedDeviceMemoryLimit="lots"),
        "dra",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[0]'
        f'.{MPS_AT}.defaultPinnedDeviceMemoryLimit: "lots" is not a quantity (the API'
        " server's grammar: a number, optional sign, optional suffix such as 1, 500m, 2Gi,"
        " 1e3). Write a quantity such as 4Gi (rule dra-mps-limits)",
    ),
    # The driver refuses a limit under 1Mi ("value set too low").
    "mps-pinned-under-1mi": Row(
        "dra-mps-limits",
        _mps(defaultActiveThreadPercentage=50, defaultPinnedDeviceMemoryLimit="512Ki"),
        "dra",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[0]'
        f'.{MPS_AT}.defaultPinnedDeviceMemoryLimit: "512Ki" is under 1Mi, which the driver'
        " refuses. Write a quantity such as 4Gi (rule dra-mps-limits)",
    ),
    "mps-pinned-unset": Row(
        "dra-mps-limits",
        _mps(defaultActiveThreadPercentage=50),
        "dra",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[0]'
        f".{MPS_AT}.defaultPinnedDeviceMemoryLimit: unset, so unlimited; class"
        ' "gpu.nvidia.com" in policy "dra" allows 8192Mi. Set it to 8192Mi or less'
        " (rule dra-mps-limits)",
    ),
    # More entries than an allocation has devices, each by index and by UUID: what a
    # review of every entry would cost grows with the body (the API server bounds the
    # parameters only after the mutating webhooks).
    "mps-per-device-too-many": Row(
        "dra-config",
        _mps(
            defaultActiveThreadPercentage=50,
            defaultPinnedDeviceMemoryLimit="8Gi",
            defaultPerDevicePinnedMemoryLimit={str(i): "1Gi" for i in range(65)},
        ),
        "dra",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[0]'
        f".{MPS_AT}.defaultPerDevicePinnedMemoryLimit: 65 entries; an allocation holds at"
        " most 32 devices, each named by its index or its UUID: write at most 64 (rule"
        " dra-config)",
    ),
    "mps-per-device-above": Row(
        "dra-mps-limits",
        _mps(
            defaultActiveThreadPercentage=50,
            defaultPinnedDeviceMemoryLimit="8Gi",
            defaultPerDevicePinnedMemoryLimit={"0": "16Gi"},
        ),
        "dra",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[0]'
        f'.{MPS_AT}.defaultPerDevicePinnedMemoryLimit[0]: "16Gi" is above the ceiling of'
        ' class "gpu.nvidia.com" in policy "dra" (8192Mi). Set it to 8192Mi or less'
        " (rule dra-mps-limits)",
    ),
    # The profile the mutating webhook would add is above the class's ceiling.
    "mps-profile-above": Row(
        "dra-mps-limits",
        dra.obj("single-gpu-claim"),
        "dra-large-profile",
        'claim "single-gpu" request "gpu": profile "large" gives 25% of threads (ceiling 20%)'
        ' on class "gpu.nvidia.com" of policy "dra-large-profile"'
        " (spec.devices.requests[0].exactly.deviceClassName). Use a smaller profile, or write"
        " an MPS configuration within the ceilings (rule dra-mps-limits)",
    ),
    "mps-config-missing": Row(
        "dra-mps-limits",
        dra.obj("single-gpu-claim"),
        "dra-mps",
        'claim "single-gpu" request "gpu": spec.devices.requests[0].exactly: no MPS'
        ' configuration, where profile "medium" applies; the mutating webhook adds it: it'
        " did not run, or a later change took it away. Create the claim again"
        " (rule dra-mps-limits)",
        validating_only=True,
    ),
    # ------------------------------------------------------------ dra-whole-device
    # NVIDIA's quickstart claim (gpu-test3): no configuration, so the whole GPU.
    "whole-device": Row(
        "dra-whole-device",
        dra.obj("single-gpu-claim"),
        "dra-mps-required",
        'claim "single-gpu" request "gpu": spec.devices.requests[0].exactly: no sharing'
        ' configuration, so the driver gives the whole device; policy "dra-mps-required"'
        ' allows no whole device of class "gpu.nvidia.com". Add a GpuConfig for "gpu" with'
        " sharing strategy MPS (rule dra-whole-device)",
    ),
    "whole-device-configured": Row(
        "dra-whole-device",
        _configured("single-gpu-claim", "GpuConfig"),
        "dra-mps-required",
        'claim "single-gpu" request "gpu": spec.devices.config[0].opaque.parameters: a'
        ' GpuConfig without sharing gives the whole device; policy "dra-mps-required"'
        ' allows no whole device of class "gpu.nvidia.com". Add sharing with strategy MPS'
        " (rule dra-whole-device)",
    ),
    # The driver applies the last configuration that fits: one for every GPU request, after
    # the MPS one of the request, is what the GPU ends with.
    "whole-device-overridden": Row(
        "dra-whole-device",
        _with(
            "mps-template",
            lambda o: _parameters(o)["sharing"]["mpsConfig"].update(
                defaultPinnedDeviceMemoryLimit="8Gi"
            ),
            lambda o: _spec(o)["devices"]["config"].append(
                {
                    "opaque": {
                        "driver": "gpu.nvidia.com",
                        "parameters": {
                            "apiVersion": "resource.nvidia.com/v1beta1",
                            "kind": "GpuConfig",
                        },
                    }
                }
            ),
        ),
        "dra-mps-required",
        'claim template "shared-gpu" request "mps-gpu": spec.spec.devices.config[1].opaque'
        ".parameters: a GpuConfig without sharing gives the whole device; policy"
        ' "dra-mps-required" allows no whole device of class "gpu.nvidia.com". Add sharing'
        " with strategy MPS (rule dra-whole-device)",
    ),
    # A configuration naming the request of a subrequest: NVIDIA's driver does not apply it
    # there, so the GPU is given whole.
    "whole-device-subrequest": Row(
        "dra-whole-device",
        _with(
            "first-available-gpus-template",
            lambda o: _spec(o)["devices"]["requests"][0]["firstAvailable"].pop(1),
            lambda o: _parameters(o).__setitem__(
                "sharing",
                {
                    "strategy": "MPS",
                    "mpsConfig": {
                        "defaultActiveThreadPercentage": 50,
                        "defaultPinnedDeviceMemoryLimit": "8Gi",
                    },
                },
            ),
        ),
        "dra-mps-required",
        'claim template "a100-or-any" subrequest "gpu/a100": spec.spec.devices.requests[0]'
        ".firstAvailable[0]: no sharing configuration (devices.config[0] names request"
        ' "gpu"; the driver applies to the subrequest only a configuration naming'
        ' "gpu/a100"), so the driver gives the whole device; policy "dra-mps-required"'
        ' allows no whole device of class "gpu.nvidia.com". Add a GpuConfig for "gpu/a100"'
        " with sharing strategy MPS (rule dra-whole-device)",
        warnings=(PARENT_NAMED.format(subs="gpu/a100"),),
    ),
    # ------------------------------------------------------------ profile
    "profile-unknown": Row(
        "profile",
        _annotated("single-gpu-claim", "huge"),
        "dra-mps",
        'claim "single-gpu": unknown profile: "huge" (metadata.annotations'
        '[gpu-share.io/profile]); policy "dra-mps" offers: medium, small. Use one of them, or'
        " remove the annotation (rule profile)",
    ),
    # A template's claims carry its spec.metadata: there it is read.
    "profile-unknown-in-a-template": Row(
        "profile",
        _annotated("single-gpu-template", "huge", where="spec"),
        "dra-mps",
        'claim template "single-gpu": unknown profile: "huge" (spec.metadata.annotations'
        '[gpu-share.io/profile]); policy "dra-mps" offers: medium, small. Use one of them, or'
        " remove the annotation (rule profile)",
    ),
    # ------------------------------------------------------------ malformed-object
    "malformed-count": Row(
        names.MALFORMED_RULE,
        _with("single-gpu-claim", lambda o: _exactly(o).update(count="2")),
        "dra",
        'claim "single-gpu": spec.devices.requests[0].exactly.count: must be an integer, not'
        " a string: no Kubernetes object has this shape. Fix the field (the API server would"
        " refuse it too) (rule malformed-object)",
    ),
    "malformed-requests": Row(
        names.MALFORMED_RULE,
        _with(
            "single-gpu-claim",
            lambda o: _spec(o)["devices"].__setitem__("requests", {"gpu": "gpu.nvidia.com"}),
        ),
        "dra",
        'claim "single-gpu": spec.devices.requests: must be a list, not an object: no'
        " Kubernetes object has this shape. Fix the field (the API server would refuse it"
        " too) (rule malformed-object)",
    ),
}
IDS = sorted(ROWS)
# Rows whose object the API server's own schema refuses before any webhook sees it: the
# webhook's answer is for `mutate` and `audit`, which read files.
SCHEMA_REFUSED = {"malformed-count", "malformed-requests", "config-not-an-object"}


def test_every_claim_rule_has_rows() -> None:
    claim_rules = {r.name for r in rules.RULES if r.scope is rules.Scope.CLAIM}
    assert claim_rules == {
        "dra-class-not-allowed",
        "dra-all-devices",
        "dra-admin-access",
        "dra-device-tolerations",
        "dra-too-many-devices",
        "dra-capacity",
        "dra-config",
        "dra-sharing",
        "dra-mps-limits",
        "dra-whole-device",
    }
    assert {row.rule for row in ROWS.values()} == claim_rules | {"profile", names.MALFORMED_RULE}


@pytest.mark.parametrize("name", dra.NAMES)
def test_each_documented_object_is_valid(name: str) -> None:
    """Strict schema of the versions that serve resource.k8s.io/v1, and the client's model."""
    kube.check_valid(dra.obj(name))


@pytest.mark.parametrize("name", IDS)
def test_each_rows_object_is_one_the_api_server_takes_or_refuses_itself(name: str) -> None:
    obj = ROWS[name].obj
    if name in SCHEMA_REFUSED:
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(obj, kube.DRA_VERSIONS[-1], strict=True)
    else:
        kube.check_valid(obj)


# --------------------------------------------------------------------------- door 1: the core


def _admit(
    obj: dict[str, Any], policy: policies.Policy, endpoint: str, operation: str = "CREATE"
) -> Decision:
    return reviewing.admit(
        obj,
        policy=policy,
        endpoint=endpoint,  # type: ignore[arg-type]
        group=GROUP,
        kind=obj["kind"],
        operation=operation,
        old=obj if operation == "UPDATE" else None,
    )


@pytest.mark.parametrize("name", IDS)
def test_the_core_refuses(name: str, loaded: policies.PolicySet) -> None:
    row = ROWS[name]
    policy = loaded.governing(row.policy)
    obj = kube.as_served(row.obj)
    mutated = _admit(obj, policy, "mutate")
    if row.validating_only:
        assert mutated.allowed, mutated.message
        assert mutated.patch
        refused = _admit(obj, policy, "validate")
    else:
        refused = mutated
    assert not refused.allowed
    assert refused.patch == []
    assert refused.rules == [row.rule]
    assert refused.message == row.message
    assert refused.code == (400 if row.rule == names.MALFORMED_RULE else 403)


# --------------------------------------------------------------------------- door 2: HTTP


@pytest.fixture(scope="module")
def serving_pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a serving certificate of it, made once: each case's server serves a copy."""
    directory = tmp_path_factory.mktemp("certs")
    h.write_pair(directory, h.make_ca())
    return directory


@pytest.fixture
def app(tmp_path: Path, serving_pair: Path) -> web.Application:
    shutil.copytree(serving_pair, tmp_path / "certs")
    settings = h.settings(tmp_path)
    _write_lab(settings.policies_dir)
    return server.create_app(settings)


def _labels(obj: dict[str, Any], policy: str | None) -> dict[str, str]:
    labels = dh.namespace_labels(obj["metadata"]["namespace"], **{names.ENABLED_LABEL: "true"})
    if policy is not None:
        labels[names.POLICY_LABEL] = policy
    return labels


# Each policy set's configurations as JSON, rendered once (by the set's identity, the set
# kept with them): the tests are handed copies to change.
_RENDERED: dict[int, tuple[policies.PolicySet, str]] = {}


def _configurations(loaded: policies.PolicySet) -> list[dict[str, Any]]:
    if id(loaded) not in _RENDERED:
        configurations = rendering.render(
            loaded,
            service="gpu-share-webhook",
            namespace="gpu-share-system",
            name="gpu-share-webhook",
        )
        _RENDERED[id(loaded)] = (loaded, json.dumps(configurations))
    return json.loads(_RENDERED[id(loaded)][1])  # type: ignore[no-any-return]


async def _cluster(
    aiohttp_server: Any,
    aiohttp_client: Any,
    app: web.Application,
    loaded: policies.PolicySet,
    *,
    mutating: bool = True,
) -> apiserver.ApiServer:
    """The API server, configured by the rendered configurations, calling `app` over TLS;
    without the mutating entries where `mutating` is false (as if they did not run)."""
    client: TestClient[Any, Any] = await h.start(aiohttp_server, aiohttp_client, app)
    configurations = _configurations(loaded)
    if not mutating:
        for c in configurations:
            if c["kind"] == rendering.MUTATING_KIND:
                c["webhooks"] = []
    return apiserver.ApiServer(configurations, h.api_server_send(client))


@pytest.mark.slow  # a TLS server per row
@pytest.mark.parametrize("name", IDS)
async def test_the_api_server_sends_it_and_the_server_refuses(
    name: str,
    aiohttp_server: Any,
    aiohttp_client: Any,
    app: web.Application,
    loaded: policies.PolicySet,
) -> None:
    row = ROWS[name]
    if name in SCHEMA_REFUSED:
        # The API server refuses it itself (it does not decode); the server's own answer,
        # over TLS, is what a file reviewed by a client of the webhook would get.
        client: TestClient[Any, Any] = await h.start(aiohttp_server, aiohttp_client, app)
        body = kube.admission_review(row.obj, uid=name)
        response = await h.post_review(client, f"/mutate/{row.policy}", json.dumps(body).encode())
        answer = h.response_of(await response.json(), name)
        assert answer["allowed"] is False
        assert answer["status"]["message"] == row.message
        return
    cluster = await _cluster(
        aiohttp_server, aiohttp_client, app, loaded, mutating=not row.validating_only
    )
    outcome = await cluster.admit(copy.deepcopy(row.obj), labels=_labels(row.obj, row.policy))
    assert outcome.calls, "the claim never reaches the webhook"
    endpoint = "validate" if row.validating_only else "mutate"
    assert outcome.calls[-1].path == f"/{endpoint}/{row.policy}"
    assert not outcome.allowed
    assert outcome.message == row.message


# --------------------------------------------------------------------------- door 3: mutate


def _mutate(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    policy_dir: Path,
    obj: dict[str, Any],
    policy: str | None,
    *args: str,
) -> tuple[int, str, str]:
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(obj))
    labels = ["-l", f"{names.POLICY_LABEL}={policy}"] if policy is not None else []
    code = cli.main(["mutate", "-f", str(path), "--policies", str(policy_dir), *labels, *args])
    out, err = capsys.readouterr()
    return code, out, err


def _what(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.parametrize("name", [n for n in IDS if not ROWS[n].validating_only])
def test_mutate_prints_the_refusal_with_its_rule(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, policy_dir: Path
) -> None:
    row = ROWS[name]
    code, out, err = _mutate(capsys, tmp_path, policy_dir, row.obj, row.policy)
    if row.rule == names.MALFORMED_RULE:
        # Bad input, as for a malformed pod: one line naming the field, exit 2.
        assert code == 2
        assert err == f"error: {_what(row.obj)}: {row.message.split(': no Kubernetes')[0]}\n"
    else:
        assert code == 1  # as for a refused pod
        told = "".join(f"Warning: {_what(row.obj)}: {w}\n" for w in row.warnings)
        assert err == f"{told}denied: {_what(row.obj)}: {row.message}\n"
    assert out == ""


# --------------------------------------------------------------------------- allowed

GPU_CONFIG = "GpuConfig"
MIG_CONFIG = "MigDeviceConfig"


def _config(request: str, kind: str, threads: int, pinned: str) -> dict[str, Any]:
    """The configuration the mutating webhook adds for a profile, as docs/dra.md shows it."""
    return {
        "requests": [request],
        "opaque": {
            "driver": "gpu.nvidia.com",
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": kind,
                "sharing": {
                    "strategy": "MPS",
                    "mpsConfig": {
                        "defaultActiveThreadPercentage": threads,
                        "defaultPinnedDeviceMemoryLimit": pinned,
                    },
                },
            },
        },
    }


MEDIUM_GPU = _config("gpu", GPU_CONFIG, 25, "3840Mi")  # the shipped policy's default profile


MEDIUM_GPU = _config("gpu", GPU_CONFIG, 25, "3840Mi")  # the shipped policy's default profile


@dataclass(frozen=True)
class Allowed:
    obj: dict[str, Any]
    policy: str
    # The patch the mutating webhook answers with, whole ([]: the claim stays as it is).
    patch: list[dict[str, Any]]
    warnings: tuple[str, ...] = ()


ALLOWED: dict[str, Allowed] = {
    "claim": Allowed(
        dra.obj("single-gpu-claim"),
        "dra-mps",
        [{"op": "add", "path": "/spec/devices/config", "value": [MEDIUM_GPU]}],
    ),
    "template": Allowed(
        dra.obj("single-gpu-template"),
        "dra-mps",
        [{"op": "add", "path": "/spec/spec/devices/config", "value": [MEDIUM_GPU]}],
    ),
    "selector-by-product-name": Allowed(
        dra.obj("a100-template"),
        "dra-mps",
        [{"op": "add", "path": "/spec/spec/devices/config", "value": [MEDIUM_GPU]}],
    ),
    "selector-by-memory": Allowed(
        dra.obj("large-gpu-template"),
        "dra-mps",
        [{"op": "add", "path": "/spec/spec/devices/config", "value": [MEDIUM_GPU]}],
    ),
    "selector-by-architecture-and-memory": Allowed(
        dra.obj("hopper-80g-template"),
        "dra-mps",
        [{"op": "add", "path": "/spec/spec/devices/config", "value": [MEDIUM_GPU]}],
    ),
    # A template's profile, from the spec.metadata its claims carry.
    "template-with-a-profile": Allowed(
        _annotated("single-gpu-template", "small", where="spec"),
        "dra-mps",
        [
            {
                "op": "add",
                "path": "/spec/spec/devices/config",
                "value": [_config("gpu", GPU_CONFIG, 10, "2048Mi")],
            }
        ],
    ),
    # From its own metadata, with a warning (its claims do not carry it).
    "template-with-a-profile-of-its-own": Allowed(
        _annotated("single-gpu-template", "small"),
        "dra-mps",
        [
            {
                "op": "add",
                "path": "/spec/spec/devices/config",
                "value": [_config("gpu", GPU_CONFIG, 10, "2048Mi")],
            }
        ],
        (
            "put gpu-share.io/profile in spec.metadata.annotations: the claims made from a"
            " template carry only those",
        ),
    ),
    "claim-with-a-profile": Allowed(
        _annotated("single-gpu-claim", "small"),
        "dra-mps",
        [
            {
                "op": "add",
                "path": "/spec/devices/config",
                "value": [_config("gpu", GPU_CONFIG, 10, "2048Mi")],
            }
        ],
    ),
    # A profile without pinned memory: the class's ceiling fills it in.
    "profile-without-pinned-memory": Allowed(
        _annotated("single-gpu-claim", "threads-only"),
        "dra-large-profile",
        [
            {
                "op": "add",
                "path": "/spec/devices/config",
                "value": [_config("gpu", GPU_CONFIG, 20, "8192Mi")],
            }
        ],
    ),
    # Each MIG request its own MigDeviceConfig.
    "mig-devices": Allowed(
        dra.obj("mig-devices-template"),
        "dra-mps",
        [
            {
                "op": "add",
                "path": "/spec/spec/devices/config",
                "value": [
                    _config(r, MIG_CONFIG, 25, "3840Mi")
                    for r in ("mig-1g-5gb-0", "mig-1g-5gb-1", "mig-2g-10gb", "mig-3g-20gb")
                ],
            }
        ],
    ),
    # Each subrequest its own, of its class's kind.
    "first-available": Allowed(
        dra.obj("first-available-template"),
        "dra-mps",
        [
            {
                "op": "add",
                "path": "/spec/spec/devices/config",
                "value": [
                    _config("gpu/full", GPU_CONFIG, 25, "3840Mi"),
                    _config("gpu/mig", MIG_CONFIG, 25, "3840Mi"),
                ],
            }
        ],
    ),
    # Appended to the NIC's configuration; the NIC request is left alone.
    "gpu-and-nic": Allowed(
        dra.obj("gpu-and-nic-claim"),
        "dra-mps",
        [{"op": "add", "path": "/spec/devices/config/-", "value": MEDIUM_GPU}],
    ),
    # Consumable capacity within the ceiling (the driver's memory-sharing example).
    "capacity-within-the-ceiling": Allowed(
        dra.obj("memory-sharing-template"),
        "dra-capacity",
        # No MPS where devices are shared by capacity: the driver refuses it there.
        [],
    ),
    # Configured already: NVIDIA's time-slicing claim, and its MPS example within the
    # ceilings.
    "time-slicing": Allowed(dra.obj("timeslicing-claim"), "dra", []),
    "mps-within-the-ceilings": Allowed(
        _mps(
            defaultActiveThreadPercentage=50,
            defaultPinnedDeviceMemoryLimit="8Gi",
            defaultPerDevicePinnedMemoryLimit={"0": "4Gi"},
        ),
        "dra",
        [],
    ),
    "time-slicing-and-mps": Allowed(
        _with(
            "multiple-gpus-template",
            lambda o: _parameters(o, 1)["sharing"]["mpsConfig"].update(
                defaultPinnedDeviceMemoryLimit="8Gi"
            ),
        ),
        "dra",
        [],
    ),
    # The capacity qualified by the driver's domain, within the ceiling.
    "qualified-capacity": Allowed(
        _with(
            "memory-sharing-template",
            lambda o: _exactly(o)["capacity"].__setitem__(
                "requests", {"gpu.nvidia.com/memory": "8Gi"}
            ),
        ),
        "dra-capacity",
        # No MPS where devices are shared by capacity: the driver refuses it there.
        [],
    ),
    # VFIO where open: no sharing, so nothing added.
    "vfio": Allowed(dra.obj("vfio-template"), "dra-open", []),
    # NVIDIA's passthrough example with its IOMMU section.
    "vfio-iommu": Allowed(dra.obj("vfio-config-template"), "dra-open", []),
    # NVIDIA's quickstart under the shipped policy, as written: whole GPUs (gpu-test1 and 2
    # use the template, gpu-test3 the claim), and four MIG devices of one GPU (gpu-test4).
    "quickstart-gpu-template": Allowed(dra.obj("single-gpu-template"), "dra", []),
    "quickstart-gpu-claim": Allowed(dra.obj("single-gpu-claim"), "dra", []),
    "quickstart-mig-devices": Allowed(dra.obj("mig-devices-template"), "dra", []),
    # Where no whole device is allowed: the webhook gives the request the profile's MPS
    # configuration, or the user writes one within the ceilings.
    "whole-device-sized-by-the-webhook": Allowed(
        dra.obj("single-gpu-claim"),
        "dra-mps-added",
        [
            {
                "op": "add",
                "path": "/spec/devices/config",
                "value": [_config("gpu", GPU_CONFIG, 10, "2048Mi")],
            }
        ],
    ),
    "whole-device-sized-by-the-user": Allowed(
        _mps(defaultActiveThreadPercentage=50, defaultPinnedDeviceMemoryLimit="8Gi"),
        "dra-mps-required",
        [],
    ),
    # Near misses, told: a configuration for NVIDIA's driver by its old name (skipped by
    # the driver), and one naming the request of subrequests (not applied to them).
    "old-driver-name": Allowed(
        _with(
            "timeslicing-claim",
            lambda o: _spec(o)["devices"]["config"][0]["opaque"].update(
                driver="gpu.resource.nvidia.com"
            ),
        ),
        "dra",
        [],
        (
            "spec.devices.config[0].opaque.driver: gpu.resource.nvidia.com is an old name the"
            " driver skips; use gpu.nvidia.com",
        ),
    ),
    "another-driver-name": Allowed(
        _with(
            "timeslicing-claim",
            lambda o: _spec(o)["devices"]["config"][0]["opaque"].update(driver="nvidia.com/gpu"),
        ),
        "dra",
        [],
        (
            "spec.devices.config[0].opaque.driver: not gpu.nvidia.com, the GPU driver, so it"
            " skips this GpuConfig",
        ),
    ),
    "configuration-of-a-first-available-request": Allowed(
        dra.obj("first-available-gpus-template"),
        "dra",
        [],
        (PARENT_NAMED.format(subs="gpu/a100, gpu/any"),),
    ),
    # Not a GPU: the webhook's business is GPUs.
    "nic": Allowed(dra.obj("nic-claim"), "dra", []),
}
ALLOWED_IDS = sorted(ALLOWED)


@pytest.mark.parametrize("name", ALLOWED_IDS)
def test_the_core_admits_valid_and_idempotent(name: str, loaded: policies.PolicySet) -> None:
    """The patch is exactly the profile's configuration; the result is valid to the API
    server, a second review wants nothing more, and the validating endpoint admits it."""
    case = ALLOWED[name]
    policy = loaded.governing(case.policy)
    obj = kube.as_served(case.obj)
    mutated = _admit(obj, policy, "mutate")
    assert mutated.allowed, mutated.message
    assert mutated.patch == case.patch
    assert tuple(mutated.warnings) == case.warnings
    assert mutated.mutations == (["dra-mps-limits"] if case.patch else [])
    stored = kube.apply(obj, mutated.patch)
    kube.check_valid(stored)
    again = _admit(stored, policy, "mutate")
    assert (again.allowed, again.patch) == (True, [])
    validated = _admit(stored, policy, "validate")
    assert validated.allowed, validated.message
    assert validated.patch == []
    # kube.admit plays the same chain through `review` (what mutate and audit call).
    decision, result = kube.admit(obj, policy)
    assert decision.patch == case.patch
    assert result == stored


@pytest.mark.slow  # a TLS server per case
@pytest.mark.parametrize("name", ALLOWED_IDS)
async def test_the_api_server_stores_what_the_core_makes(
    name: str,
    aiohttp_server: Any,
    aiohttp_client: Any,
    app: web.Application,
    loaded: policies.PolicySet,
) -> None:
    case = ALLOWED[name]
    cluster = await _cluster(aiohttp_server, aiohttp_client, app, loaded)
    outcome = await cluster.admit(copy.deepcopy(case.obj), labels=_labels(case.obj, case.policy))
    assert outcome.allowed, outcome.message
    assert outcome.stored == kube.apply(kube.as_served(case.obj), case.patch)
    # (Both entries tell a template's profile warning, as both tell a pod's envFrom one.)
    assert tuple(dict.fromkeys(outcome.warnings)) == case.warnings
    if name == "nic":
        assert outcome.calls == [], "a claim of no GPU class is sent"
    else:
        assert outcome.entries == [
            (rendering.MUTATING_KIND, rendering.policy_entry(case.policy)),
            (rendering.VALIDATING_KIND, rendering.policy_entry(case.policy)),
        ]


@pytest.mark.parametrize("name", ALLOWED_IDS)
def test_mutate_prints_the_claim_as_admitted(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, policy_dir: Path
) -> None:
    case = ALLOWED[name]
    code, out, err = _mutate(capsys, tmp_path, policy_dir, case.obj, case.policy)
    assert code == 0, err
    assert yaml.safe_load(out) == kube.apply(case.obj, case.patch)
    assert "denied" not in err
    for warning in case.warnings:
        assert f"Warning: {_what(case.obj)}: {warning}\n" in err
    code, out, _ = _mutate(capsys, tmp_path, policy_dir, case.obj, case.policy, "-o", "patch")
    assert (code, json.loads(out)) == (0, case.patch)


# --------------------------------------------------------------------------- routing


def _claim_rule_entries(configuration: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e for e in configuration["webhooks"] if any(GROUP in r["apiGroups"] for r in e["rules"])
    ]


def test_the_entries_name_claims_on_create_in_v1_only(loaded: policies.PolicySet) -> None:
    """Only CREATE (the spec of a claim and of a template is immutable: research §1.2) and
    only v1: with matchPolicy Equivalent the API server converts a write through v1beta1 or
    v1beta2 to v1 and sends that (research §1.3)."""
    configurations = {c["kind"]: c for c in _configurations(loaded)}
    for kind, configuration in configurations.items():
        entries = _claim_rule_entries(configuration)
        assert {e["name"] for e in entries} == {e["name"] for e in dh.pod_entries(configuration)}, (
            kind
        )
        for e in entries:
            assert e["matchPolicy"] == "Equivalent"
            assert [r for r in e["rules"] if GROUP in r["apiGroups"]] == [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["resourceclaims", "resourceclaimtemplates"],
                    "scope": "Namespaced",
                }
            ]
    namespace = next(
        e
        for e in configurations[rendering.VALIDATING_KIND]["webhooks"]
        if e["name"] == rendering.NAMESPACE_ENTRY
    )
    assert all(GROUP not in r["apiGroups"] for r in namespace["rules"])


def _sent(
    loaded: policies.PolicySet, obj: dict[str, Any], policy: str | None, operation: str = "CREATE"
) -> list[str]:
    """The entries (mutating and validating) the API server would call for `obj` in a
    namespace of `policy` (None: no policy label): rules, selectors and matchConditions."""
    cluster = apiserver.ApiServer(_configurations(loaded), apiserver.in_process(loaded))
    labels = _labels(obj, policy)
    old = obj if operation == "UPDATE" else None
    return [
        f"{kind}/{e['name']}"
        for kind, entries in (
            (rendering.MUTATING_KIND, cluster.mutating),
            (rendering.VALIDATING_KIND, cluster.validating),
        )
        for e in entries
        if cluster.called(
            kind, e, kube.as_served(obj), labels, operation=operation, sub_resource="", old=old
        )
    ]


def test_the_matchconditions_send_the_gpu_classes_of_the_policy(
    loaded: policies.PolicySet,
) -> None:
    entry = rendering.policy_entry("dra")
    both = [f"{rendering.MUTATING_KIND}/{entry}", f"{rendering.VALIDATING_KIND}/{entry}"]
    # Every class NVIDIA's driver installs is sent, listed or not (closed ones are refused).
    for name in (
        "single-gpu-claim",
        "single-gpu-template",
        "mig-profile-template",
        "vfio-template",
        "first-available-template",
        "gpu-and-nic-claim",
    ):
        assert _sent(loaded, dra.obj(name), "dra") == both, name
    vgpu = _with(
        "single-gpu-claim", lambda o: _exactly(o).update(deviceClassName="vgpu.gpu.nvidia.com")
    )
    assert _sent(loaded, vgpu, "dra") == both
    # A subrequest of a GPU class alone sends the claim.
    nic_first = _with(
        "first-available-template",
        lambda o: _spec(o)["devices"]["requests"][0]["firstAvailable"][0].update(
            deviceClassName="nic.example.com"
        ),
    )
    assert _sent(loaded, nic_first, "dra") == both


def test_a_claim_of_no_gpu_class_is_never_sent_and_passes(
    loaded: policies.PolicySet,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    policy_dir: Path,
) -> None:
    nic = dra.obj("nic-claim")
    for policy in ("dra", "dra-open", None):
        assert _sent(loaded, nic, policy) == [], policy
    # Were it sent (mutate reads files), the core lets it pass as it is.
    decision = _admit(kube.as_served(nic), loaded.governing("dra"), "mutate")
    assert (decision.allowed, decision.patch, decision.warnings) == (True, [], [])
    nic_profile = _annotated("nic-claim", "huge")
    decision = _admit(kube.as_served(nic_profile), loaded.governing("dra"), "mutate")
    assert (decision.allowed, decision.patch) == (True, [])
    code, out, _ = _mutate(capsys, tmp_path, policy_dir, nic, "dra")
    assert (code, yaml.safe_load(out)) == (0, nic)


@pytest.mark.parametrize("value", [[], {}, ["gpu.nvidia.com"]], ids=["list", "object", "named"])
@pytest.mark.parametrize("at", ["exactly", "firstAvailable"])
def test_a_class_name_that_is_no_string_is_no_gpu_class_under_a_policy_without_dra(
    value: object, at: str, loaded: policies.PolicySet
) -> None:
    """The API server refuses such a claim itself; the webhook answers it, never an error."""
    claim = copy.deepcopy(dra.obj("single-gpu-claim"))
    request = claim["spec"]["devices"]["requests"][0]
    asked = request.pop("exactly")
    asked["deviceClassName"] = value
    if at == "exactly":
        request["exactly"] = asked
    else:
        request["firstAvailable"] = [{"name": "one", **asked}]
    governing = loaded.governing(names.DEFAULT_POLICY)
    for endpoint in ("mutate", "validate"):
        decision = _admit(kube.as_served(claim), governing, endpoint)
        assert (decision.allowed, decision.patch) == (True, [])


@pytest.mark.parametrize("policy", ["default", None, "not-renamed"])
def test_a_policy_without_dra_refuses_gpu_claims(
    policy: str | None, loaded: policies.PolicySet
) -> None:
    """Where the namespace's policy has no dra section its pods may not use claims (rule
    resource-claims); a GPU claim made there now would serve them, unreviewed, once the
    namespace moves to a policy with one: it is sent and refused. A NIC's is not sent."""
    claim = dra.obj("single-gpu-claim")
    assert _sent(loaded, claim, policy)
    governing = loaded.governing(policy or names.DEFAULT_POLICY)
    assert governing.dra is None
    for endpoint in ("mutate", "validate"):
        decision = _admit(kube.as_served(claim), governing, endpoint)
        assert decision.message == (
            f'claim "single-gpu": policy "{governing.name}" has no dra section: its pods may'
            " not use claims, and a claim made now would serve them once it has one. Ask for"
            f" {governing.preferred_resource} instead, or ask the cluster admin for a policy"
            " that governs DRA (rule resource-claims)"
        )
    assert _sent(loaded, dra.obj("nic-claim"), policy) == []
    nic = _admit(kube.as_served(dra.obj("nic-claim")), governing, "mutate")
    assert (nic.allowed, nic.patch) == (True, [])


def test_a_namespace_whose_policy_label_names_no_policy_has_its_gpu_claims_refused(
    loaded: policies.PolicySet,
) -> None:
    """A claim made while the label names no policy would serve pods once the label is
    fixed: the catch-all sends GPU claims (of every class any policy governs) and refuses
    them, saying why; other claims are never sent."""
    claim = dra.obj("count-template")
    assert _sent(loaded, claim, "no-such-policy") == [
        f"{rendering.MUTATING_KIND}/{rendering.UNKNOWN_ENTRY}",
        f"{rendering.VALIDATING_KIND}/{rendering.UNKNOWN_ENTRY}",
    ]
    decision = _admit(kube.as_served(claim), loaded.governing(names.UNKNOWN_POLICY_PATH), "mutate")
    assert decision.rules == [names.UNKNOWN_POLICY_RULE]
    assert _sent(loaded, dra.obj("nic-claim"), "no-such-policy") == []


def test_a_claim_with_the_mirror_annotation_is_sent_as_any_other(
    loaded: policies.PolicySet,
) -> None:
    """The annotation marks a static pod's mirror; on a claim anyone may write it."""
    claim = _with(
        "single-gpu-claim",
        lambda o: (
            o["metadata"].setdefault("annotations", {}).update({names.MIRROR_ANNOTATION: "x"})
        ),
    )
    assert _sent(loaded, claim, "dra") == [
        f"{rendering.MUTATING_KIND}/{rendering.policy_entry('dra')}",
        f"{rendering.VALIDATING_KIND}/{rendering.policy_entry('dra')}",
    ]


def test_a_class_another_policy_lists_is_a_gpu_class_here(tmp_path: Path) -> None:
    """An admin who lists a class of their own in one policy has said it selects GPUs: in
    every other policy with a dra section it is sent and closed."""
    directory = tmp_path / "policies"
    directory.mkdir()
    for name in ("dra.yaml", "default.yaml"):
        (directory / name).write_text((SHIPPED / name).read_text())
    own = _lab("lab", [{"name": "a100.example.com", "allowed": True}])
    (directory / "lab.yaml").write_text(own)
    loaded = policies.load_directory(directory)
    claim = _with(
        "single-gpu-claim",
        lambda o: _exactly(o).update(deviceClassName="a100.example.com"),
    )
    assert _sent(loaded, claim, "dra")
    decision = _admit(kube.as_served(claim), loaded.governing("dra"), "mutate")
    assert decision.rules == ["dra-class-not-allowed"]
    assert _admit(kube.as_served(claim), loaded.governing("lab"), "mutate").allowed


async def test_a_claim_update_is_never_sent_and_the_core_passes_it(
    loaded: policies.PolicySet,
) -> None:
    """Only metadata and status of a claim change after it is created (research §1.2)."""
    for name in ("count-template", "vfio-template", "single-gpu-claim"):
        claim = dra.obj(name)
        assert _sent(loaded, claim, "dra")
        assert _sent(loaded, claim, "dra", operation="UPDATE") == []
        cluster = apiserver.ApiServer(_configurations(loaded), apiserver.in_process(loaded))
        outcome = await cluster.admit(
            claim, labels=_labels(claim, "dra"), operation="UPDATE", old=claim
        )
        assert (outcome.allowed, outcome.calls, outcome.stored) == (True, [], claim)
        for endpoint in ("mutate", "validate"):
            decision = _admit(
                kube.as_served(claim), loaded.governing("dra"), endpoint, operation="UPDATE"
            )
            assert (decision.allowed, decision.patch) == (True, []), name
        # Nor a status update (a subresource).
        decision = reviewing.admit(
            claim,
            policy=loaded.governing("dra"),
            endpoint="mutate",
            group=GROUP,
            kind=claim["kind"],
            operation="CREATE",
            sub_resource="status",
        )
        assert (decision.allowed, decision.patch) == (True, [])


# --------------------------------------------------------------------------- judged one by one


def test_subrequests_are_judged_one_by_one(loaded: policies.PolicySet) -> None:
    """Each subrequest by its own class: the closed one is refused, the open one not."""
    obj = dra.obj("first-available-template")
    decision = reviewing.review_object(obj, policy=loaded.governing("dra-gpu-only"))
    assert [v.field for v in decision.violations] == [
        "devices.requests[0].firstAvailable[1].deviceClassName"
    ]
    # Both open, each too many: both told, each by its name.
    for sub in _spec(obj)["devices"]["requests"][0]["firstAvailable"]:
        sub["count"] = 2
    decision = reviewing.review_object(obj, policy=loaded.governing("dra"))
    assert [(v.rule, v.message.split(":")[0]) for v in decision.violations] == [
        ("dra-too-many-devices", 'claim template "a100-or-mig" subrequest "gpu/full"'),
        ("dra-too-many-devices", 'claim template "a100-or-mig" subrequest "gpu/mig"'),
    ]


def _every_request_config(**mps: Any) -> dict[str, Any]:
    """NVIDIA's time-slicing and MPS template with one MPS configuration of empty
    `requests` instead of its two: it applies to every request."""

    def swap(o: dict[str, Any]) -> None:
        entry = _spec(o)["devices"]["config"][1]
        entry["requests"] = []
        entry["opaque"]["parameters"]["sharing"]["mpsConfig"] = mps
        _spec(o)["devices"]["config"] = [entry]

    return _with("multiple-gpus-template", swap)


def test_a_configuration_with_empty_requests_applies_to_every_request(
    loaded: policies.PolicySet,
) -> None:
    policy = loaded.governing("dra-mps")
    within = _every_request_config(
        defaultActiveThreadPercentage=40, defaultPinnedDeviceMemoryLimit="4Gi"
    )
    kube.check_valid(within)
    decision, _ = kube.admit(within, policy)
    # Both requests have a configuration: nothing is added to either.
    assert (decision.allowed, decision.patch) == (True, [])
    above = _every_request_config(
        defaultActiveThreadPercentage=75, defaultPinnedDeviceMemoryLimit="4Gi"
    )
    decision = _admit(kube.as_served(above), policy, "mutate")
    # Judged once, where it first applies.
    assert decision.message == (
        'claim template "multiple-gpus" request "ts-gpu": spec.spec.devices.config[0]'
        f".{MPS_AT}.defaultActiveThreadPercentage: 75% is above the ceiling of class"
        ' "gpu.nvidia.com" in policy "dra-mps" (50%). Set defaultActiveThreadPercentage to 50'
        " or less (rule dra-mps-limits)"
    )
    # A GpuConfig of empty requests does not apply to a MIG request (the driver takes the
    # configuration of the device's kind): the MIG request gets its own.
    mixed = _with(
        "single-gpu-claim",
        lambda o: _spec(o)["devices"]["requests"].append(
            {"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com"}}
        ),
        lambda o: _spec(o)["devices"].__setitem__(
            "config",
            [
                {
                    "requests": [],
                    "opaque": {
                        "driver": "gpu.nvidia.com",
                        "parameters": {
                            "apiVersion": "resource.nvidia.com/v1beta1",
                            "kind": "GpuConfig",
                            "sharing": {"strategy": "TimeSlicing"},
                        },
                    },
                }
            ],
        ),
    )
    decision, _ = kube.admit(mixed, policy)
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/devices/config/-",
            "value": _config("mig", MIG_CONFIG, 25, "3840Mi"),
        }
    ]


# --------------------------------------------------------------------------- modes


# Whole, with its fix; {} is the policy.
WARNED = (
    'would be refused (rule dra-too-many-devices): claim template "double-gpu" request'
    ' "gpu": spec.spec.devices.requests[0].exactly.count: 2 devices of class "gpu.nvidia.com";'
    ' policy "{}" allows at most 1 per request. Set count to 1 or less'
)


@pytest.mark.parametrize(
    ("policy", "warnings", "refused"),
    [
        ("dra-warn", [WARNED], False),
        ("dra-dry-run", [], False),
        ("dra-rule-warn", [WARNED], False),
        ("dra", [], True),
    ],
)
async def test_modes_apply_to_the_dra_rules(
    policy: str,
    warnings: list[str],
    refused: bool,
    loaded: policies.PolicySet,
) -> None:
    """warn: admitted, told (the refusal whole, with its fix); dry-run: admitted, silent;
    ruleModes: one rule warned, the others enforced."""
    warnings = [w.format(policy) for w in warnings]
    governing = loaded.governing(policy)
    claim = dra.obj("count-template")
    served = kube.as_served(claim)
    mutated = _admit(served, governing, "mutate")
    # The validating endpoint sees the claim as the mutating one left it (sized by the
    # profile where the refusal is not enforced).
    patched = jsonpatch.apply_patch(served, mutated.patch) if mutated.patch else served
    for endpoint, sent in (("mutate", served), ("validate", patched)):
        decision = _admit(sent, governing, endpoint)
        assert decision.allowed is not refused
        assert decision.warnings == ([] if refused else warnings)
        if not refused:
            expected = [(governing.mode_of("dra-too-many-devices"), "dra-too-many-devices")]
            if endpoint == "validate" and not mutated.patch:
                # Dry-run patches nothing, so the profile's configuration is missing too.
                expected.append(("dry-run", "dra-mps-limits"))
            assert [(m, v.rule) for m, v in decision.would_refuse] == expected
            assert decision.audit == (
                {
                    "would-refuse": "dra-too-many-devices",
                    "would-refuse-reasons": ROWS["too-many-devices"].message.replace(
                        '"dra"', f'"{policy}"'
                    ),
                }
                if warnings
                else {}
            )
    cluster = apiserver.ApiServer(_configurations(loaded), apiserver.in_process(loaded))
    outcome = await cluster.admit(claim, labels=_labels(claim, policy))
    assert outcome.allowed is not refused
    assert outcome.warnings == ([] if refused else warnings * 2)  # told by both endpoints
    # The other rules stay enforced where one is warned.
    vfio = _admit(kube.as_served(dra.obj("vfio-template")), governing, "mutate")
    assert vfio.allowed is (policy in ("dra-warn", "dra-dry-run"))


async def test_modes_over_https(
    aiohttp_server: Any, aiohttp_client: Any, app: web.Application, loaded: policies.PolicySet
) -> None:
    cluster = await _cluster(aiohttp_server, aiohttp_client, app, loaded)
    claim = dra.obj("count-template")
    outcome = await cluster.admit(claim, labels=_labels(claim, "dra-warn"))
    warned = WARNED.format("dra-warn")
    assert (outcome.allowed, outcome.warnings) == (True, [warned, warned])
    outcome = await cluster.admit(claim, labels=_labels(claim, "dra-dry-run"))
    assert (outcome.allowed, outcome.warnings) == (True, [])


def test_dry_run_adds_no_configuration_and_requires_none(loaded: policies.PolicySet) -> None:
    policy = loaded.governing("dra-dry-run")
    claim = kube.as_served(dra.obj("single-gpu-claim"))
    mutated = _admit(claim, policy, "mutate")
    assert (mutated.allowed, mutated.patch, mutated.warnings) == (True, [], [])
    validated = _admit(claim, policy, "validate")
    assert (validated.allowed, validated.warnings) == (True, [])
    assert [(m, v.rule) for m, v in validated.would_refuse] == [("dry-run", "dra-mps-limits")]


# --------------------------------------------------------------------------- found wrong
# Behaviours of webhook/engine/claims.py found while writing these tests, written as what
# should hold; strict, so each fails loudly once the core is fixed (then drop the mark).


def test_warn_mode_still_sizes_the_claim(loaded: policies.PolicySet) -> None:
    """As a pod with a warned capabilities violation still gets its MPS limits."""
    claim = _with("single-gpu-claim", lambda o: _exactly(o).update(adminAccess=True))
    decision = _admit(kube.as_served(claim), loaded.governing("dra-warn"), "mutate")
    assert decision.allowed
    assert decision.patch == ALLOWED["claim"].patch


def test_a_capacity_written_both_ways_is_judged_both_ways(loaded: policies.PolicySet) -> None:
    claim = _with(
        "memory-sharing-template",
        lambda o: _exactly(o)["capacity"].__setitem__(
            "requests", {"memory": "40Gi", "gpu.nvidia.com/memory": "4Gi"}
        ),
    )
    kube.check_valid(claim)
    decision = _admit(kube.as_served(claim), loaded.governing("dra-capacity"), "mutate")
    assert not decision.allowed


def test_every_per_device_limit_is_judged() -> None:
    """32 GPUs, a limit for each by index, and one more by a GPU's UUID (a key the driver
    takes for a device of the allocation, as it takes an index: research §3.3)."""
    wide = kube.load_policy_text(_lab("dra-wide", [{**_GPU_MPS, "maxDevicesPerRequest": 32}]))
    per_device = {str(i): "1Gi" for i in range(32)}
    per_device["GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"] = "100Gi"
    claim = _mps(
        defaultActiveThreadPercentage=50,
        defaultPinnedDeviceMemoryLimit="4Gi",
        defaultPerDevicePinnedMemoryLimit=per_device,
    )
    _exactly(claim)["count"] = 32
    kube.check_valid(claim)
    decision = _admit(kube.as_served(claim), wide, "mutate")
    assert not decision.allowed


def test_a_configuration_the_driver_cannot_decode_is_refused(
    loaded: policies.PolicySet,
) -> None:
    claim = _with(
        "single-gpu-claim",
        lambda o: _spec(o)["devices"].__setitem__(
            "config",
            [
                {
                    "opaque": {
                        "driver": "gpu.nvidia.com",
                        "parameters": {
                            "apiVersion": "resource.nvidia.com/v1beta1",
                            "kind": "GpuConfg",
                            "sharing": {"strategy": "MPS"},
                        },
                    }
                }
            ],
        ),
    )
    decision = _admit(kube.as_served(claim), loaded.governing("dra"), "mutate")
    assert decision.rules == ["dra-config"]


def test_a_value_nested_a_thousand_deep_is_refused_not_a_crash(
    loaded: policies.PolicySet,
) -> None:
    """The message shows no repr of it (which raised RecursionError at 1,000 levels)."""
    deep: Any = 1
    for _ in range(1000):
        deep = [deep]
    claim = _with(
        "single-gpu-claim",
        lambda o: o["spec"]["devices"].update(
            config=[
                {
                    "requests": ["gpu"],
                    "opaque": {
                        "driver": "gpu.nvidia.com",
                        "parameters": {
                            "apiVersion": "resource.nvidia.com/v1beta1",
                            "kind": "GpuConfig",
                            "sharing": {"strategy": deep},
                        },
                    },
                }
            ]
        ),
    )
    body = json.dumps(kube.admission_review(claim, operation="CREATE", uid="u"))
    outcome = codec.review(body.encode(), policies=loaded, policy_name="dra", endpoint="mutate")
    response = json.loads(outcome.body)["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].endswith(
        'parameters.sharing.strategy: "a list of 1 items": the driver knows TimeSlicing and'
        " MPS (rule dra-config)"
    )


@pytest.mark.parametrize("name", ["GPU", "g" * 64, "gpu_0"])
def test_a_request_name_that_is_no_dns_label_is_malformed(
    loaded: policies.PolicySet, name: str
) -> None:
    """The name goes into field paths, messages and the added configuration: one the API
    server refuses anyway is bad input, not something to echo back (a 1 MiB name did)."""
    claim = _with(
        "single-gpu-claim", lambda o: o["spec"]["devices"]["requests"][0].update(name=name)
    )
    decision = _admit(kube.as_served(claim), loaded.governing("dra"), "mutate")
    assert decision.rules == [names.MALFORMED_RULE]
    assert decision.code == 400
    assert "is not a DNS label" in decision.message


def test_a_policy_that_switches_resource_claims_off_lets_gpu_claims_pass(tmp_path: Path) -> None:
    """`denyResourceClaims: false` without a dra section: the admin's choice to leave claims
    ungoverned (pods with claims pass too); the switch turns the rule off for claims as well."""
    text = (
        (SHIPPED / "default.yaml")
        .read_text()
        .replace("denyResourceClaims: true", "denyResourceClaims: false")
    )
    assert "denyResourceClaims: false" in text
    (tmp_path / "default.yaml").write_text(text)
    loaded = policies.load_directory(tmp_path)
    claim = dra.obj("single-gpu-claim")
    decision = _admit(kube.as_served(claim), loaded.governing("default"), "mutate")
    assert (decision.allowed, decision.patch) == (True, [])


# --------------------------------------------------------------------------- whole devices, totals


def test_a_whole_device_is_refused_where_the_configuration_would_be_added_in_dry_run_only() -> None:
    """Nothing is added while dra-mps-limits is in dry-run: the request ends with the whole
    device, which the class does not allow."""
    text = _lab(
        "dra-mps-dry",
        [{**_GPU_MPS, "allowWholeDevice": False}],
        ruleModes={"dra-mps-limits": "dry-run"},
    )
    policy = kube.load_policy_text(text)
    decision = _admit(kube.as_served(dra.obj("single-gpu-claim")), policy, "mutate")
    assert (decision.allowed, decision.rules) == (False, ["dra-whole-device"])
    enforced = kube.load_policy_text(
        _lab("dra-mps-added", [{**_GPU_MPS, "allowWholeDevice": False}])
    )
    decision = _admit(kube.as_served(dra.obj("single-gpu-claim")), enforced, "mutate")
    assert (decision.allowed, decision.mutations) == (True, ["dra-mps-limits"])


def test_a_class_shared_by_capacity_is_left_to_its_capacity_ceilings() -> None:
    """Its requests take a share of a device, not the device: dra-capacity bounds them."""
    text = _lab(
        "dra-capacity-only",
        [
            {
                "name": "gpu.nvidia.com",
                "allowed": True,
                "allowWholeDevice": False,
                "capacity": {"memory": "8Gi"},
            }
        ],
    )
    policy = kube.load_policy_text(text)
    decision = _admit(kube.as_served(dra.obj("memory-sharing-template")), policy, "mutate")
    assert (decision.allowed, decision.patch) == (True, [])
    decision = _admit(kube.as_served(dra.obj("large-gpu-template")), policy, "mutate")
    assert decision.rules == ["dra-capacity"]


def test_a_claims_total_counts_the_largest_subrequest_of_each_class() -> None:
    """Two requests: one GPU, and a firstAvailable of two GPUs or one MIG device. Of full
    GPUs the claim may take 3 (1 + 2), of MIG devices 1; each class is bounded on its own."""
    obj = _with(
        "first-available-template",
        lambda o: _spec(o)["devices"]["requests"][0]["firstAvailable"][0].update(count=2),
        lambda o: _spec(o)["devices"]["requests"].insert(
            0, {"name": "one", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
        ),
    )
    kube.check_valid(obj)
    classes = [
        {"name": "gpu.nvidia.com", "allowed": True, "maxDevicesPerRequest": 2},
        {"name": "mig.nvidia.com", "allowed": True, "maxDevicesPerClaim": 1},
    ]
    for most, refused in ((3, False), (2, True)):
        classes[0]["maxDevicesPerClaim"] = most
        policy = kube.load_policy_text(_lab("dra-totals", classes))
        decision = _admit(kube.as_served(obj), policy, "mutate")
        assert decision.allowed is not refused, decision.message
        if refused:
            assert decision.message == (
                'claim template "a100-or-mig": spec.spec.devices.requests: 3 devices of class'
                ' "gpu.nvidia.com" in 2 requests; policy "dra-totals" allows at most 2 per'
                " claim. Ask for 2 or fewer in all (rule dra-too-many-devices)"
            )
