"""Issue 22: `gpu-share-webhook mutate -f FILE` on ResourceClaims and ResourceClaimTemplates
(`resource.k8s.io/v1`), through the real command line: a claim comes out as the mutating
webhook leaves it (the MPS configuration of its profile added), a refused one is a `denied:`
line per rule and exit 1, and one left as it is says why on one `no change:` line.

`dra` here is the shipped policy as it sizes claims: `addMpsConfig` left to its default (the
shipped file turns it off, so that NVIDIA's quickstart passes unchanged on a driver without
its MPS gate: the tests that say so read the shipped file itself).

The objects are written after NVIDIA's documented examples (the v1 MPS template of the GPU
DRA driver's quickstart) and each is valid against the
v1 schema of Kubernetes 1.34 and the newest one kubernetes-validate has: the API server
would take every one of them, so what refuses or changes them is the webhook.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support import dra_objects
from webhook import cli
from webhook.policy import names

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "policies"
DRA = ["-l", "gpu-share.io/policy=dra"]
# The shipped policies, `dra` as it adds the profile's MPS configuration (see the module).
ADDING: dict[str, Path] = {}
# resource.k8s.io/v1 is served from 1.34 on.
VERSIONS = ("1.34", kubernetes_validate.latest_version())


# --------------------------------------------------------------------------- objects


def request(
    name: str = "gpu", device_class: str = "gpu.nvidia.com", **fields: Any
) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, **fields}}


def gpu_config(*requests: str, kind: str = "GpuConfig", **sharing: Any) -> dict[str, Any]:
    """An opaque configuration of NVIDIA's driver, as its quickstart writes one."""
    parameters: dict[str, Any] = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind}
    if sharing:
        parameters["sharing"] = sharing
    return {
        "requests": list(requests),
        "opaque": {"driver": "gpu.nvidia.com", "parameters": parameters},
    }


def claim(
    name: str,
    *requests: dict[str, Any],
    config: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "gpu-test",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    devices: dict[str, Any] = {"requests": list(requests or [request()])}
    if config is not None:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": devices},
    }


