"""`gpu-share-webhook discover` and `policy check --nodes`: node objects built from the labels
gpu-feature-discovery documents (time-slicing, MPS, renamed and not, MIG mixed and single)
become classes of a policy that loads and whose selectors match exactly the nodes it names;
labels that disagree are reported, never guessed; a policy is checked against a node dump.
"""

from __future__ import annotations

import io
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support import kube
from tests.support.nodes import (
    A10G_TS,
    A100_PARENT,
    H100,
    L4_MPS,
    MIXED,
    SINGLE,
    T4_MPS,
    T4_TS,
    T4_TS_NOT_RENAMED,
    TEAM_POOLS,
    TEAMS,
    Gpu,
    mig,
    node,
    write,
)
from webhook import cli
from webhook.policy import policies
from webhook.tools import discovering

# Nodes as GFD labels them (Gpu, node) and node dumps (write) are tests/support/nodes.py's.

# Why MPS on a node with several GPUs is warned about.
LOOSE = (
    "the device plugin starts each MPS control daemon without CUDA_VISIBLE_DEVICES, so a client"
    " there is not confined to its replica's GPU"
)


def survey(*nodes: dict[str, Any]) -> discovering.Survey:
    read, others = discovering.read_nodes(list(nodes))
    return discovering.survey(read, others=others)


def specs(*nodes: dict[str, Any]) -> list[dict[str, Any]]:
    return [c.spec() for c in discovering.node_classes(survey(*nodes))]


# ---------------------------------------------------------------------- classes from labels

CLASSES = [
    pytest.param(
        [node("a10g-1", A10G_TS)],
        [{"name": "nvidia-a10g-time-slicing", "product": "NVIDIA-A10G",
          "strategy": "time-slicing", "renamed": True, "replicas": 4, "memoryMiB": 23028,
          "gpusPerNode": 1}],
        id="a-renamed-time-slicing-node-is-a-renamed-time-slicing-class",
    ),
    pytest.param(
        [node("t4-1", T4_MPS)],
        [{"name": "tesla-t4-mps", "product": "Tesla-T4", "strategy": "mps", "renamed": True,
          "replicas": 4, "memoryMiB": 15360, "gpusPerNode": 1}],
        id="a-renamed-mps-node-with-mps-capable-is-a-renamed-mps-class",
    ),
    pytest.param(
        [node("t4-1", Gpu("Tesla-T4", "time-slicing", 4, renamed=False))],
        [{"name": "tesla-t4-time-slicing", "product": "Tesla-T4", "strategy": "time-slicing",
          "renamed": False, "replicas": 4, "memoryMiB": 15360, "gpusPerNode": 1}],
        id="a-SHARED-product-advertising-nvidia-com-gpu-is-a-class-that-is-not-renamed",
    ),
    pytest.param(
        [node("l4-1", L4_MPS)],
        [{"name": "nvidia-l4-mps", "product": "NVIDIA-L4", "strategy": "mps", "renamed": False,
          "replicas": 2, "memoryMiB": 23034, "gpusPerNode": 1}],
        id="mps-that-is-not-renamed-is-a-class-too",
    ),
    pytest.param(
        [node("mig-1", A100_PARENT, mig("1g.10gb"), labels=MIXED)],
        [{"name": "a100-sxm4-80gb-mig-1g-10gb-time-slicing",
          "resource": "nvidia.com/mig-1g.10gb", "product": "A100-SXM4-80GB-MIG-1g.10gb",
          "strategy": "time-slicing", "renamed": True, "replicas": 2, "memoryMiB": 9856,
          "gpusPerNode": 7}],
        id="mixed-mig-time-slicing-is-a-class-of-the-mig-resource-and-its-parent-is-not-shared",
    ),
    pytest.param(
        [node("mig-1", A100_PARENT, mig("1g.10gb", renamed=False),
              mig("3g.40gb", replicas=3, renamed=False, count=1, memory=40192), labels=MIXED)],
        [{"name": "a100-sxm4-80gb-mig-1g-10gb-time-slicing",
          "resource": "nvidia.com/mig-1g.10gb", "product": "A100-SXM4-80GB-MIG-1g.10gb",
          "strategy": "time-slicing", "renamed": False, "replicas": 2, "memoryMiB": 9856,
          "gpusPerNode": 7},
         {"name": "a100-sxm4-80gb-mig-3g-40gb-time-slicing",
          "resource": "nvidia.com/mig-3g.40gb", "product": "A100-SXM4-80GB-MIG-3g.40gb",
          "strategy": "time-slicing", "renamed": False, "replicas": 3, "memoryMiB": 40192,
          "gpusPerNode": 1}],
        id="each-mixed-mig-profile-is-its-own-class",
    ),
    pytest.param(
        [node("mig-1", Gpu("A100-SXM4-40GB-MIG-1g.5gb", "time-slicing", 2, count=56,
                           memory=4864), labels=SINGLE)],
        [{"name": "a100-sxm4-40gb-mig-1g-5gb-time-slicing",
          "product": "A100-SXM4-40GB-MIG-1g.5gb", "strategy": "time-slicing", "renamed": True,
          "replicas": 2, "memoryMiB": 4864, "gpusPerNode": 56}],
        id="single-mig-time-slicing-is-a-class-of-nvidia-com-gpu-counting-mig-devices",
    ),
    pytest.param(
        [node("h100-1", Gpu("NVIDIA-H100-80GB-HBM3", "time-slicing", 10, count=8,
                            memory=81559))],
        [{"name": "nvidia-h100-80gb-hbm3-time-slicing", "product": "NVIDIA-H100-80GB-HBM3",
          "strategy": "time-slicing", "renamed": True, "replicas": 10, "memoryMiB": 81559,
          "gpusPerNode": 8}],
        id="a-node-with-8-gpus-is-a-class-with-8-gpus-per-node",
    ),
    pytest.param(
        [node("t4-1", T4_MPS), node("t4-2", T4_MPS), node("a10g-1", A10G_TS)],
        [{"name": "nvidia-a10g-time-slicing", "product": "NVIDIA-A10G",
          "strategy": "time-slicing", "renamed": True, "replicas": 4, "memoryMiB": 23028,
          "gpusPerNode": 1},
         {"name": "tesla-t4-mps", "product": "Tesla-T4", "strategy": "mps", "renamed": True,
          "replicas": 4, "memoryMiB": 15360, "gpusPerNode": 1}],
        id="nodes-of-one-kind-share-one-class",
    ),
    pytest.param(
        [node("t4-1", T4_TS), node("t4-4", Gpu("Tesla-T4", "time-slicing", 4, count=4))],
        [{"name": "tesla-t4-time-slicing", "product": "Tesla-T4", "strategy": "time-slicing",
          "renamed": True, "replicas": 4, "memoryMiB": 15360, "gpusPerNode": 1}],
        id="nodes-with-different-gpu-counts-share-a-class-with-the-smallest-count",
    ),
    pytest.param(
        [node("t4-1", Gpu("Tesla-T4", "time-slicing", 4, memory=None))],
        [{"name": "tesla-t4-time-slicing", "product": "Tesla-T4", "strategy": "time-slicing",
          "renamed": True, "replicas": 4, "gpusPerNode": 1}],
        id="time-slicing-without-a-memory-label-has-no-memoryMiB",
    ),
    pytest.param(
        [node("t4-1", T4_TS, status=False),
         node("t4-2", Gpu("Tesla-T4", "time-slicing", 4, renamed=False), status=False)],
        [{"name": "tesla-t4-time-slicing", "product": "Tesla-T4", "strategy": "time-slicing",
          "renamed": True, "replicas": 4, "memoryMiB": 15360, "gpusPerNode": 1},
         {"name": "tesla-t4-time-slicing-not-renamed", "product": "Tesla-T4",
          "strategy": "time-slicing", "renamed": False, "replicas": 4, "memoryMiB": 15360,
          "gpusPerNode": 1}],
        id="without-a-status-the-product-label-says-renamed-or-not",
    ),
    pytest.param(
        [node("t4-1", Gpu("Tesla-T4", "time-slicing", 4, renamed=False),
              capacity={"nvidia.com/gpu.shared": "0"})],
        [{"name": "tesla-t4-time-slicing", "product": "Tesla-T4", "strategy": "time-slicing",
          "renamed": False, "replicas": 4, "memoryMiB": 15360, "gpusPerNode": 1}],
        id="a-resource-kubelet-keeps-at-zero-is-not-advertised",
    ),
    pytest.param(
        [node("t4-a", T4_TS), node("t4-b", Gpu("Tesla-T4", "time-slicing", 2))],
        [{"name": "tesla-t4-time-slicing-2x", "product": "Tesla-T4", "strategy": "time-slicing",
          "renamed": True, "replicas": 2, "memoryMiB": 15360, "gpusPerNode": 1},
         {"name": "tesla-t4-time-slicing-4x", "product": "Tesla-T4", "strategy": "time-slicing",
          "renamed": True, "replicas": 4, "memoryMiB": 15360, "gpusPerNode": 1}],
        id="classes-that-differ-only-in-replicas-are-named-by-them",
    ),
    pytest.param(
        [node("api", labels={"node-role.kubernetes.io/control-plane": ""}), node("t4-1", T4_MPS)],
        [{"name": "tesla-t4-mps", "product": "Tesla-T4", "strategy": "mps", "renamed": True,
          "replicas": 4, "memoryMiB": 15360, "gpusPerNode": 1}],
        id="nodes-without-gpu-labels-are-ignored",
    ),
]


