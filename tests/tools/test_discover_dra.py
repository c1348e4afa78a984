"""`gpu-share-webhook discover --slices`: a ResourceSlice dump (`kubectl get resourceslices -o
json`) becomes the policy's `dra` section. NVIDIA's device types become its classes (closed,
one device per request, no sharing configuration), with comments naming products, counts and
nodes; only each pool's newest generation counts; other drivers are named, not governed; what
discover writes loads and passes `policy check`; bad input is one line and exit 2. A cluster
whose GPUs all come through DRA gets a policy without nodeClasses (nor the device plugin's
fields, which would do nothing for pods with claims), in force on the server; one with
neither shared nodes nor NVIDIA GPUs is exit 1.

The slices (tests/support/slices.py) are written after the attributes NVIDIA's driver documents and
are valid `resource.k8s.io/v1` objects to Kubernetes' schema.
"""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support import server_helpers as h
from tests.support.nodes import A10G_TS, T4_MPS, T4_TS, node, write
from tests.support.slices import (
    A100,
    A100_PCIE,
    CLUSTER,
    H100,
    SCHEMAS,
    gpu,
    listing,
    nic,
    resource_slice,
    write_slices,
)
from webhook import cli
from webhook.engine import reviewing
from webhook.policy import names, policies
from webhook.server import app as server
from webhook.tools import discovering

NODES = [node("t4-1", T4_MPS), node("a10g-1", A10G_TS)]