def template(
    name: str,
    *requests: dict[str, Any],
    config: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ResourceClaimTemplate; `annotations` go where its claims get them (spec.metadata)."""
    inner = claim(name, *requests, config=config)["spec"]
    spec: dict[str, Any] = {"spec": inner}
    if annotations:
        spec["metadata"] = {"annotations": annotations}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "gpu-test-mps"},
        "spec": spec,
    }


# NVIDIA's quickstart template (gpu-test-mps.yaml, v1), as published: MPS at 50% of the
# threads and 10Gi of pinned memory.
QUICKSTART_MPS = template(
    "shared-gpu",
    request("mps-gpu"),
    config=[
        gpu_config(
            "mps-gpu",
            strategy="MPS",
            mpsConfig={
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "10Gi",
            },
        )
    ],
)


def mps_entry(
    request_name: str, threads: int, pinned: str, kind: str = "GpuConfig"
) -> dict[str, Any]:
    """The configuration entry the webhook adds for a profile."""
    return {
        "requests": [request_name],
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


def check_valid(obj: dict[str, Any]) -> None:
    for version in VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


def adding_dra() -> dict[str, Any]:
    """The shipped `dra` policy with `addMpsConfig` left to its default."""
    doc: dict[str, Any] = yaml.safe_load((SHIPPED / "dra.yaml").read_text())
    for c in doc["spec"]["dra"]["deviceClasses"]:
        c.pop("addMpsConfig", None)
    return doc


@pytest.fixture(scope="module", autouse=True)
def _adding(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    directory = tmp_path_factory.mktemp("adding") / "policies"
    shutil.copytree(SHIPPED, directory)
    (directory / "dra.yaml").write_text(yaml.safe_dump(adding_dra(), sort_keys=False))
    ADDING["policies"] = directory
    yield
    ADDING.clear()


def mutate(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    objects: list[dict[str, Any]],
    *args: str,
    policies: Path | None = None,
) -> tuple[int, str, str]:
    for obj in objects:
        check_valid(obj)
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    directory = policies or ADDING["policies"]
    code = cli.main(["mutate", "-f", str(path), "--policies", str(directory), *args])
    out, err = capsys.readouterr()
    return code, out, err


def lab_policy(tmp_path: Path, **changes: Any) -> Path:
    """A directory holding the `dra` policy (as it adds configurations) renamed `lab`, its
    spec changed by `changes` (a value of None removes the field)."""
    doc = adding_dra()
    doc["metadata"]["name"] = "lab"
    for key, value in changes.items():
        if value is None:
            doc["spec"].pop(key, None)
        else:
            doc["spec"][key] = value
    directory = tmp_path / "policies"
    directory.mkdir(exist_ok=True)
    (directory / "lab.yaml").write_text(yaml.safe_dump(doc))
    return directory


LAB = ["-l", "gpu-share.io/policy=lab"]


# --------------------------------------------------------------------------- changed


@pytest.mark.parametrize(
    ("annotations", "threads", "pinned"),
    [(None, 25, "3840Mi"), ({names.ANNOTATION_PROFILE: "small"}, 10, "2048Mi")],
    ids=["default-profile", "annotated-profile"],
)
def test_a_claim_without_sharing_configuration_comes_out_with_its_profiles_mps_configuration(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    annotations: dict[str, str] | None,
    threads: int,
    pinned: str,
) -> None:
    """The shipped `dra` policy: profile medium by default (25%, 3840Mi), small (10%,
    2048Mi) when the claim names it."""
    original = claim("single-gpu", annotations=annotations)
    code, out, err = mutate(capsys, tmp_path, [original], *DRA)
    assert (code, err) == (0, "")
    [result] = yaml.safe_load_all(out)
    check_valid(result)
    expected = copy.deepcopy(original)
    expected["spec"]["devices"]["config"] = [mps_entry("gpu", threads, pinned)]
    assert result == expected

    code, out, err = mutate(capsys, tmp_path, [original], *DRA, "-o", "patch")
    assert (code, err) == (0, "")
    assert yaml.safe_load(out) == [
        {"op": "add", "path": "/spec/devices/config", "value": [mps_entry("gpu", threads, pinned)]}
    ]


def test_a_template_gets_it_under_spec_spec_with_the_profile_of_its_claims(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The quickstart template without its configuration: the profile is read where its
    claims will carry it, spec.metadata.annotations."""
    original = template(
        "shared-gpu", request("mps-gpu"), annotations={names.ANNOTATION_PROFILE: "small"}
    )
    code, out, err = mutate(capsys, tmp_path, [original], *DRA, "-o", "patch")
    assert (code, err) == (0, "")
    assert yaml.safe_load(out) == [
        {
            "op": "add",
            "path": "/spec/spec/devices/config",
            "value": [mps_entry("mps-gpu", 10, "2048Mi")],
        }
    ]
    code, out, _ = mutate(capsys, tmp_path, [original], *DRA)
    [result] = yaml.safe_load_all(out)
    check_valid(result)
    assert result["spec"]["spec"]["devices"]["config"] == [mps_entry("mps-gpu", 10, "2048Mi")]


def test_a_configuration_is_added_beside_those_of_other_requests(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A claim with a GPU and a MIG request, the MIG one configured already: the GPU request
    gets its entry appended, the existing one stays first."""
    mig = gpu_config(
        "mig",
        kind="MigDeviceConfig",
        strategy="MPS",
        mpsConfig={"defaultActiveThreadPercentage": 50},
    )
    original = claim("two", request("gpu"), request("mig", "mig.nvidia.com"), config=[mig])
    code, out, err = mutate(capsys, tmp_path, [original], *DRA, "-o", "patch")
    assert (code, err) == (0, "")
    assert yaml.safe_load(out) == [
        {"op": "add", "path": "/spec/devices/config/-", "value": mps_entry("gpu", 25, "3840Mi")}
    ]


def test_its_own_output_is_already_configured(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Idempotent, and the second run says why nothing changes."""
    objects = [claim("single-gpu"), template("shared-gpu", request("mps-gpu"))]
    code, out, _ = mutate(capsys, tmp_path, objects, *DRA)
    assert code == 0
    again = list(yaml.safe_load_all(out))
    code, out, err = mutate(capsys, tmp_path, again, *DRA, "-o", "patch")
    assert (code, out) == (0, "[]\n[]\n")
    assert err == (
        'no change: ResourceClaim/single-gpu: it is already configured: request "gpu" (GpuConfig)\n'
        "no change: ResourceClaimTemplate/shared-gpu: it is already configured: request"
        ' "mps-gpu" (GpuConfig)\n'
    )


# --------------------------------------------------------------------------- refused


REFUSED = {
    # NVIDIA's quickstart as published: 10Gi pinned, above the class's 8192Mi.
    "quickstart-pinned-memory": (
        QUICKSTART_MPS,
        'ResourceClaimTemplate/shared-gpu: claim template "shared-gpu" request "mps-gpu":'
        " spec.spec.devices.config[0].opaque.parameters.sharing.mpsConfig"
        '.defaultPinnedDeviceMemoryLimit: "10Gi" is above the ceiling of class "gpu.nvidia.com"'
        ' in policy "dra" (8192Mi). Set it to 8192Mi or less (rule dra-mps-limits)',
    ),
    "two-gpus": (
        claim("pair", request(count=2)),
        'ResourceClaim/pair: claim "pair" request "gpu": spec.devices.requests[0].exactly.count:'
        ' 2 devices of class "gpu.nvidia.com"; policy "dra" allows at most 1 per request. Set'
        " count to 1 or less (rule dra-too-many-devices)",
    ),
    "all-devices": (
        claim("every", request(allocationMode="All")),
        "(rule dra-all-devices)",
    ),
    "admin-access": (
        claim("monitor", request(adminAccess=True)),
        "(rule dra-admin-access)",
    ),
    "passthrough": (
        claim("vfio", request(device_class="vfio.gpu.nvidia.com")),
        'ResourceClaim/vfio: claim "vfio" request "gpu": spec.devices.requests[0].exactly'
        '.deviceClassName: device class "vfio.gpu.nvidia.com" is not one policy "dra" allows',
    ),
    "subrequest": (
        claim(
            "flexible",
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "mig", "deviceClassName": "mig.nvidia.com"},
                    {"name": "pair", "deviceClassName": "gpu.nvidia.com", "count": 2},
                ],
            },
        ),
        'ResourceClaim/flexible: claim "flexible" subrequest "gpu/pair":'
        " spec.devices.requests[0].firstAvailable[1].count: 2 devices",
    ),
    "mig-time-slicing": (
        claim(
            "sliced",
            request("mig", "mig.nvidia.com"),
            config=[gpu_config("mig", kind="MigDeviceConfig", strategy="TimeSlicing")],
        ),
        "(rule dra-sharing)",
    ),
    "unknown-profile": (
        claim("typo", annotations={names.ANNOTATION_PROFILE: "larg"}),
        'ResourceClaim/typo: claim "typo": unknown profile: "larg"'
        f" (metadata.annotations[{names.ANNOTATION_PROFILE}])",
    ),
}