@pytest.mark.parametrize(("nodes", "expected"), CLASSES)
def test_each_kind_of_shared_gpu_node_is_a_class(
    nodes: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> None:
    found = survey(*nodes)
    assert [str(p) for p in found.problems] == []
    assert specs(*nodes) == expected


@pytest.mark.parametrize(("nodes", "expected"), CLASSES)
def test_each_compiled_class_selects_exactly_the_nodes_it_was_made_from(
    nodes: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> None:
    found = survey(*nodes)
    for cls in discovering.node_classes(found):
        assert discovering.matching(cls.compiled().selector, found.nodes) == list(cls.nodes)


@pytest.mark.parametrize(("nodes", "expected"), CLASSES)
def test_the_policy_of_each_case_loads(
    nodes: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> None:
    classes = discovering.node_classes(survey(*nodes))
    doc = discovering.policy_document(classes, name="found")
    loaded, problems = policies.parse_documents(yaml.safe_dump(doc), "<discovered>")
    assert problems == []
    assert [c.name for c in loaded[0].classes] == [e["name"] for e in expected]


# ---------------------------------------------------------------------- labels that disagree

NOT_RENAMED_T4 = Gpu("Tesla-T4", "mps", 4, renamed=False)

PROBLEMS = [
    pytest.param(
        node("x", NOT_RENAMED_T4, capacity={"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "4"}),
        ["nvidia.com/gpu.product=Tesla-T4-SHARED means not renamed, but the node advertises"
         " nvidia.com/gpu.shared (renamed)"],
        id="a-SHARED-product-on-a-node-that-advertises-gpu-shared",
    ),
    pytest.param(
        node("x", T4_MPS, capacity={"nvidia.com/gpu": "4", "nvidia.com/gpu.shared": "0"}),
        ["nvidia.com/gpu.product=Tesla-T4 (no -SHARED) means renamed, but the node advertises"
         " nvidia.com/gpu, not nvidia.com/gpu.shared"],
        id="a-product-without-SHARED-on-a-node-that-advertises-nvidia-com-gpu",
    ),
    pytest.param(
        node("x", T4_MPS, capacity={"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "0",
                                    "example.com/t4": "4"}),
        ["nvidia.com/gpu.product=Tesla-T4 (no -SHARED) means renamed, but the node does not"
         " advertise nvidia.com/gpu.shared (renamed to another name with `rename:`? policies"
         " know nvidia.com/gpu.shared only)"],
        id="a-renamed-resource-that-is-not-advertised-as-shared",
    ),
    pytest.param(
        node("x", T4_MPS, drop=("nvidia.com/gpu.replicas",)),
        ["nvidia.com/gpu.sharing-strategy=mps but nvidia.com/gpu.replicas is missing"],
        id="a-sharing-strategy-without-replicas",
    ),
    pytest.param(
        node("x", T4_MPS, labels={"nvidia.com/gpu.replicas": "1"}),
        ["nvidia.com/gpu.sharing-strategy=mps but nvidia.com/gpu.replicas=1 (sharing needs at"
         " least 2)"],
        id="a-sharing-strategy-with-one-replica",
    ),
    pytest.param(
        node("x", T4_TS, labels={"nvidia.com/gpu.sharing-strategy": "none"}),
        ["nvidia.com/gpu.replicas=4 but nvidia.com/gpu.sharing-strategy=none"],
        id="replicas-with-no-sharing-strategy",
    ),
    pytest.param(
        node("x", T4_TS, drop=("nvidia.com/gpu.sharing-strategy",)),
        ["nvidia.com/gpu.replicas=4 but nvidia.com/gpu.sharing-strategy is missing"],
        id="replicas-without-a-sharing-strategy-label",
    ),
    pytest.param(
        node("x", T4_TS, labels={"nvidia.com/gpu.replicas": "four"}),
        ["nvidia.com/gpu.replicas=four is not a whole number"],
        id="replicas-that-are-not-a-number",
    ),
    pytest.param(
        node("x", T4_TS, labels={"nvidia.com/gpu.sharing-strategy": "spatial"}),
        ["nvidia.com/gpu.sharing-strategy=spatial is not none, time-slicing or mps"],
        id="an-unknown-sharing-strategy",
    ),
    pytest.param(
        node("x", A100_PARENT, mig("1g.10gb", "mps"), labels=MIXED | {
            "nvidia.com/mps.capable": "true"}),
        ["nvidia.com/mig-1g.10gb.sharing-strategy=mps on a MIG device"
         " (nvidia.com/mig-1g.10gb.product=A100-SXM4-80GB-MIG-1g.10gb), which the device plugin"
         " refuses"],
        id="mps-on-a-mixed-mig-resource",
    ),
    pytest.param(
        node("x", Gpu("A100-SXM4-40GB-MIG-1g.5gb", "mps", 2, count=7, memory=4864),
             labels=SINGLE),
        ["nvidia.com/gpu.sharing-strategy=mps on a MIG device"
         " (nvidia.com/gpu.product=A100-SXM4-40GB-MIG-1g.5gb), which the device plugin refuses"],
        id="mps-on-single-strategy-mig-devices",
    ),
    pytest.param(
        node("x", T4_MPS, drop=("nvidia.com/gpu.count",)),
        ["nvidia.com/gpu.count is missing"],
        id="a-shared-gpu-without-a-count",
    ),
    pytest.param(
        node("x", T4_MPS, drop=("nvidia.com/gpu.memory",)),
        ["nvidia.com/gpu.memory is missing (MPS ceilings are computed from it)"],
        id="mps-without-a-memory-label",
    ),
    pytest.param(
        node("x", T4_MPS, labels={"nvidia.com/mps.capable": "false"}),
        ["nvidia.com/gpu.sharing-strategy=mps but nvidia.com/mps.capable=false"],
        id="mps-on-a-node-that-is-not-mps-capable",
    ),
    pytest.param(
        node("x", T4_TS, labels={"nvidia.com/mps.capable": "true"}),
        ["nvidia.com/gpu.sharing-strategy=time-slicing but nvidia.com/mps.capable=true"],
        id="time-slicing-on-a-node-that-says-mps",
    ),
    pytest.param(
        # (mps.capable left out: with it, the time-slicing resource disagrees on its own)
        node("x", T4_MPS, mig("1g.10gb"), labels=MIXED, drop=("nvidia.com/mps.capable",)),
        ["shares with both mps and time-slicing (the device plugin applies one strategy per"
         " node): nvidia.com/gpu.sharing-strategy=mps,"
         " nvidia.com/mig-1g.10gb.sharing-strategy=time-slicing"],
        id="two-strategies-on-one-node",
    ),
    pytest.param(
        node("x", Gpu("Tesla-T4"), labels={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}),
        ["nvidia.com/gpu.product=Tesla-T4-SHARED says shared, but nvidia.com/gpu.replicas=1"],
        id="a-SHARED-product-that-is-not-shared",
    ),
    pytest.param(
        node("x", capacity={"nvidia.com/gpu.shared": "4"}),
        ["advertises nvidia.com/gpu.shared but has no nvidia.com/gpu.* labels (is"
         " gpu-feature-discovery running on it?)"],
        id="a-shared-resource-without-labels",
    ),
    pytest.param(
        node("x", Gpu("Tesla-T4", "mps", 64)),
        ["nvidia.com/gpu.replicas=64 is more than MPS allows (48)"],
        id="more-mps-replicas-than-the-plugin-allows",
    ),
]


@pytest.mark.parametrize(("bad", "messages"), PROBLEMS)
def test_labels_that_disagree_are_reported_and_the_node_left_out(
    bad: dict[str, Any], messages: list[str]
) -> None:
    found = survey(bad, node("t4-1", T4_TS))
    assert [str(p) for p in found.problems] == [f"node x: {m}" for m in messages]
    assert found.left_out == ("x",)
    assert "x" not in found.shared_nodes
    assert [c.nodes for c in discovering.node_classes(found)] == [("t4-1",)]


def test_a_left_out_node_that_a_class_still_selects_is_named_with_it() -> None:
    # Same selector labels as t4-1; only the count is missing.
    found = survey(node("t4-1", T4_TS), node("x", T4_TS, drop=("nvidia.com/gpu.count",)))
    (cls,) = discovering.node_classes(found)
    assert (cls.nodes, cls.also_matches) == (("t4-1",), ("x",))


# ---------------------------------------------------------------------- nodes that do not share

def test_gpu_nodes_that_share_nothing_are_reported_not_guessed() -> None:
    found = survey(
        node("v100", Gpu("Tesla-V100")),
        node("invalid", Gpu("A100-SXM4-40GB-MIG-INVALID", replicas=0, count=0, memory=0),
             labels=SINGLE),
        node("bare", labels={"nvidia.com/gpu.present": "true"}),
        node("cpu"),
        node("mig", A100_PARENT, mig("1g.10gb"), mig("3g.40gb", "none", 1, count=1), labels=MIXED),
    )
    assert found.problems == ()
    assert found.unshared_nodes == ("invalid", "v100")
    assert {u.node: u.reason for u in found.unshared if u.node != "mig"} == {
        "v100": "nvidia.com/gpu.replicas=1",
        "invalid": "nvidia.com/gpu.product=A100-SXM4-40GB-MIG-INVALID: an invalid MIG"
                   " configuration",
    }
    assert found.unlabelled == ("bare",)
    assert [(u.node, u.resource) for u in found.unshared_on_sharing_nodes] == [
        ("mig", "nvidia.com/mig-3g.40gb")]
    assert found.shared_nodes == ("mig",)


# ---------------------------------------------------------------------- names and profiles


def test_class_names_are_unique_dns_labels() -> None:
    # 56 characters: with -SHARED, as long as a label value may be.
    long = "NVIDIA-GeForce-RTX-4090-Laptop-GPU-With-A-Very-Long-Marketing-Name"[:56]
    nodes = [
        node("a", Gpu(long, "time-slicing", 2)),
        node("b", Gpu(long, "time-slicing", 2, renamed=False)),
        node("c", T4_TS),
        node("d", Gpu("Tesla-T4", "time-slicing", 4, renamed=False)),
    ]
    names = [c.name for c in discovering.node_classes(survey(*nodes))]
    assert len(set(names)) == len(names) == 4
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n) and len(n) <= 63 for n in names)
    assert "tesla-t4-time-slicing" in names
    assert "tesla-t4-time-slicing-not-renamed" in names


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        pytest.param(
            [T4_MPS, L4_MPS],
            {"small": {"activeThreadPercentage": 12, "pinnedMemoryMiB": 1920},
             "medium": {"activeThreadPercentage": 25, "pinnedMemoryMiB": 3840}},
            id="profiles-fit-the-smallest-mps-ceiling",
        ),
        pytest.param(
            [Gpu("Tesla-T4", "mps", 48)],
            {"small": {"activeThreadPercentage": 1, "pinnedMemoryMiB": 160},
             "medium": {"activeThreadPercentage": 2, "pinnedMemoryMiB": 320}},
            id="profiles-at-the-most-mps-replicas",
        ),
        pytest.param([T4_TS, A10G_TS], {}, id="no-mps-class-no-profiles"),
    ],
)
def test_mps_profiles_fit_every_mps_class(gpus: list[Gpu], expected: dict[str, Any]) -> None:
    nodes = [node(f"n{i}", g) for i, g in enumerate(gpus)]
    classes = discovering.node_classes(survey(*nodes))
    assert discovering.mps_profiles(classes) == expected
    for cls in classes:
        compiled = cls.compiled()
        for profile in expected.values():
            if compiled.mps:
                assert profile["activeThreadPercentage"] <= (compiled.thread_ceiling or 0)
                assert profile["pinnedMemoryMiB"] <= (compiled.memory_ceiling_mib or 0)


def test_taints_the_policy_does_not_tolerate_are_named() -> None:
    taints = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
              {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
              {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
              {"key": "spot", "effect": "PreferNoSchedule"}]
    (cls,) = discovering.node_classes(survey(node("t4-1", T4_MPS, taints=taints)))
    assert cls.untolerated == (("dedicated=ml:NoSchedule", ("t4-1",)),)


# ---------------------------------------------------------------------- the discover command

EVERYTHING = [
    node("t4-mps-1", T4_MPS, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
    node("t4-mps-2", Gpu("Tesla-T4", "mps", 4, count=2)),
    node("a10g-1", A10G_TS),
    node("t4-ts-1", Gpu("Tesla-T4", "time-slicing", 4, renamed=False)),
    node("l4-1", L4_MPS),
    node("mig-1", A100_PARENT, mig("1g.10gb"), labels=MIXED),
    node("h100-1", Gpu("NVIDIA-H100-80GB-HBM3", "time-slicing", 10, count=8, memory=81559)),
    node("v100-1", Gpu("Tesla-V100")),
    # Its selector labels are t4-mps-1's; its status says otherwise.
    node("bad-1", T4_MPS, capacity={"nvidia.com/gpu": "4", "nvidia.com/gpu.shared": "0"}),
    node("cpu-1"),
]


def discover(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["discover", *args])
    out, err = capsys.readouterr()
    return code, out, err


def commented_nodes(text: str) -> dict[str, set[str]]:
    """For each class, the nodes its comments say it matches (itself and left-out ones)."""
    out: dict[str, set[str]] = {}
    listed: set[str] = set()
    for line in text.splitlines():
        stripped = line.strip()
        m = re.match(r"# (?:Matches \d+ nodes?|Its selector also matches .*?): (.*)$", stripped)
        if m:
            listed |= set(m.group(1).split(", "))
        m = re.match(r"- name: (\S+)$", stripped)
        if m:
            out[m.group(1)], listed = listed, set()
    return out


def test_discover_prints_a_policy_whose_classes_select_exactly_the_nodes_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = discover(capsys, "-f", str(write(tmp_path, EVERYTHING)))
    assert code == 0
    loaded, problems = policies.parse_documents(out, "<discovered>")
    assert problems == []
    (policy,) = loaded
    assert policy.name == "default"
    read, _ = discovering.read_nodes(EVERYTHING)
    named = commented_nodes(out)
    assert set(named) == {c.name for c in policy.classes}
    for cls in policy.classes:
        assert set(discovering.matching(cls.selector, read)) == named[cls.name], cls.name
    assert named["tesla-t4-mps"] == {"t4-mps-1", "t4-mps-2", "bad-1"}
    assert policy.shared_resources == {
        "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb.shared"}
    assert dict(policy.profiles) == {
        "small": policies.Profile("small", 12, 1920),
        "medium": policies.Profile("medium", 25, 3840),
    }
    assert policy.default_profile == "medium"
    assert policy.mode == "enforce"
    # The comments aside, the text is the policy as data.
    assert yaml.safe_load(out) == discovering.policy_document(
        discovering.node_classes(discovering.survey(read)), name="default")
    assert err.splitlines() == [
        "warning: left out: node bad-1: nvidia.com/gpu.product=Tesla-T4 (no -SHARED) means"
        " renamed, but the node advertises nvidia.com/gpu, not nvidia.com/gpu.shared",
        f"warning: class tesla-t4-mps: MPS on nodes with more than one GPU (t4-mps-2: 2): {LOOSE}",
    ]


def test_discover_comments_say_what_the_labels_cannot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = discover(capsys, "-f", str(write(tmp_path, EVERYTHING)))
    text = " ".join(line.strip().lstrip("# ") for line in out.splitlines() if "#" in line)
    assert "Generated by `gpu-share-webhook discover` from" in text
    # The site's own directory, as README and docs/install.md have it: policies/ of a clone
    # holds the shipped examples, which describe nodes the site may not have.
    assert "gpu-share-webhook policy check site/policies/ --nodes" in text
    assert "check policies/" not in text
    assert "node bad-1: nvidia.com/gpu.product=Tesla-T4 (no -SHARED) means renamed" in text
    assert "GPU nodes that share no GPU (this policy does not describe them): v100-1" in text
    assert ("failRequestsGreaterThanOne is not in the labels, so each class has the device"
            " plugin's default (true for mps, false for time-slicing)") in text
    assert "GPUs per node differ (1, 2): gpusPerNode is the smallest" in text
    # Nothing in the policy says failRequestsGreaterThanOne: the compiled default applies.
    doc = yaml.safe_load(out)
    assert all("failRequestsGreaterThanOne" not in c for c in doc["spec"]["nodeClasses"])


def test_discover_reads_a_kubectl_list_in_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = discover(capsys, "-f", str(write(tmp_path, EVERYTHING, "nodes.yaml")),
                            "--name", "lab")
    assert code == 0
    (policy,), problems = policies.parse_documents(out, "<discovered>")
    assert (problems, policy.name) == ([], "lab")


def test_discover_reads_a_node_list_from_the_api_on_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The API's NodeList: items carry no kind.
    items = [{k: v for k, v in n.items() if k not in ("kind", "apiVersion")} for n in EVERYTHING]
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"kind": "NodeList", "items": items})))
    code, out, _ = discover(capsys, "-f", "-")
    assert code == 0
    assert "from <stdin>: 10 nodes" in out