def discover(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["discover", *args])
    out, err = capsys.readouterr()
    return code, out, err


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], list[str]]:
    code = cli.main(["policy", "check", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def comments(text: str) -> str:
    """The comments of a printed policy, as one line of text."""
    return " ".join(
        line.strip().removeprefix("#").strip()
        for line in text.splitlines()
        if line.strip().startswith("#")
    )


def run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *slices: dict[str, Any]
) -> tuple[int, str, str]:
    nodes = write(tmp_path, NODES)
    return discover(capsys, "-f", str(nodes), "--slices", str(write_slices(tmp_path, *slices)))


def dra_of(text: str) -> Any:
    return yaml.safe_load(text)["spec"]["dra"]


# --------------------------------------------------------------------------- the section


def test_nvidia_device_types_name_every_nvidia_class() -> None:
    """Every class of the GPU driver's device types; the ComputeDomain daemon class (another
    driver's, governed because its devices are given the node's GPUs) is the one more."""
    assert sorted(
        [*discovering.NVIDIA_DEVICE_CLASSES.values(), "compute-domain-daemon.nvidia.com"]
    ) == sorted(names.DRA_NVIDIA_CLASSES)


def closed(name: str) -> dict[str, Any]:
    return {"name": name, "allowed": False, "maxDevicesPerRequest": 1, "sharing": []}


def test_each_nvidia_device_type_found_is_a_closed_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(tmp_path, capsys, *CLUSTER)
    assert (code, err) == (0, "")
    assert dra_of(out) == {
        "deviceClasses": [
            closed("gpu.nvidia.com"),
            closed("mig.nvidia.com"),
            closed("vfio.gpu.nvidia.com"),
        ]
    }
    (policy,), problems = policies.parse_documents(out, "<discovered>")
    assert problems == []
    assert policy.dra is not None
    assert policy.dra.allowed == ()
    assert policy.gpu_classes == tuple(sorted(names.DRA_NVIDIA_CLASSES))
    # The comments aside, the text is the policy as data.
    found = discovering.survey_slices(discovering.read_slices(CLUSTER)[0])
    read, _ = discovering.read_nodes(NODES)
    assert yaml.safe_load(out) == discovering.policy_document(
        discovering.node_classes(discovering.survey(read)),
        name="default",
        dra=discovering.dra_section(discovering.dra_classes(found)),
    )


def test_the_comments_name_products_counts_and_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(tmp_path, capsys, *CLUSTER)
    text = comments(out)
    assert (
        f"from {tmp_path / 'slices.json'}: 6 ResourceSlices, 25 devices of NVIDIA's GPU"
        " DRA driver in 3 device classes."
    ) in text
    assert (
        f"16 GPUs on 3 nodes, at most 8 on one: {A100}: 8 on a100-1, a100-2, 40960 MiB"
        f" each; {H100}: 8 on h100-1, 81559 MiB each."
    ) in text
    assert f"7 MIG devices on 1 node: {A100_PCIE} MIG 1g.5gb: 7 on mig-1, 4864 MiB each." in text
    assert f"2 VFIO passthrough GPUs on 1 node: {A100_PCIE}: 2 on vm-1, 40960 MiB each." in text
    assert (
        "maxDevicesPerRequest: one device per request; raise it (at most 8: no node has"
        " more) for claims that need several."
    ) in text
    # The ceiling discover suggests, and no more: the smallest GPU's memory.
    assert "mps.maxPinnedMemoryMiB at most 40960 (the smallest GPU's memory" in text
    assert "mps.maxPinnedMemoryMiB at most 4864 (the smallest MIG device's memory" in text
    assert "MPS needs the driver's MPSSupport feature gate (alpha, off by default" in text
    assert "so discover opens none: set allowed: true on the classes" in text
    assert (
        "Not listed, so closed (no such devices in the slices): vgpu.gpu.nvidia.com,"
        " compute-domain-daemon.nvidia.com." in text
    )
    assert (
        "Not governed (requests of their classes pass, as a NIC's do): nic.example.com: 2"
        " devices on a100-1."
    ) in text


def test_what_discover_writes_passes_policy_check_with_nothing_to_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(tmp_path, capsys, *CLUSTER)
    directory = tmp_path / "site"
    directory.mkdir()
    (directory / "discovered.yaml").write_text(out)
    code, lines, err = check(capsys, str(directory), "--nodes", str(tmp_path / "nodes.json"))
    assert (code, err) == (0, [])
    assert lines[0] == (
        f"ok: policy default ({directory / 'discovered.yaml'}): classes nvidia-a10g-time-slicing,"
        " tesla-t4-mps; DRA classes allowed: none; closed: compute-domain-daemon.nvidia.com,"
        " gpu.nvidia.com, mig.nvidia.com,"
        " vfio.gpu.nvidia.com, vgpu.gpu.nvidia.com"
    )


def test_opened_as_its_comments_say_the_section_still_passes_policy_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the comments suggest fits the rest of the policy: MPS with the suggested ceiling
    is above none of the profiles discover wrote, so no warning; only the gate's note."""
    _, out, _ = run(tmp_path, capsys, *CLUSTER)
    opened = out.replace(
        "      - name: gpu.nvidia.com\n        allowed: false\n        maxDevicesPerRequest: 1\n"
        "        sharing: []\n",
        "      - name: gpu.nvidia.com\n        allowed: true\n        maxDevicesPerRequest: 1\n"
        "        sharing: [MPS]\n        mps: {maxPinnedMemoryMiB: 40960}\n",
    )
    assert opened != out
    directory = tmp_path / "site"
    directory.mkdir()
    (directory / "discovered.yaml").write_text(opened)
    code, lines, err = check(capsys, str(directory))
    assert code == 0
    assert "DRA classes allowed: gpu.nvidia.com;" in lines[0]
    assert [line.split(":")[0] for line in err] == ["note"]
    assert "MPSSupport" in err[0]


def test_only_the_newest_generation_of_a_pool_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The driver replaced a100-1's slice (generation 1, four A100s) with one of two H100s.
    old = resource_slice("a100-1", *(gpu(i) for i in range(4)), suffix="aaaaa")
    new = resource_slice(
        "a100-1", gpu(0, H100, "81559Mi"), gpu(1, H100, "81559Mi"), generation=2, suffix="bbbbb"
    )
    found = discovering.survey_slices(discovering.read_slices([old, new])[0])
    assert (found.current, found.stale) == ((discovering.read_slices([new])[0][0],), 1)
    (cls,) = discovering.dra_classes(found)
    assert [(p.name, p.count) for p in cls.products] == [(H100, 2)]
    _, out, err = run(tmp_path, capsys, old, new)
    assert err == ""
    text = comments(out)
    assert (
        "1 ResourceSlice (1 ResourceSlice of older pool generations left out: the driver"
        " replaced them), 2 devices on 1 node."
    ) in text
    assert f"2 GPUs on 1 node: {H100}: 2 on a100-1, 81559 MiB each." in text
    assert A100 not in text


def test_a_pool_short_of_its_slices_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    half = resource_slice("h100-1", *(gpu(i, H100, "81559Mi") for i in range(4)), count=2)
    code, out, err = run(tmp_path, capsys, half)
    assert code == 0
    assert err.splitlines() == [
        f"warning: {tmp_path / 'slices.json'}: pool h100-1 of driver gpu.nvidia.com has 1 of its"
        " 2 ResourceSlices of generation 1 in the dump (the driver is publishing it): its"
        " devices may be short; discover again once it is done"
    ]
    assert dra_of(out) == {"deviceClasses": [closed("gpu.nvidia.com")]}


def test_devices_no_nvidia_class_selects_are_named_not_governed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = gpu(0)
    odd["attributes"]["type"] = {"string": "nvswitch"}
    domain = {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}
    code, out, _ = run(
        tmp_path,
        capsys,
        resource_slice("h100-1", odd, gpu(1, H100, "81559Mi")),
        resource_slice("h100-1", domain, driver="compute-domain.nvidia.com"),
        resource_slice("a100-1", nic("eth1"), driver="nic.example.com"),
        resource_slice("h100-1", nic("eth1"), driver="nic.example.com"),
    )
    assert code == 0
    assert dra_of(out) == {"deviceClasses": [closed("gpu.nvidia.com")]}
    assert (
        "Not governed (requests of their classes pass, as a NIC's do):"
        " compute-domain.nvidia.com: 1 device on h100-1; gpu.nvidia.com (type nvswitch,"
        " which no NVIDIA class selects): 1 device on h100-1; nic.example.com: 2 devices on"
        " a100-1, h100-1."
    ) in comments(out)
    assert f"1 GPU on 1 node: {H100}: 1 on h100-1" in comments(out)


def test_slices_of_other_drivers_only_still_write_a_dra_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cluster that uses DRA for a NIC: the section lets its pods with claims in, and keeps
    NVIDIA's classes closed."""
    code, out, _ = run(
        tmp_path, capsys, resource_slice("a100-1", nic("eth1"), driver="nic.example.com")
    )
    assert code == 0
    assert dra_of(out) == {"deviceClasses": []}
    (policy,), problems = policies.parse_documents(out, "<discovered>")
    assert problems == []
    assert policy.dra is not None
    assert policy.dra.classes == {}
    assert "No device of NVIDIA's GPU DRA driver (gpu.nvidia.com) in the slices" in comments(out)


def test_gpus_shared_by_capacity_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(
        tmp_path, capsys, resource_slice("a100-1", gpu(0, multiple=True), gpu(1, multiple=True))
    )
    assert (
        "2 GPUs published with allowMultipleAllocations (the driver's ConsumableShares):"
        " claims of any namespace may share one by its memory capacity."
    ) in comments(out)
    _, plain, _ = run(tmp_path, capsys, resource_slice("a100-1", gpu(0), gpu(1)))
    assert "allowMultipleAllocations" not in plain


def test_memory_that_differs_within_a_product_is_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(tmp_path, capsys, resource_slice("a100-1", gpu(0), gpu(1, A100, "39Gi")))
    assert f"{A100}: 2 on a100-1, 39936, 40960 MiB." in comments(out)
    assert "mps.maxPinnedMemoryMiB at most 39936 (the smallest GPU's memory" in comments(out)


# --------------------------------------------------------------------------- DRA alone

# A cluster whose GPUs come through NVIDIA's DRA driver alone: the GPU Operator labels its GPU
# nodes gpu.present, and no device plugin (so no gpu-feature-discovery sharing label) runs.
DRA_NODES = [
    node(name, labels={"nvidia.com/gpu.present": "true"})
    for name in ("a100-1", "a100-2", "mig-1", "h100-1", "vm-1")
] + [node("cpu-1")]
CLOSED = {
    "deviceClasses": [
        closed("gpu.nvidia.com"),
        closed("mig.nvidia.com"),
        closed("vfio.gpu.nvidia.com"),
    ]
}


def dra_alone(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *slices: dict[str, Any],
    nodes: list[dict[str, Any]] | None = None,
) -> tuple[int, str, str]:
    path = write(tmp_path, DRA_NODES if nodes is None else nodes)
    return discover(
        capsys, "-f", str(path), "--slices", str(write_slices(tmp_path, *(slices or CLUSTER)))
    )


def test_a_cluster_of_dra_gpus_alone_gets_a_policy_without_node_classes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = dra_alone(tmp_path, capsys)
    assert (code, err) == (0, "")
    # Nothing of the device plugin's: the webhook would apply none of it (see below).
    assert yaml.safe_load(out) == {
        "apiVersion": "gpu-share.io/v1alpha1",
        "kind": "SharingPolicy",
        "metadata": {"name": "default"},
        "spec": {"mode": "enforce", "driverCapabilities": ["compute", "utility"], "dra": CLOSED},
    }
    assert yaml.safe_load(out) == discovering.policy_document((), name="default", dra=dra_of(out))
    (policy,), problems = policies.parse_documents(out, "<discovered>")
    assert problems == []
    assert (policy.classes, policy.shared_resources, dict(policy.profiles)) == ((), frozenset(), {})
    assert policy.dra is not None
    assert policy.dra.allowed == ()
    text = comments(out)
    assert (
        "from nodes.json: 6 nodes, none with GPUs the device plugin shares, and from"
    ) in text.replace(str(tmp_path / "nodes.json"), "nodes.json")
    assert "so this policy has no nodeClasses: its namespaces get GPUs through dynamic" in text
    assert (
        "No nodeClasses, sharedResources, runtimeClassName, tolerations or profiles: they are"
        " the device plugin's."
    ) in text
    assert "(NVIDIA's examples give them nvidia.com/gpu Exists NoSchedule)" in text
    # The driver's nodes lack gpu-feature-discovery's labels as they should: not reported.
    assert "is it running there?" not in text


def test_a_policy_of_neither_node_classes_nor_dra_is_not_written() -> None:
    with pytest.raises(ValueError, match="needs a dra or an exclusiveGpus section"):
        discovering.policy_document((), name="default")


def test_the_policy_of_dra_alone_passes_policy_check_against_the_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = dra_alone(tmp_path, capsys)
    directory = tmp_path / "site"
    directory.mkdir()
    (directory / "default.yaml").write_text(out)
    code, lines, err = check(capsys, str(directory), "--nodes", str(tmp_path / "nodes.json"))
    assert (code, err) == (0, [])
    assert lines[0].endswith(
        "; DRA classes allowed: none; closed: compute-domain-daemon.nvidia.com,"
        " gpu.nvidia.com, mig.nvidia.com,"
        " vfio.gpu.nvidia.com, vgpu.gpu.nvidia.com"
    )
    assert lines[-1].startswith(f"ok: {tmp_path / 'nodes.json'}: 6 nodes, 0 with shared GPUs")
    # Opened as the comments say, it still passes (with the MPSSupport gate's note).
    opened = out.replace(
        "      - name: gpu.nvidia.com\n        allowed: false\n        maxDevicesPerRequest: 1\n"
        "        sharing: []\n",
        "      - name: gpu.nvidia.com\n        allowed: true\n        maxDevicesPerRequest: 1\n"
        "        sharing: [MPS]\n        mps: {maxPinnedMemoryMiB: 40960}\n",
    )
    assert opened != out
    (directory / "default.yaml").write_text(opened)
    code, lines, err = check(capsys, str(directory), "--nodes", str(tmp_path / "nodes.json"))
    assert code == 0
    assert "DRA classes allowed: gpu.nvidia.com;" in lines[0]
    assert [line.split(":")[0] for line in err] == ["note"]


# A pod of NVIDIA's quickstart: one container using a claim made from a template.
CLAIM_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "pod", "namespace": "team-a"},
    "spec": {
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "ctr",
                "image": "ubuntu:22.04",
                "command": ["bash", "-c", "nvidia-smi -L; trap 'exit 0' TERM; sleep 9999"],
                "resources": {"claims": [{"name": "gpu"}]},
            }
        ],
    },
}
CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "single-gpu", "namespace": "team-a"},
    "spec": {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
    },
}