@pytest.mark.parametrize(("obj", "said"), REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_claim_is_a_denied_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, obj: dict[str, Any], said: str
) -> None:
    """Each is valid to the API server; the webhook refuses it, naming the claim, the request
    and the rule. Nothing of it is printed, and the allowed claim beside it still is."""
    beside = claim("fine")
    code, out, err = mutate(capsys, tmp_path, [obj, beside], *DRA)
    assert code == 1
    lines = err.splitlines()
    assert lines, err
    assert all(
        line.startswith(f"denied: {obj['kind']}/{obj['metadata']['name']}: ") for line in lines
    )
    assert any(said in line for line in lines), err
    assert [o["metadata"]["name"] for o in yaml.safe_load_all(out)] == ["fine"]


# --------------------------------------------------------------------------- no change


NIC = claim("nic", request("nic", "nic.example.com"))
CONFIGURED = claim(
    "tuned",
    config=[
        gpu_config(
            "gpu",
            strategy="MPS",
            mpsConfig={
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "4Gi",
            },
        )
    ],
)
TIME_SLICED = claim(
    "sliced", config=[gpu_config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"})]
)
NO_DEVICES = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "empty", "namespace": "gpu-test"},
    "spec": {},
}


@pytest.mark.parametrize(
    ("obj", "args", "why"),
    [
        (
            NIC,
            DRA,
            'it asks only for devices of classes policy "dra" does not govern (nic.example.com):'
            " the webhook leaves them alone",
        ),
        (CONFIGURED, DRA, 'it is already configured: request "gpu" (GpuConfig)'),
        # A configuration for every request (requests empty) of the class's kind.
        (TIME_SLICED, DRA, 'it is already configured: request "gpu" (GpuConfig)'),
        (NO_DEVICES, DRA, "it asks for no device"),
    ],
    ids=[
        "other-class",
        "configured",
        "configured-for-all",
        "no-devices",
    ],
)
def test_a_claim_left_as_it_is_says_why(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    obj: dict[str, Any],
    args: list[str],
    why: str,
) -> None:
    code, out, err = mutate(capsys, tmp_path, [obj], *args)
    assert code == 0
    assert list(yaml.safe_load_all(out)) == [obj]
    assert err == f"no change: {obj['kind']}/{obj['metadata']['name']}: {why}\n"