def test_discover_takes_its_options_from_its_own_environment_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_NODES", str(write(tmp_path, EVERYTHING)))
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_POLICY_NAME", "from-env")
    # render's variable names the webhook configurations, not the policy.
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_NAME", "my-webhook")
    code, out, _ = discover(capsys)
    assert code == 0
    assert yaml.safe_load(out)["metadata"] == {"name": "from-env"}


def test_discover_fails_when_no_node_shares_a_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, [node("v100-1", Gpu("Tesla-V100")), node("cpu-1"),
                            node("x", T4_MPS, drop=("nvidia.com/gpu.replicas",))])
    code, out, err = discover(capsys, "-f", str(path))
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "warning: left out: node x: nvidia.com/gpu.sharing-strategy=mps but"
        " nvidia.com/gpu.replicas is missing",
        f"error: {path}: no shared GPU node among 3 nodes; sharing no GPU: v100-1; left out"
        " (labels disagree, above): x",
    ]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(None, "{path}: no such file", id="a-missing-file"),
        pytest.param("{items: [", "{path}: not valid YAML or JSON at line 1, column 10:",
                     id="not-yaml-or-json"),
        pytest.param("[1, 2]\n", "{path}: document 1 is a list, not a Kubernetes object",
                     id="not-an-object"),
        pytest.param(json.dumps({"kind": "Pod", "metadata": {"name": "p"}}),
                     "{path}: holds no Node object (expected the output of `kubectl get nodes"
                     " -o json`)", id="no-node"),
        pytest.param(json.dumps({"kind": "Node", "metadata": {
                         "name": "n", "labels": {"nvidia.com/gpu.count": 4}}}),
                     "{path}: Node/n: metadata.labels.nvidia.com/gpu.count: 4 is not a string"
                     " (label values are)", id="a-label-that-is-not-a-string"),
        pytest.param(json.dumps({"kind": "Node", "metadata": {}}),
                     "{path}: object 1, a Node: metadata.name is missing",
                     id="a-node-without-name"),
        pytest.param(json.dumps({"kind": "List", "items": [node("a"), node("a")]}),
                     "{path}: Node/a: appears twice in the dump", id="a-node-twice"),
    ],
)
def test_discover_refuses_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str
) -> None:
    path = tmp_path / "nodes.json"
    if content is not None:
        path.write_text(content)
    code, out, err = discover(capsys, "-f", str(path))
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith("error: " + expected.format(path=path))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param([], "error: discover needs -f NODES (or GPU_SHARE_WEBHOOK_NODES): the output"
                         " of `kubectl get nodes -o json`", id="no-file"),
        pytest.param(["-f", "x.json", "--name", "Not_A_Name"],
                     "gpu-share-webhook discover: error: argument --name: invalid value"
                     " 'Not_A_Name': expected a policy name (lower-case letters, digits and '-',"
                     " at most 63)",
                     id="a-name-that-is-not-a-dns-label"),
    ],
)
def test_discover_refuses_bad_usage_in_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    try:
        code, out, err = discover(capsys, *args)
    except SystemExit as exc:  # an option argparse refuses
        code, (out, err) = exc.code, capsys.readouterr()
    assert (code, out, err.splitlines()) == (2, "", [expected])