def test_the_objects_sent_are_valid() -> None:
    for version in SCHEMAS:
        for obj in (CLAIM_POD, CLAIM):
            kubernetes_validate.validate(obj, version, strict=True)


def test_runtime_class_and_tolerations_would_do_nothing_for_pods_with_claims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Why a policy of DRA alone leaves them out: with them, a pod with claims is reviewed
    exactly as without (the webhook sets them only on pods of node classes), so writing them
    would only say something false. If the webhook ever applies them to such pods, discover
    must write them."""
    _, out, _ = dra_alone(tmp_path, capsys)
    device_plugin = out.replace(
        "  mode: enforce\n",
        "  mode: enforce\n  runtimeClassName: nvidia\n  tolerations:\n"
        "    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n"
        "    - {key: nvidia.com/gpu.shared, operator: Exists, effect: NoSchedule}\n",
    )
    assert device_plugin != out
    (left_out,), _ = policies.parse_documents(out, "<discovered>")
    (written,), _ = policies.parse_documents(device_plugin, "<with them>")
    assert written.runtime_class_name == "nvidia"
    assert len(written.tolerations) == 2
    pod = copy.deepcopy(CLAIM_POD)
    del pod["spec"]["tolerations"]
    for obj in (pod, CLAIM_POD):
        decision = reviewing.review_object(obj, policy=left_out, mutate=True)
        assert decision.violations == []
        assert decision.patch == reviewing.review_object(obj, policy=written, mutate=True).patch
        patched = {op["path"] for op in decision.patch}
        assert not {p for p in patched if "runtimeClassName" in p or "tolerations" in p}


async def test_the_policy_of_dra_alone_is_in_force_on_the_server(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    aiohttp_server: Any,
    aiohttp_client: Any,
) -> None:
    """The discovered policy, the server's only one: claims of its closed classes are
    refused, pods with claims admitted, the device plugin's shared GPU refused."""
    _, out, _ = dra_alone(tmp_path, capsys)
    served = tmp_path / "policies"
    served.mkdir()
    (served / "default.yaml").write_text(out)
    app = server.create_app(h.settings(tmp_path, policies_dir=served))
    client = await h.start(aiohttp_server, aiohttp_client, app)

    async def answer(path: str, obj: dict[str, Any]) -> dict[str, Any]:
        response = await h.post_review(client, path, h.review_body(obj, "uid-1"))
        assert response.status == 200
        return h.response_of(await response.json(), "uid-1")

    refused = await answer("/validate", CLAIM)
    assert refused["allowed"] is False
    assert "(rule dra-class-not-allowed)" in refused["status"]["message"]
    admitted = await answer("/mutate", CLAIM_POD)
    assert admitted["allowed"] is True
    shared = copy.deepcopy(CLAIM_POD)
    del shared["spec"]["resourceClaims"]
    shared["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu.shared": "1"}}
    refused = await answer("/mutate", shared)
    assert refused["allowed"] is False
    assert "(rule resource-not-allowed)" in refused["status"]["message"]