@pytest.mark.parametrize(
    ("changes", "obj", "why"),
    [
        (
            {
                "dra": {
                    "deviceClasses": [
                        {"name": "gpu.nvidia.com", "allowed": True, "sharing": ["TimeSlicing"]}
                    ]
                }
            },
            claim("single-gpu"),
            'policy "lab" shares no device of class "gpu.nvidia.com" (TimeSlicing) with MPS, so it'
            " adds no MPS configuration",
        ),
        (
            # (A policy with profiles must name a default one.)
            {"profiles": None, "defaultProfile": None},
            claim("single-gpu"),
            f"no profile applies (no {names.ANNOTATION_PROFILE} annotation, and policy"
            ' "lab" has no defaultProfile)',
        ),
        (
            {"ruleModes": {"dra-mps-limits": "dry-run"}},
            claim("single-gpu"),
            'rule dra-mps-limits is in dry-run mode in policy "lab": the MPS configuration of'
            ' profile "medium" is not added yet',
        ),
        (
            {"mode": "dry-run"},
            claim("single-gpu"),
            'policy "lab" is in dry-run mode: it changes nothing',
        ),
    ],
    ids=["no-mps", "no-profile", "rule-dry-run", "policy-dry-run"],
)
def test_what_the_policy_leaves_unconfigured_says_why(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    changes: dict[str, Any],
    obj: dict[str, Any],
    why: str,
) -> None:
    """Where the shipped policy would add a configuration, a policy that does not (no MPS on
    the class, no profile, the rule or the policy in dry-run) leaves the claim as it is."""
    code, out, err = mutate(capsys, tmp_path, [obj], *LAB, policies=lab_policy(tmp_path, **changes))
    assert code == 0
    assert list(yaml.safe_load_all(out)) == [obj]
    assert err == f"no change: ResourceClaim/single-gpu: {why}\n"
    # The same claim under the shipped policy is changed: the policy made the difference.
    code, out, err = mutate(capsys, tmp_path, [obj], *DRA, "-o", "patch")
    assert (code, err) == (0, "")
    assert out != "[]\n"


# --------------------------------------------------------------------------- not reviewed