# ---------------------------------------------------------------------- policy check --nodes


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["policy", "check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_what_discover_prints_passes_policy_check_on_the_same_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = write(tmp_path, EVERYTHING)
    _, printed, _ = discover(capsys, "-f", str(nodes))
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "discovered.yaml").write_text(printed)
    code, out, err = check(capsys, str(tmp_path / "policies"), "--nodes", str(nodes))
    assert code == 0, err
    lines = out.splitlines()
    matches = "ok: policy default class tesla-t4-mps matches 3 nodes: bad-1, t4-mps-1, t4-mps-2"
    assert matches in lines
    assert out.splitlines()[-1] == (
        f"ok: {nodes}: 10 nodes, 7 with shared GPUs (1 left out: labels disagree): every class"
        " matches a node, every shared GPU node a class")
    assert err.splitlines() == [
        "warning: policy default class tesla-t4-mps: MPS on nodes with more than one GPU"
        f" (nvidia.com/gpu.count t4-mps-2=2): {LOOSE}; where tenants must stay apart, give MPS"
        " nodes one GPU",
        "warning: labels disagree, not judged: node bad-1: nvidia.com/gpu.product=Tesla-T4"
        " (no -SHARED) means renamed, but the node advertises nvidia.com/gpu, not"
        " nvidia.com/gpu.shared",
    ]