def test_taints_of_the_dra_gpu_nodes_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pods with claims get no toleration from the webhook: the comments name the taints of
    the nodes with the GPUs (and only of those; not the node lifecycle's own)."""
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    nodes = [
        node("a100-1", taints=[gpu_taint]),
        node(
            "h100-1",
            taints=[
                {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            ],
        ),
        node("cpu-1", taints=[{"key": "dedicated", "value": "infra", "effect": "NoExecute"}]),
    ]
    code, out, _ = dra_alone(tmp_path, capsys, nodes=nodes)
    assert code == 0
    assert (
        "Taints of the nodes with these GPUs: nvidia.com/gpu:NoSchedule on h100-1;"
        " nvidia.com/gpu=present:NoSchedule on a100-1. The webhook adds no toleration to pods"
        " with claims"
    ) in comments(out)
    _, untainted, _ = dra_alone(tmp_path, capsys)
    assert "Taints of the nodes" not in untainted


NIC_ONLY = resource_slice("a100-1", nic("eth1"), driver="nic.example.com")


def _unknown_type() -> dict[str, Any]:
    odd = gpu(0)
    odd["attributes"]["type"] = {"string": "nvswitch"}
    return resource_slice("a100-1", odd)


@pytest.mark.parametrize(
    ("slices", "held"),
    [
        pytest.param([NIC_ONLY], "nic.example.com: 1 device on a100-1", id="another-driver"),
        pytest.param(
            [_unknown_type()],
            "gpu.nvidia.com (type nvswitch, which no NVIDIA class selects): 1 device on a100-1",
            id="no-gpu-type",
        ),
        pytest.param([resource_slice("a100-1")], "no device", id="no-device"),
    ],
)
def test_neither_a_shared_gpu_node_nor_an_nvidia_gpu_is_exit_1(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    slices: list[dict[str, Any]],
    held: str,
) -> None:
    nodes = write(tmp_path, [node("cpu-1")])
    path = write_slices(tmp_path, *slices)
    code, out, err = discover(capsys, "-f", str(nodes), "--slices", str(path))
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"error: {nodes}: no shared GPU node among 1 node; no node has gpu-feature-discovery"
        f" labels. {path}: no GPU of NVIDIA's DRA driver (gpu.nvidia.com) that one of its"
        f" device classes selects (it holds {held}). Nothing for a policy to describe: its"
        " nodeClasses describe the GPUs the device plugin shares, its dra section those of"
        " NVIDIA's DRA driver, and there are neither"
    ]


# --------------------------------------------------------------------------- reading


def test_one_file_on_stdin_serves_both_options(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kubectl get nodes,resourceslices -o json | gpu-share-webhook discover -f - --slices -`:
    each option reads its kind, and neither calls the other's objects ignored."""
    both = listing(*NODES, *CLUSTER)
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(both)))
    code, out, err = discover(capsys, "-f", "-", "--slices", "-")
    assert (code, err) == (0, "")
    assert [c["name"] for c in dra_of(out)["deviceClasses"]] == [
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "vfio.gpu.nvidia.com",
    ]
    assert "from <stdin>: 2 nodes" in out


def test_slices_in_the_node_file_alone_are_pointed_at(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(listing(*NODES, *CLUSTER[:2])))
    code, out, err = discover(capsys, "-f", str(path))
    assert code == 0
    assert "dra" not in yaml.safe_load(out)["spec"]
    assert err.splitlines() == [
        f"warning: {path}: ignored 2 objects that are not Nodes (2 ResourceSlices among them:"
        " give the file to --slices as well for a dra section)"
    ]


def test_the_slices_come_from_their_own_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_SLICES", str(write_slices(tmp_path, *CLUSTER)))
    code, out, _ = discover(capsys, "-f", str(write(tmp_path, NODES)))
    assert code == 0
    assert len(dra_of(out)["deviceClasses"]) == 3


def test_a_yaml_dump_and_the_apis_own_list_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = str(write(tmp_path, NODES))
    as_yaml = write_slices(tmp_path, *CLUSTER, name="slices.yaml")
    code, out, _ = discover(capsys, "-f", nodes, "--slices", str(as_yaml))
    assert (code, len(dra_of(out)["deviceClasses"])) == (0, 3)
    # client-go or curl: a ResourceSliceList whose items carry no kind or apiVersion.
    items = [{k: v for k, v in s.items() if k not in ("kind", "apiVersion")} for s in CLUSTER]
    api = tmp_path / "api.json"
    api.write_text(
        json.dumps(
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList", "items": items}
        )
    )
    code, out, _ = discover(capsys, "-f", nodes, "--slices", str(api))
    assert (code, len(dra_of(out)["deviceClasses"])) == (0, 3)


def test_other_objects_in_the_slices_file_are_ignored_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    code, _, err = run(tmp_path, capsys, CLUSTER[0], pod)
    assert code == 0
    assert err.splitlines() == [
        f"warning: {tmp_path / 'slices.json'}: ignored 1 object that is not a ResourceSlice"
    ]


def _without(path: str) -> dict[str, Any]:
    """CLUSTER[0] with the field at `path` (dotted) removed."""
    whole = copy.deepcopy(CLUSTER[0])
    obj: Any = whole
    *parents, last = path.split(".")
    for part in parents:
        obj = obj[int(part)] if part.isdigit() else obj[part]
    del obj[last]
    return whole


def _with(path: str, value: Any) -> dict[str, Any]:
    whole = copy.deepcopy(CLUSTER[0])
    obj: Any = whole
    *parents, last = path.split(".")
    for part in parents:
        obj = obj[int(part)] if part.isdigit() else obj[part]
    obj[int(last) if last.isdigit() else last] = value
    return whole


NAME = "ResourceSlice/a100-1-gpu.nvidia.com-x7k2p"
# (the file's text, what its one line says after "error: <path>: ").
BAD_SLICES = [
    pytest.param("{items: [", "not valid YAML or JSON at line 1, column 10:", id="not-json"),
    pytest.param("[1, 2]\n", "document 1 is a list, not a Kubernetes object", id="not-an-object"),
    pytest.param(json.dumps(listing()), "holds no Kubernetes object", id="empty-list"),
    pytest.param(
        json.dumps(listing(*NODES)),
        "holds no ResourceSlice object (expected the output of `kubectl get"
        " resourceslices -o json`)",
        id="a-list-of-nodes",
    ),
    pytest.param(
        json.dumps(listing(CLUSTER[0], CLUSTER[0])),
        f"{NAME}: appears twice in the dump",
        id="a-slice-twice",
    ),
    pytest.param(
        json.dumps(_without("metadata.name")),
        "object 1, a ResourceSlice: metadata.name is missing",
        id="no-name",
    ),
    pytest.param(
        json.dumps(_with("apiVersion", "resource.k8s.io/v1beta1")),
        f"{NAME}: apiVersion 'resource.k8s.io/v1beta1': discover reads"
        " resource.k8s.io/v1, which Kubernetes 1.34 and later serve (`kubectl get"
        " resourceslices -o json` there)",
        id="v1beta1",
    ),
    pytest.param(json.dumps(_without("spec")), f"{NAME}: spec is missing", id="no-spec"),
    pytest.param(json.dumps(_with("spec", [])), f"{NAME}: spec is not a mapping", id="spec-a-list"),
    pytest.param(
        json.dumps(_without("spec.driver")), f"{NAME}: spec.driver is missing", id="no-driver"
    ),
    pytest.param(json.dumps(_without("spec.pool")), f"{NAME}: spec.pool is missing", id="no-pool"),
    pytest.param(
        json.dumps(_with("spec.pool.generation", "1")),
        f"{NAME}: spec.pool.generation: '1' is not a whole number of at least 0",
        id="generation-a-string",
    ),
    pytest.param(
        json.dumps(_with("spec.pool.resourceSliceCount", 0)),
        f"{NAME}: spec.pool.resourceSliceCount: '0' is not a whole number of at least 1",
        id="no-slices-in-the-pool",
    ),
    pytest.param(
        json.dumps(_with("spec.devices", {"gpu-0": {}})),
        f"{NAME}: spec.devices is not a list",
        id="devices-a-mapping",
    ),
    pytest.param(
        json.dumps(_without("spec.devices.2.name")),
        f"{NAME}: spec.devices[2].name is missing",
        id="a-device-without-name",
    ),
    pytest.param(
        json.dumps(_with("spec.devices.0.attributes.type", "gpu")),
        f"{NAME}: spec.devices[0].attributes.type: not an attribute (a mapping with"
        " one of string, int, bool or version)",
        id="a-bare-attribute",
    ),
    pytest.param(
        json.dumps(_with("spec.devices.1.capacity.memory", {"value": "40 GiB"})),
        f"{NAME}: spec.devices[1].capacity.memory.value: '40 GiB' is not a quantity",
        id="memory-not-a-quantity",
    ),
    pytest.param(
        json.dumps(_with("spec.devices.1.capacity.memory", "40Gi")),
        f"{NAME}: spec.devices[1].capacity.memory: not a capacity (a mapping with value)",
        id="a-bare-capacity",
    ),
]