def test_a_claim_the_webhook_is_not_sent_is_left_unchanged_and_said_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A namespace that has not opted in, as for pods; and a claim of a version the webhook
    is never sent (the API server converts resource.k8s.io/v1beta1, whose requests are
    flat, to v1 first)."""
    code, out, err = mutate(
        capsys, tmp_path, [claim("pair", request(count=2))], "-l", "gpu-share.io/enabled=false"
    )
    assert code == 0
    assert err.startswith("not reviewed: ResourceClaim/pair: namespace gpu-test: ")
    assert err.endswith("; left unchanged\n")
    flat = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": "pair", "namespace": "gpu-test"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 2}]
            }
        },
    }
    path = tmp_path / "flat.yaml"
    path.write_text(yaml.safe_dump(flat))
    code = cli.main(["mutate", "-f", str(path), *DRA])
    out, err = capsys.readouterr()
    assert code == 0
    assert yaml.safe_load(out) == flat
    assert err == (
        "not reviewed: ResourceClaim/pair: the webhook is sent claims as resource.k8s.io/v1 (the"
        " API server converts resource.k8s.io/v1beta1); write it as resource.k8s.io/v1 to see"
        " what the webhook does; left unchanged\n"
    )


def test_claims_beside_a_pod_are_each_judged(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """One file with the quickstart's pieces: a pod that names a claim template, the template,
    and a claim of a NIC; the pod's refusal is its own, the exit code the file's."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pod1", "namespace": "gpu-test"},
        "spec": {
            "containers": [
                {
                    "name": "ctr",
                    "image": "ubuntu:22.04",
                    "command": [
                        "bash",
                        "-c",
                        "nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait",
                    ],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }
    single = template("single-gpu", request())
    single["metadata"]["namespace"] = "gpu-test"
    code, out, err = mutate(capsys, tmp_path, [pod, single, NIC], *DRA)
    assert code == 0, err
    kinds = [o["kind"] for o in yaml.safe_load_all(out)]
    assert kinds == ["Pod", "ResourceClaimTemplate", "ResourceClaim"]
    assert err == (
        'no change: ResourceClaim/nic: it asks only for devices of classes policy "dra" does not'
        " govern (nic.example.com): the webhook leaves them alone\n"
    )
    # Under the default policy (no dra section) the pod and the GPU claim template are
    # refused (rule resource-claims), the NIC's claim not.
    code, _, err = mutate(capsys, tmp_path, [pod, single, NIC])
    assert code == 1
    denied = [line for line in err.splitlines() if line.startswith("denied: ")]
    assert {line.split(":")[1].strip() for line in denied} == {
        "Pod/pod1",
        "ResourceClaimTemplate/single-gpu",
    }
    assert all("(rule resource-claims)" in line for line in denied)


def test_a_claim_of_a_shape_no_kubernetes_object_has_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = claim("bad")
    bad["spec"]["devices"]["requests"] = {"name": "gpu"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    assert cli.main(["mutate", "-f", str(path), *DRA]) == 2
    _, err = capsys.readouterr()
    assert err == (
        'error: ResourceClaim/bad: claim "bad": spec.devices.requests: must be a list, not an'
        " object\n"
    )


def test_a_claim_where_the_policy_label_names_no_policy_is_refused_saying_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The entries rendered for a policy send its GPU-class claims; when its file stops
    loading (or the label names none) no stand-in can judge them, and a claim made now would
    serve pods once the policy is back: refused, as GPU pods are."""
    code, out, err = mutate(
        capsys, tmp_path, [claim("single-gpu")], "-l", "gpu-share.io/policy=gold"
    )
    assert code == 1
    assert 'unknown policy: policy "gold" does not exist' in out + err
    assert "(rule unknown-policy)" in out + err


def test_a_gpu_claim_under_a_policy_without_dra_is_refused_saying_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Its pods may not use claims there; a claim made now would serve them, unreviewed,
    once the namespace moves to a policy that governs DRA."""
    code, _, err = mutate(capsys, tmp_path, [claim("single-gpu")])
    assert code == 1
    assert 'policy "default" has no dra section: its pods may not use claims' in err
    assert "(rule resource-claims)" in err


# --------------------------------------------------------------------------- the shipped policy


def test_the_shipped_policy_leaves_nvidias_quickstart_claims_as_they_are(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """gpu-test1 and 2 (a template of one GPU), gpu-test3 (a claim of one GPU) and gpu-test4
    (four MIG devices of one GPU), as published: admitted as written, each saying why, so
    they run on a driver without its MPSSupport gate."""
    objects = [
        dra_objects.obj("single-gpu-template"),
        dra_objects.obj("single-gpu-claim"),
        dra_objects.obj("mig-devices-template"),
    ]
    code, out, err = mutate(capsys, tmp_path, objects, *DRA, policies=SHIPPED)
    assert code == 0, err
    assert list(yaml.safe_load_all(out)) == objects
    not_added = 'policy "dra" adds no MPS configuration to requests of class'
    assert err.splitlines() == [
        f'no change: ResourceClaimTemplate/single-gpu: {not_added} "gpu.nvidia.com"'
        " (addMpsConfig: false)",
        f'no change: ResourceClaim/single-gpu: {not_added} "gpu.nvidia.com" (addMpsConfig: false)',
        f'no change: ResourceClaimTemplate/mig-devices: {not_added} "mig.nvidia.com"'
        " (addMpsConfig: false)",
    ]


def test_a_whole_device_where_the_policy_allows_none_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The shipped policy with MPS required on full GPUs, as its comments show: the
    quickstart claim gets the profile's MPS configuration; with the addition off, it is
    refused, and one the user sized passes."""
    gpu = {
        "name": "gpu.nvidia.com",
        "allowed": True,
        "sharing": ["MPS"],
        "mps": {"maxActiveThreadPercentage": 50, "maxPinnedMemoryMiB": 8192},
        "allowWholeDevice": False,
    }
    sized = lab_policy(tmp_path, dra={"deviceClasses": [gpu]})
    code, out, err = mutate(
        capsys, tmp_path, [claim("single-gpu")], *LAB, "-o", "patch", policies=sized
    )
    assert (code, err) == (0, "")
    assert yaml.safe_load(out) == [
        {"op": "add", "path": "/spec/devices/config", "value": [mps_entry("gpu", 25, "3840Mi")]}
    ]
    required = lab_policy(tmp_path, dra={"deviceClasses": [{**gpu, "addMpsConfig": False}]})
    code, out, err = mutate(
        capsys, tmp_path, [claim("single-gpu"), CONFIGURED], *LAB, policies=required
    )
    assert code == 1
    assert err == (
        'denied: ResourceClaim/single-gpu: claim "single-gpu" request "gpu":'
        " spec.devices.requests[0].exactly: no sharing configuration, so the driver gives the"
        ' whole device; policy "lab" allows no whole device of class "gpu.nvidia.com". Add a'
        ' GpuConfig for "gpu" with sharing strategy MPS (rule dra-whole-device)\n'
        'no change: ResourceClaim/tuned: it is already configured: request "gpu" (GpuConfig)\n'
    )
    assert [o["metadata"]["name"] for o in yaml.safe_load_all(out)] == ["tuned"]