POLICY = """\
apiVersion: gpu-share.io/v1alpha1
kind: SharingPolicy
metadata: {name: default}
spec:
  nodeClasses:
    - {name: t4-mps, product: Tesla-T4, strategy: mps, replicas: 4, memoryMiB: 15360}
    - {name: a10g, product: NVIDIA-A10G, strategy: time-slicing, replicas: 4}
"""


def policy_dir(tmp_path: Path, text: str = POLICY) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "default.yaml").write_text(text)
    return directory


def test_policy_check_fails_when_a_class_matches_no_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = write(tmp_path, [node("t4-1", T4_MPS), node("cpu-1")])
    code, out, err = check(capsys, str(policy_dir(tmp_path)), "--nodes", str(nodes))
    assert code == 1
    assert "ok: policy default class t4-mps matches 1 node: t4-1" in out.splitlines()
    assert err.splitlines() == [
        f"error: policy default class a10g matches no node in {nodes}"
        " (nvidia.com/gpu.sharing-strategy=time-slicing, nvidia.com/gpu.product=NVIDIA-A10G,"
        " nvidia.com/gpu.replicas=4)",
        f"{nodes}: 2 nodes, 1 with shared GPUs: 1 problem",
    ]


def test_policy_check_fails_when_a_shared_gpu_node_matches_no_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = write(tmp_path, [node("t4-1", T4_MPS), node("a10g-1", A10G_TS),
                             node("mig-1", A100_PARENT, mig("1g.10gb"), labels=MIXED),
                             node("v100-1", Gpu("Tesla-V100"))])
    code, _, err = check(capsys, str(policy_dir(tmp_path)), "--nodes", str(nodes))
    assert code == 1
    assert err.splitlines() == [
        "error: node mig-1: nvidia.com/mig-1g.10gb.shared (A100-SXM4-80GB-MIG-1g.10gb,"
        " time-slicing, 2 replicas, renamed) matches no class of any policy"
        " (`gpu-share-webhook discover` prints one)",
        f"{nodes}: 4 nodes, 3 with shared GPUs: 1 problem",
    ]