@pytest.mark.parametrize(("content", "expected"), BAD_SLICES)
def test_bad_slices_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    path = tmp_path / "slices.json"
    path.write_text(content)
    code, out, err = discover(capsys, "-f", str(write(tmp_path, NODES)), "--slices", str(path))
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"error: {path}: {expected}"), line
    assert "Traceback" not in err


def test_a_missing_slices_file_is_bad_input_even_where_no_node_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = write(tmp_path, [node("cpu-1"), node("t4-1", T4_TS)])
    missing = tmp_path / "missing.json"
    code, out, err = discover(capsys, "-f", str(nodes), "--slices", str(missing))
    assert (code, out, err.splitlines()) == (2, "", [f"error: {missing}: no such file"])


def test_an_odd_attribute_of_nvidia_is_read_as_absent_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `type` of another form (a valid attribute, no form NVIDIA's driver writes) leaves the
    device of no known type, named in the comments."""
    odd = gpu(0)
    odd["attributes"]["type"] = {"int": 1}
    code, out, _ = run(tmp_path, capsys, resource_slice("a100-1", odd, gpu(1)))
    assert code == 0
    assert re.search(
        r"gpu\.nvidia\.com \(no type attribute, which no NVIDIA class selects\): 1"
        r" device on a100-1",
        comments(out),
    )


# --------------------------------------------------------------------------- per pool


def test_each_pool_gets_the_dra_devices_of_its_own_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    teams = {"a100-1": "b", "a100-2": "b", "mig-1": "c", "h100-1": "c", "vm-1": "c"}
    pooled = [node("t4-1", T4_MPS, labels={"team": "a"})] + [
        node(n["metadata"]["name"], labels={
            **n["metadata"]["labels"], "team": teams.get(n["metadata"]["name"], "none")})
        for n in DRA_NODES
    ]
    path = write(tmp_path, pooled)
    code, out, err = discover(
        capsys, "-f", str(path), "--slices", str(write_slices(tmp_path, *CLUSTER)),
        "--pool", "a=team=a", "--pool", "b=team=b", "--pool", "c=team=c")
    assert (code, err) == (0, "")
    docs = {d["metadata"]["name"]: d["spec"] for d in yaml.safe_load_all(out)}
    listed = {name: [c["name"] for c in spec["dra"]["deviceClasses"]]
              for name, spec in docs.items()}
    assert listed == {"a": [], "b": ["gpu.nvidia.com"],
                      "c": ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]}
    assert [c["name"] for c in docs["a"]["nodeClasses"]] == ["tesla-t4-mps"]
    assert "nodeClasses" not in docs["b"]
    # The NIC on a100-1 is pool b's to name, no one's to govern.
    b = out.split("\n---\n")[1]
    assert "nic.example.com: 2 devices on a100-1" in comments(b)
    site = tmp_path / "site"
    site.mkdir()
    (site / "teams.yaml").write_text(out)
    code, _, err_lines = check(capsys, str(site), "--nodes", str(path))
    assert code == 0, err_lines