def test_policy_check_warns_where_a_class_promises_more_than_its_nodes_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = write(tmp_path, [node("t4-1", T4_MPS), node("a10g-1", A10G_TS)])
    text = POLICY.replace("memoryMiB: 15360", "memoryMiB: 16384, gpusPerNode: 2")
    code, _, err = check(capsys, str(policy_dir(tmp_path, text)), "--nodes", str(nodes))
    assert code == 0
    assert err.splitlines() == [
        f"warning: {tmp_path / 'policies' / 'default.yaml'}: spec.nodeClasses[0]: class t4-mps"
        f" shares 2 GPUs per node by MPS: {LOOSE}; where tenants must stay apart, give MPS nodes"
        " one GPU",
        "warning: policy default class t4-mps: memoryMiB 16384 is more than nvidia.com/gpu.memory"
        " on t4-1=15360 (the MPS ceilings would be above what those GPUs have)",
        "warning: policy default class t4-mps: gpusPerNode 2 is more than nvidia.com/gpu.count on"
        " t4-1=1 (a request for several replicas is pinned to nodes with enough GPUs)",
    ]


def test_policy_check_refuses_a_bad_node_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nodes.json"
    code, out, err = check(capsys, str(policy_dir(tmp_path)), "--nodes", str(missing))
    assert (code, out, err.splitlines()) == (2, "", [f"error: {missing}: no such file"])
    missing.write_text(json.dumps({"kind": "Pod", "metadata": {"name": "p"}}))
    code, out, err = check(capsys, str(tmp_path / "policies"), "--nodes", str(missing))
    assert (code, out, err.splitlines()) == (2, "", [
        f"error: {missing}: holds no Node object (expected the output of `kubectl get nodes -o"
        " json`)"])


def test_policy_check_reads_the_node_file_from_its_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = write(tmp_path, [node("t4-1", T4_MPS), node("a10g-1", A10G_TS)])
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_NODES", str(nodes))
    code, out, _ = check(capsys, str(policy_dir(tmp_path)))
    assert code == 0
    assert "ok: policy default class a10g matches 1 node: a10g-1" in out.splitlines()


# ---------------------------------------------------------------------- label selectors

N = {"team": "a", "gpu-pool": "h100", "nvidia.com/gpu.count": "8", "blank": ""}

# (selector, labels, whether it selects them): as kubectl's `-l` reads it.
SELECTS = [
    ("team=a", N, True),
    ("team==a", N, True),
    ("team=b", N, False),
    ("team=a", {}, False),
    ("team!=b", N, True),
    ("team!=a", N, False),
    ("team!=a", {}, True),
    ("gpu-pool in (a100,h100)", N, True),
    ("gpu-pool in (a100,t4)", N, False),
    ("gpu-pool in (h100)", {}, False),
    ("gpu-pool notin (a100)", N, True),
    ("gpu-pool notin (a100,h100)", N, False),
    ("gpu-pool notin (h100)", {}, True),
    ("team", N, True),
    ("team", {}, False),
    ("!team", N, False),
    ("!team", {}, True),
    ("team=a,gpu-pool in (a100,h100)", N, True),
    ("team=a,gpu-pool in (a100)", N, False),
    ("  team = a ,  gpu-pool  in  ( h100 , a100 )  ", N, True),
    ("nvidia.com/gpu.count>7", N, True),
    ("nvidia.com/gpu.count>8", N, False),
    ("nvidia.com/gpu.count<9", N, True),
    ("team>1", N, False),
    ("nvidia.com/gpu.count>1", {}, False),
    ("blank=", N, True),
    ("team=", N, False),
    ("blank in (x,)", N, True),
    ("blank in ()", N, True),
    ("team in (in,notin)", {"team": "notin"}, True),
    ("", N, True),
    ("", {}, True),
]


@pytest.mark.parametrize(("text", "labels", "expected"), SELECTS)
def test_a_label_selector_selects_as_kubectl_reads_it(
    text: str, labels: dict[str, str], expected: bool
) -> None:
    selector = discovering.parse_selector(text)
    assert selector.matches(labels) is expected
    # What it says of itself reads back as the same selector.
    assert discovering.parse_selector(str(selector)) == selector


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("team in (a", "no ')' closes the values after team in (", id="open-set"),
        pytest.param("team in a", "team in needs its values in parentheses", id="no-set"),
        pytest.param("team in (a b)", "'b' among the values after team in (", id="no-comma"),
        pytest.param("team=a,", "a ',' with no requirement after it", id="trailing-comma"),
        pytest.param(",team", "',' where a label key belongs", id="leading-comma"),
        pytest.param("team a", "'a' after team, where an operator belongs", id="no-operator"),
        pytest.param("!team=a", "'=' after !team, where ',' or the end belongs",
                     id="not-exists-with-a-value"),
        pytest.param("team=a b", "'b' after team=a, where ',' or the end belongs",
                     id="two-values"),
        pytest.param("team=(", "'(' after team=, where a value belongs", id="no-value"),
        pytest.param("count>x", "count>x: > compares with a whole number", id="gt-not-a-number"),
        pytest.param("-team=a", "'-team' is not a label key", id="bad-key"),
        pytest.param("a/b/c=d", "'a/b/c' is not a label key", id="two-slashes"),
        pytest.param("team=-a", "'-a' (of team) is not a label value", id="bad-value"),
        pytest.param(f"team={'x' * 64}", "(of team) is not a label value", id="long-value"),
    ],
)
def test_a_selector_that_does_not_parse_says_where(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        discovering.parse_selector(text)


# ---------------------------------------------------------------------- one policy per pool


def pooled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nodes: list[dict[str, Any]],
    *pools: str,
) -> tuple[int, str, str, Path]:
    path = write(tmp_path, nodes)
    code, out, err = discover(capsys, "-f", str(path), *(a for p in pools for a in ("--pool", p)))
    return code, out, err, path


def by_name(text: str) -> dict[str, policies.Policy]:
    loaded, problems = policies.parse_documents(text, "<discovered>")
    assert problems == []
    return {p.name: p for p in loaded}


def test_each_pool_gets_a_policy_its_own_nodes_decide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err, _ = pooled(tmp_path, capsys, TEAMS, *TEAM_POOLS)
    assert code == 0, err
    found = by_name(out)
    assert list(found) == ["team-a", "team-b", "team-c"]
    read, _ = discovering.read_nodes(TEAMS)
    selected = {n: {x for c in p.classes for x in discovering.matching(c.selector, read)}
                for n, p in found.items()}
    assert selected == {"team-a": {"a100-1", "a100-2"}, "team-b": {"t4-1", "t4-2"},
                        "team-c": set()}
    a, b, c = found["team-a"], found["team-b"], found["team-c"]
    # Shared pools: no whole GPU, since one would be had on another team's nodes.
    assert a.exclusive_gpus == policies.ExclusiveGpus(allowed=False)
    assert b.exclusive_gpus == policies.ExclusiveGpus(allowed=False)
    assert (a.shared_resources, b.shared_resources) == (
        {"nvidia.com/gpu.shared"}, {"nvidia.com/gpu"})
    # The whole H100s: no class, up to the 8 one node has.
    assert (c.classes, c.shared_resources) == ((), frozenset())
    assert c.exclusive_gpus == policies.ExclusiveGpus(allowed=True, max_per_pod=8)
    assert {p.driver_capabilities for p in found.values()} == {("compute", "utility")}
    docs = list(yaml.safe_load_all(out))
    assert "nodeClasses" not in docs[2]["spec"]
    assert docs[2]["spec"]["exclusiveGpus"] == {"allowed": True, "maxPerPod": 8}
    text = " ".join(line.strip().lstrip("# ") for line in out.splitlines() if "#" in line)
    assert "GPU nodes in no pool (no policy below describes them): v100-1" in text
    assert "Whole GPUs (replicas 1: nvidia.com/gpu) on 2 nodes: h100-1: 8, h100-2: 8." in text
    assert "Taints of these nodes: nvidia.com/gpu:NoSchedule on h100-1." in text
    # A node without GPUs in no pool (cpu-1) is nobody's business.
    assert err.splitlines() == [
        "warning: GPU nodes in no pool (no policy describes them): v100-1",
        "warning: policy team-a class nvidia-a100-sxm4-80gb-mps: MPS on nodes with more than"
        f" one GPU (a100-2: 2): {LOOSE}",
    ]


def test_the_policies_of_the_pools_pass_policy_check_on_the_same_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _, path = pooled(tmp_path, capsys, TEAMS, *TEAM_POOLS)
    site = tmp_path / "site"
    site.mkdir()
    (site / "teams.yaml").write_text(out)
    code, checked, err = check(capsys, str(site), "--nodes", str(path))
    assert code == 0, err
    team_c = f"ok: policy team-c ({site / 'teams.yaml'} (document 3)): classes none (whole GPUs"
    assert f"{team_c} only)" in checked.splitlines()
    assert checked.splitlines()[-1] == (
        f"ok: {path}: 8 nodes, 4 with shared GPUs: every class matches a node, every shared"
        " GPU node a class")
    # And each alone, on the nodes of its pool: what a pool's nodes decide fits them.
    for number, (pool, members) in enumerate(
        [("team-a", TEAMS[:2]), ("team-b", TEAMS[2:4]), ("team-c", TEAMS[4:6])]
    ):
        own = tmp_path / f"own-{number}"
        own.mkdir()
        (own / "policy.yaml").write_text(
            yaml.safe_dump(next(d for d in yaml.safe_load_all(out)
                                if d["metadata"]["name"] == pool)))
        dump = write(own, members)
        code, _, err = check(capsys, str(own), "--nodes", str(dump))
        assert code == 0, (pool, err)


def test_whole_gpus_of_a_pool_are_asked_for_as_its_policy_allows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The motivating case: under one policy for every node, whose T4 class is not renamed,
    8 whole H100s are read as 8 shared replicas and refused; under the H100 team's own policy
    they are whole GPUs, up to the 8 a node has; under an MPS team's, none."""
    eight = kube.pod(kube.container(limits={"nvidia.com/gpu": 8}))
    nine = kube.pod(kube.container(limits={"nvidia.com/gpu": 9}))
    _, out, _, path = pooled(tmp_path, capsys, TEAMS, *TEAM_POOLS)
    found = by_name(out)
    decision, _ = kube.admit(eight, found["team-c"])
    assert decision.allowed, decision.message
    refused, _ = kube.admit(nine, found["team-c"])
    assert [v.rule for v in refused.violations] == ["exclusive-gpus"]
    refused, _ = kube.admit(eight, found["team-a"])
    assert [v.rule for v in refused.violations] == ["exclusive-gpus"]
    code, single, _ = discover(capsys, "-f", str(path))
    assert code == 0
    (one,) = by_name(single).values()
    refused, _ = kube.admit(eight, one)
    assert [v.rule for v in refused.violations] == ["multi-replica"]
    assert "Ask for nvidia.com/gpu: 1" in refused.message


def test_a_pool_of_shared_and_whole_gpus_gets_classes_and_counts_the_whole_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [
        node("t4-1", T4_MPS, labels={"pool": "x"}),
        node("h100-1", H100, labels={"pool": "x"}),
        node("l40-1", Gpu("NVIDIA-L40S", count=4), labels={"pool": "x"}),
        # A mixed MIG node: its 3g.40gb profile is left whole.
        node("mig-1", A100_PARENT, mig("1g.10gb"),
             mig("3g.40gb", "none", 1, count=2, memory=40192), labels=MIXED | {"pool": "x"}),
    ]
    code, out, err, _ = pooled(tmp_path, capsys, nodes, "x=pool=x")
    assert code == 0, err
    (policy,) = by_name(out).values()
    assert [c.name for c in policy.classes] == [
        "a100-sxm4-80gb-mig-1g-10gb-time-slicing", "tesla-t4-mps"]
    assert policy.exclusive_gpus == policies.ExclusiveGpus(allowed=True, max_per_pod=8)
    text = " ".join(line.strip().lstrip("# ") for line in out.splitlines() if "#" in line)
    assert ("Whole GPUs (replicas 1: nvidia.com/gpu, nvidia.com/mig-3g.40gb) on 3 nodes:"
            " h100-1: 8, l40-1: 4, mig-1: 2.") in text


def test_whole_gpus_asked_for_by_a_name_the_policy_shares_are_not_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [node("t4-1", T4_TS_NOT_RENAMED, labels={"pool": "x"}),
             node("h100-1", H100, labels={"pool": "x"})]
    code, out, err, _ = pooled(tmp_path, capsys, nodes, "x=pool=x")
    assert code == 0
    (policy,) = by_name(out).values()
    assert policy.shared_resources == {"nvidia.com/gpu"}
    assert policy.exclusive_gpus == policies.ExclusiveGpus(allowed=False)
    assert err.splitlines() == [
        "warning: policy x: whole GPUs on h100-1 (nvidia.com/gpu) are asked for by a name this"
        " policy shares (its classes are not renamed): its pods are pinned to the classes and"
        " never get them. Rename the shared GPUs (renameByDefault: true), or put those nodes"
        " in a pool of their own",
    ]


def test_a_class_that_matches_nodes_of_another_pool_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [node("t4-1", T4_MPS, labels={"team": "a"}), node("t4-2", T4_MPS, labels={"team": "b"})]
    code, out, err, _ = pooled(tmp_path, capsys, nodes, "a=team=a", "b=team=b")
    assert code == 0
    assert err.splitlines() == [
        f"warning: policy {p} class tesla-t4-mps also matches nodes outside pool {p}: {n} (the"
        " webhook pins pods by GPU labels, not by pool, so they may land there)"
        for p, n in (("a", "t4-2"), ("b", "t4-1"))
    ]
    assert "# Its selector also matches nodes outside the pool: t4-2. The" in out


def test_a_node_in_two_pools_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err, path = pooled(tmp_path, capsys, TEAMS, *TEAM_POOLS, "gpus=gpu-pool")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"error: {path}: nodes in more than one pool (a"
        " node's GPUs belong to one policy; make the selectors exclusive): a100-1 (team-a, gpus);"
        " a100-2 (team-a, gpus); h100-1 (team-c, gpus); h100-2 (team-c, gpus)",
    ]


@pytest.mark.parametrize(
    ("pools", "expected"),
    [
        pytest.param(["a=team=a,gpu-pool in (a100)", "z=team=z"],
                     "pool z (team=z) selects no node", id="a-pool-of-no-node"),
        pytest.param(["cpus=!gpu-pool,!nvidia.com/gpu.present"],
                     "pool cpus (!gpu-pool,!nvidia.com/gpu.present): no node with a shared or"
                     " whole GPU among its 1 node; no node has gpu-feature-discovery labels",
                     id="a-pool-without-gpus"),
    ],
)
def test_a_pool_with_nothing_to_describe_fails_and_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pools: list[str], expected: str
) -> None:
    code, out, err, path = pooled(tmp_path, capsys, TEAMS, *pools)
    assert (code, out) == (1, "")
    assert err.splitlines()[-1] == f"error: {path}: {expected}"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["--pool", "team-a"], "invalid value 'team-a': expected NAME=SELECTOR, a"
                     " policy name and a label selector (team=a)", id="no-selector"),
        pytest.param(["--pool", "Team=team=a"], "invalid value 'Team=team=a': expected"
                     " NAME=SELECTOR, NAME a policy name (lower-case letters, digits and '-', at"
                     " most 63)", id="a-name-that-is-not-a-policy-name"),
        pytest.param(["--pool", "a=team in (x"], "invalid value 'a=team in (x': expected"
                     " NAME=SELECTOR, SELECTOR a label selector: no ')' closes the values after"
                     " team in (", id="a-selector-that-does-not-parse"),
    ],
)
def test_a_pool_option_that_is_wrong_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        discover(capsys, "-f", str(write(tmp_path, TEAMS)), *args)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"gpu-share-webhook discover: error: argument --pool: {expected}"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["--name", "lab", "--pool", "a=team=a"], "error: --name (or"
                     " GPU_SHARE_WEBHOOK_POLICY_NAME) names the one policy; with --pool each"
                     " pool's NAME names its policy", id="name-and-pool"),
        pytest.param(["--pool", "a=team=a", "--pool", "a=team=b"],
                     "error: --pool: a named twice (one policy each)", id="a-name-twice"),
    ],
)
def test_pools_that_do_not_go_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    code, out, err = discover(capsys, "-f", str(write(tmp_path, TEAMS)), *args)
    assert (code, out, err.splitlines()) == (2, "", [expected])


def test_without_pools_the_output_stays_one_policy_without_an_exclusive_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = discover(capsys, "-f", str(write(tmp_path, TEAMS)))
    assert code == 0
    (doc,) = list(yaml.safe_load_all(out))
    assert "exclusiveGpus" not in doc["spec"]
    assert doc["spec"]["driverCapabilities"] == ["compute", "utility"]


# ---------------------------------------------------------------------- MPS on several GPUs


@pytest.mark.parametrize(
    ("gpus", "warned"),
    [
        pytest.param([Gpu("Tesla-T4", "mps", 4, count=2)], True, id="mps-on-two-gpus"),
        pytest.param([T4_MPS], False, id="mps-on-one-gpu"),
        pytest.param([Gpu("Tesla-T4", "time-slicing", 4, count=2)], False,
                     id="time-slicing-on-two-gpus"),
    ],
)
def test_discover_warns_of_mps_on_a_node_with_several_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gpus: list[Gpu], warned: bool
) -> None:
    code, out, err = discover(capsys, "-f", str(write(tmp_path, [node("n-1", *gpus)])))
    assert code == 0
    warning = (
        f"warning: class tesla-t4-mps: MPS on nodes with more than one GPU (n-1: 2): {LOOSE}")
    assert err.splitlines() == ([warning] if warned else [])
    assert ("MPS on nodes with more than one GPU" in out) is warned


# ---------------------------------------------------------------------- the recipe's quota


def test_the_resource_quota_of_the_team_recipe_is_one_kubectl_applies() -> None:
    text = (kube.REPO / "docs" / "policies.md").read_text(encoding="utf-8")
    section = text.split("## One policy per team", 1)[1].split("\n## ", 1)[0]
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
                if "kind: ResourceQuota" in b]
    quota = yaml.safe_load(textwrap.dedent(block))
    for version in kube.VERSIONS:
        kubernetes_validate.validate(quota, version, strict=True)
    hard = quota["spec"]["hard"]
    # Extended resources are quota'd by `requests.` alone, DRA devices per class, claims by
    # count; a value is a quantity as a string.
    for key in hard:
        assert (
            key.startswith("requests.nvidia.com/")
            or key.endswith(".deviceclass.resource.k8s.io/devices")
            or key == "count/resourceclaims.resource.k8s.io"
        ), key
    assert {"requests.nvidia.com/gpu", "requests.nvidia.com/gpu.shared"} <= set(hard)
    assert all(isinstance(v, str) for v in hard.values())
