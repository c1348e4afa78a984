"""Near misses: what looks like something the webhook reads, but is not, is told.

Each near miss is a case of `NEAR_MISSES`, with the warning a user must read.
Three doors: the core (`reviewing.admit`, both endpoints), the HTTP server (the real app over
TLS, through the rendered configurations: a near miss the API server never sends is one the
server cannot tell), and `mutate` (stderr). Then the other side: none of the published
manifests or the examples is taken for a near miss, and a result without a change says why.
"""

from __future__ import annotations

import copy
import difflib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.engine import route_cases
from tests.support import apiserver, corpus, kube
from tests.support import server_helpers as h
from webhook import cli
from webhook.engine import hints, namespaces, reviewing
from webhook.policy import kinds as workload_kinds
from webhook.policy import policies
from webhook.server import app as server
from webhook.tools import rendering

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"
OPTED_IN = {namespaces.ENABLED_LABEL: "true", namespaces.NAME_LABEL: "team-a"}


def _pod(
    limits: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    requests: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod "train" of one container "cuda" (`kube.pod`), with these resources and metadata."""
    pod = kube.pod(
        kube.container("cuda", limits=limits, requests=requests),
        name="train",
        annotations=annotations or None,
    )
    if labels:
        pod["metadata"]["labels"] = labels
    return pod


def _workload(kind: str, pod: dict[str, Any], **annotations: dict[str, str]) -> dict[str, Any]:
    """`pod` as the template of a workload "train" (`kube.workload`); `annotations` on the
    workload's own metadata (`own`) or its CronJob's jobTemplate (`job`)."""
    obj = kube.workload(kind, pod)
    obj["metadata"]["name"] = "train"
    if "own" in annotations:
        obj["metadata"]["annotations"] = annotations["own"]
    if "job" in annotations:
        obj["spec"]["jobTemplate"]["metadata"] = {"annotations": annotations["job"]}
    return obj


def _deployment(pod: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return _workload("Deployment", pod, **({"own": annotations} if annotations else {}))


def _cronjob(pod: dict[str, Any], job_annotations: dict[str, str]) -> dict[str, Any]:
    return _workload("CronJob", pod, job=job_annotations)


SHARED = {"nvidia.com/gpu.shared": 1}


@dataclass(frozen=True)
class NearMiss:
    obj: dict[str, Any]
    # The warning, whole (as the server sends it, at most 120 characters).
    warning: str
    labels: dict[str, str] = field(default_factory=lambda: dict(OPTED_IN))


NEAR_MISSES: dict[str, NearMiss] = {
    "resource-dash-for-dot": NearMiss(
        _pod({"nvidia.com/gpu-shared": 1}),
        "did you mean nvidia.com/gpu.shared? nvidia.com/gpu-shared is no NVIDIA GPU resource"
        ' (container "cuda")',
    ),
    "resource-plural": NearMiss(
        _pod({"nvidia.com/gpus": 1}),
        'did you mean nvidia.com/gpu? nvidia.com/gpus is no NVIDIA GPU resource (container "cuda")',
    ),
    "resource-in-requests-only": NearMiss(
        _pod(requests={"nvidia.com/gpu.share": 1}),
        "did you mean nvidia.com/gpu.shared? nvidia.com/gpu.share is no NVIDIA GPU resource"
        ' (container "cuda")',
    ),
    "resource-mig-without-dot": NearMiss(
        _pod({"nvidia.com/mig-1g5gb": 1}),
        "MIG devices are named like nvidia.com/mig-1g.5gb: nvidia.com/mig-1g5gb is not"
        ' (container "cuda")',
    ),
    "resource-case": NearMiss(
        _pod({"nvidia.com/GPU.shared": 1}),
        "did you mean nvidia.com/gpu.shared? Resource names are case-sensitive:"
        ' nvidia.com/GPU.shared (container "cuda")',
    ),
    "resource-case-in-a-deployment": NearMiss(
        _deployment(_pod({"nvidia.com/GPU.shared": 1})),
        "did you mean nvidia.com/gpu.shared? Resource names are case-sensitive:"
        ' nvidia.com/GPU.shared (container "cuda")',
    ),
    "resource-domain-typo": NearMiss(
        _pod({"nvida.com/gpu.shared": 1}),
        "did you mean nvidia.com/gpu.shared? nvida.com/gpu.shared is no NVIDIA GPU resource"
        ' (container "cuda")',
    ),
    "profile-annotation-typo": NearMiss(
        _pod(SHARED, {"gpu-share.io/profle": "small"}),
        "did you mean gpu-share.io/profile? Annotation gpu-share.io/profle is ignored"
        ' (default profile "medium" applies)',
    ),
    "profile-annotation-case": NearMiss(
        _pod(SHARED, {"gpu-share.io/Profile": "small"}),
        "did you mean gpu-share.io/profile? Annotation gpu-share.io/Profile is ignored"
        ' (default profile "medium" applies)',
    ),
    "profile-annotation-domain": NearMiss(
        _pod(SHARED, {"gpushare.io/profile": "small"}),
        "did you mean gpu-share.io/profile? Annotation gpushare.io/profile is ignored"
        ' (default profile "medium" applies)',
    ),
    "unknown-annotation-of-ours": NearMiss(
        _pod(SHARED, {"gpu-share.io/mps-profile": "small"}),
        "did you mean gpu-share.io/profile? Annotation gpu-share.io/mps-profile is ignored"
        ' (default profile "medium" applies)',
    ),
    "unknown-annotation-of-ours-far": NearMiss(
        _pod(SHARED, {"gpu-share.io/team": "research"}),
        "the annotation a pod sets is gpu-share.io/profile. gpu-share.io/team is ignored",
    ),
    "profile-on-the-deployment": NearMiss(
        _deployment(_pod(SHARED), {"gpu-share.io/profile": "small"}),
        "move it to the pod template's annotations. gpu-share.io/profile in the Deployment's"
        " metadata is ignored",
    ),
    "profile-on-the-cronjobs-job-template": NearMiss(
        _cronjob(_pod(SHARED), {"gpu-share.io/profile": "small"}),
        "move it to the pod template's annotations. gpu-share.io/profile in"
        " spec.jobTemplate.metadata is ignored",
    ),
    "profile-as-a-label": NearMiss(
        _pod(SHARED, labels={"gpu-share.io/profile": "small"}),
        "set it as an annotation. Label gpu-share.io/profile is ignored"
        ' (default profile "medium" applies)',
    ),
    "opt-in-as-a-pod-label": NearMiss(
        _pod(SHARED, labels={"gpu-share.io/enabled": "true"}),
        "label the namespace: label gpu-share.io/enabled on a pod is ignored",
    ),
    "opt-in-as-a-pod-annotation": NearMiss(
        _pod(SHARED, {"gpu-share.io/enabled": "true"}),
        "label the namespace: annotation gpu-share.io/enabled on a pod is ignored",
    ),
    "policy-as-a-pod-annotation": NearMiss(
        _pod(SHARED, {"gpu-share.io/policy": "training"}),
        'the namespace\'s label picks the policy (here "default"). Annotation'
        " gpu-share.io/policy=training is ignored",
    ),
    "profile-typo-in-the-template": NearMiss(
        _deployment(_pod(SHARED, {"gpu-share.io/profil": "small"})),
        "did you mean gpu-share.io/profile? Annotation gpu-share.io/profil is ignored"
        ' (default profile "medium" applies)',
    ),
}

# What is no near miss: each must pass with no warning of this module.
NOT_NEAR_MISSES = {
    "exclusive-gpu": _pod({"nvidia.com/gpu": 1}),
    "mig-device": _pod({"nvidia.com/mig-1g.5gb": 1}),
    "mig-media-extensions": _pod({"nvidia.com/mig-1g.10gb+me": 1}),
    "another-vendor": _pod({"amd.com/gpu": 1}),
    "intel": _pod({"gpu.intel.com/i915": 1}),
    "profile": _pod(SHARED, {"gpu-share.io/profile": "small"}),
    "profile-on-both": _deployment(
        _pod(SHARED, {"gpu-share.io/profile": "small"}), {"gpu-share.io/profile": "small"}
    ),
    "the-webhooks-own-record": _pod(
        SHARED,
        {
            "gpu-share.io/policy": "default",
            "gpu-share.io/profile": "small",
            "gpu-share.io/mutations": "runtime-class",
        },
    ),
    "unrelated-labels": _pod(SHARED, labels={"app": "train", "team": "gpu-research"}),
    "other-annotations": _pod(
        SHARED, {"prometheus.io/scrape": "true", "sidecar.istio.io/inject": "false"}
    ),
}

# The words of this module's warnings, to tell them from the others'.
_MARKS = (
    "no NVIDIA GPU resource",
    "MIG devices are named",
    "did you mean",
    "case-sensitive",
    "is ignored",
)


def _ours(warnings: list[str]) -> list[str]:
    return [w for w in warnings if any(m in w for m in _MARKS)]


@pytest.fixture(scope="module")
def loaded() -> policies.PolicySet:
    return policies.load_directory(POLICIES)


def _core(obj: dict[str, Any], policy: policies.Policy) -> list[str]:
    group = str(obj["apiVersion"]).rpartition("/")[0]
    served = kube.as_served(obj)
    warnings: list[str] = []
    for endpoint in ("mutate", "validate"):
        d = reviewing.admit(
            served,
            policy=policy,
            endpoint=endpoint,
            group=group,
            kind=obj["kind"],
            operation="CREATE",
        )
        assert d.allowed, d.message
        warnings += d.warnings
        if endpoint == "mutate":
            served = kube.apply(served, d.patch)
    return warnings


# --------------------------------------------------------------------------- door 1: core


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_the_core_warns_of_each_near_miss(name: str, loaded: policies.PolicySet) -> None:
    case = NEAR_MISSES[name]
    assert len(case.warning) <= 120, "longer warnings are cut"
    warnings = _core(copy.deepcopy(case.obj), loaded.governing("default"))
    assert case.warning in warnings
    assert len(_ours(warnings)) == len(set(_ours(warnings))) == 1


@pytest.mark.parametrize("name", sorted(NOT_NEAR_MISSES))
def test_what_is_no_near_miss_is_not_warned_of(name: str, loaded: policies.PolicySet) -> None:
    assert _ours(_core(copy.deepcopy(NOT_NEAR_MISSES[name]), loaded.governing("default"))) == []


def test_no_published_manifest_or_example_is_taken_for_a_near_miss(
    loaded: policies.PolicySet,
) -> None:
    objects = [*corpus.objects()] + [
        doc
        for path in sorted((ROOT / "examples").rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    assert objects
    for name in loaded.names:
        policy = loaded.governing(name)
        for obj in objects:
            served = kube.as_served(obj)
            found = _ours(list(reviewing.review_object(served, policy=policy).warnings))
            assert found == [], (obj["metadata"].get("name"), found)


# --------------------------------------------------------------------------- door 2: HTTP


@pytest.fixture
def app(tmp_path: Path) -> web.Application:
    return server.create_app(h.settings(tmp_path))


async def test_the_server_sends_each_near_miss_as_a_warning(
    aiohttp_server: Any,
    aiohttp_client: Any,
    app: web.Application,
    loaded: policies.PolicySet,
) -> None:
    """Through the rendered configurations (their CEL decides what reaches the webhook) into
    the real application over TLS: the user's `kubectl apply` prints each warning."""
    client: TestClient[Any, Any] = await h.start(aiohttp_server, aiohttp_client, app)
    configurations = rendering.render(
        loaded,
        service="gpu-share-webhook",
        namespace="gpu-share-system",
        name="gpu-share-webhook",
    )
    cluster = apiserver.ApiServer(configurations, h.api_server_send(client))
    for name, case in sorted(NEAR_MISSES.items()):
        outcome = await cluster.admit(copy.deepcopy(case.obj), labels=case.labels)
        assert outcome.allowed, (name, outcome.message)
        assert outcome.calls, f"{name}: never reaches the webhook"
        assert case.warning in outcome.warnings, (name, outcome.warnings)


# --------------------------------------------------------------------------- door 3: mutate


def _policies(tmp_path: Path) -> Path:
    """The shipped policies without `driverCapabilities`: what the webhook leaves as it is
    is the subject here, and with them it sets a GPU container's capabilities."""
    directory = tmp_path / "policies"
    directory.mkdir(exist_ok=True)
    for p in POLICIES.glob("*.yaml"):
        text = p.read_text()
        (directory / p.name).write_text(text.replace("driverCapabilities: [compute, utility]", ""))
    return directory


def _mutate(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    objects: list[dict[str, Any]],
    *args: str,
) -> tuple[int, str, str]:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    code = cli.main(["mutate", "-f", str(path), "--policies", str(_policies(tmp_path)), *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_mutate_prints_each_near_miss_on_stderr(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    case = NEAR_MISSES[name]
    code, _, err = _mutate(capsys, tmp_path, [case.obj])
    kind, obj_name = case.obj["kind"], case.obj["metadata"]["name"]
    assert code == 0
    assert f"Warning: {kind}/{obj_name}: {case.warning}\n" in err


# Namespace labels: the API server matches them exactly, so the webhook never sees a namespace
# whose opt-in is misspelt; `mutate -l` (and `explain`) tell.
LABEL_NEAR_MISSES = {
    "True": (
        ["-l", "gpu-share.io/enabled=True"],
        "not reviewed: Pod/train: namespace team-a: not opted in (no label"
        ' gpu-share.io/enabled=true; only "true" opts in. Label gpu-share.io/enabled=True is'
        " ignored (label values are case-sensitive)); left unchanged",
    ),
    "yes": (
        ["-l", "gpu-share.io/enabled=yes"],
        "not reviewed: Pod/train: namespace team-a: not opted in (no label"
        ' gpu-share.io/enabled=true; only "true" opts in. Label gpu-share.io/enabled=yes is'
        " ignored); left unchanged",
    ),
    "key-typo": (
        ["-l", "gpu-share.io/enable=true"],
        "not reviewed: Pod/train: namespace team-a: not opted in (no label"
        " gpu-share.io/enabled=true; did you mean gpu-share.io/enabled? Label"
        " gpu-share.io/enable is ignored); left unchanged",
    ),
    "unknown-key-of-ours": (
        ["-l", "gpu-share.io/opt-in=true"],
        "Warning: namespace: gpu-share reads gpu-share.io/enabled and gpu-share.io/policy."
        " Label gpu-share.io/opt-in is ignored",
    ),
    "policy-key-typo": (
        ["-l", "gpushare.io/policy=gold"],
        "Warning: namespace: did you mean gpu-share.io/policy? Label gpushare.io/policy is ignored",
    ),
}


@pytest.mark.parametrize("name", sorted(LABEL_NEAR_MISSES))
def test_mutate_tells_a_namespace_label_near_miss(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args, line = LABEL_NEAR_MISSES[name]
    _, _, err = _mutate(capsys, tmp_path, [_pod(SHARED)], *args)
    assert f"{line}\n" in err, err


def test_correct_labels_are_no_near_miss() -> None:
    assert (
        namespaces.label_near_misses(
            {
                "gpu-share.io/enabled": "true",
                "gpu-share.io/policy": "gold",
                "kubernetes.io/metadata.name": "gpu-team",
                "team": "gpu-research",
            }
        )
        == []
    )
    assert namespaces.label_near_misses({"gpu-share.io/enabled": "false"}) == []


# A result with no change says why, in one line.
UNCHANGED = {
    "exclusive-gpu": (
        _pod({"nvidia.com/gpu": 1}),
        'it asks for nvidia.com/gpu, no shared GPU of policy "default" (it shares'
        " nvidia.com/gpu.shared): an exclusive GPU, which the webhook leaves as it is",
    ),
    "near-miss": (
        _pod({"nvidia.com/gpu-shared": 1}),
        "it asks for nvidia.com/gpu-shared, which looks like a misspelt GPU resource (see the"
        " warning)",
    ),
}


@pytest.mark.parametrize("name", sorted(UNCHANGED))
def test_a_result_without_change_says_why(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    obj, why = UNCHANGED[name]
    code, out, err = _mutate(capsys, tmp_path, [obj], "-o", "patch")
    assert (code, out) == (0, "[]\n")
    assert f"no change: {obj['kind']}/train: {why}\n" in err


def test_its_own_output_says_it_is_already_as_the_webhook_leaves_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = _mutate(capsys, tmp_path, [_pod(SHARED)], "-o", "json")
    assert code == 0
    assert "no change" not in err
    again = json.loads(out)
    code, out, err = _mutate(capsys, tmp_path, [again], "-o", "patch")
    assert (code, out) == (0, "[]\n")
    assert err == "no change: Pod/train: it is already as the webhook leaves it\n"


def test_a_file_without_pods_or_workloads_says_so_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "train"}}
    code, _, err = _mutate(capsys, tmp_path, [config, config], "-o", "patch")
    assert code == 0
    assert err == (
        f"no change: {tmp_path / 'in.yaml'}: no pod, and no workload kind whose pod template"
        " the webhook reviews\n"
    )
    # Next to a pod, a ConfigMap is not told of.
    code, _, err = _mutate(capsys, tmp_path, [config, _pod(SHARED)], "-o", "patch")
    assert (code, err) == (0, "")


# --------------------------------------------------------------------------- namespaces

# A namespace whose labels miss: the API server matches them exactly, so its pods never reach
# the pod entries; the namespace-labels entry tells whoever labels it.
NAMESPACE_CASES = {
    "True": (
        {"gpu-share.io/enabled": "True"},
        [
            'only "true" opts in. Label gpu-share.io/enabled=True is ignored (label values are'
            " case-sensitive)"
        ],
    ),
    "key-typo": (
        {"gpu-share.io/enable": "true"},
        ["did you mean gpu-share.io/enabled? Label gpu-share.io/enable is ignored"],
    ),
    "no-such-policy": (
        {"gpu-share.io/enabled": "true", "gpu-share.io/policy": "gold"},
        ['no policy is named "gold": GPU pods of this namespace are refused'],
    ),
    # Not opted in: its pods are never reviewed, whatever the policy label says.
    "no-such-policy-not-opted-in": (
        {"gpu-share.io/enabled": "false", "gpu-share.io/policy": "gold"},
        [],
    ),
    "right": ({"gpu-share.io/enabled": "true", "gpu-share.io/policy": "not-renamed"}, []),
}
# Namespaces whose writes never reach the webhook at all.
NOT_SENT = {
    "opted-in": {"gpu-share.io/enabled": "true"},
    "unrelated": {"team": "research", "env": "prod"},
    "none": {},
}


def _namespace(labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "team-a", "labels": {**labels, namespaces.NAME_LABEL: "team-a"}}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


async def test_the_server_warns_of_near_misses_when_a_namespace_is_labelled(
    aiohttp_server: Any,
    aiohttp_client: Any,
    app: web.Application,
    loaded: policies.PolicySet,
) -> None:
    client: TestClient[Any, Any] = await h.start(aiohttp_server, aiohttp_client, app)
    configurations = rendering.render(
        loaded,
        service="gpu-share-webhook",
        namespace="gpu-share-system",
        name="gpu-share-webhook",
        failure_policy="Fail",
    )
    entry = next(
        e for c in configurations for e in c["webhooks"] if e["name"] == rendering.NAMESPACE_ENTRY
    )
    assert entry["failurePolicy"] == "Ignore", "no namespace write may wait on a warning"
    cluster = apiserver.ApiServer(configurations, h.api_server_send(client))
    for name, (labels, expected) in sorted(NAMESPACE_CASES.items()):
        obj = _namespace(labels)
        for operation in ("CREATE", "UPDATE"):
            old = _namespace({}) if operation == "UPDATE" else None
            outcome = await cluster.admit(
                copy.deepcopy(obj),
                labels=obj["metadata"]["labels"],
                operation=operation,
                old=old,
            )
            assert outcome.allowed, (name, outcome.message)
            assert outcome.entries == [
                ("ValidatingWebhookConfiguration", rendering.NAMESPACE_ENTRY)
            ]
            assert outcome.warnings == expected, (name, operation)
    for name, labels in sorted(NOT_SENT.items()):
        obj = _namespace(labels)
        outcome = await cluster.admit(copy.deepcopy(obj), labels=obj["metadata"]["labels"])
        assert outcome.allowed
        assert outcome.calls == [], name


def test_the_webhooks_record_keeps_only_rule_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A user's own `gpu-share.io/mutations` is not merged into what the webhook says it did."""
    pod = _pod(SHARED, {"gpu-share.io/mutations": "none,runtime-class,my-own-words"})
    code, out, _ = _mutate(capsys, tmp_path, [pod], "-o", "json")
    assert code == 0
    recorded = json.loads(out)["metadata"]["annotations"]["gpu-share.io/mutations"]
    assert recorded == "mps-limits,node-selection,runtime-class,tolerations"


def _audit(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    objects: list[dict[str, Any]],
    *args: str,
) -> tuple[int, str, str]:
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    code = cli.main(["audit", "-f", str(path), "--policies", str(_policies(tmp_path)), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_audit_lists_near_misses_whatever_show_says(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    namespace = _namespace({"gpu-share.io/enabled": "true", "gpu-share.io/polcy": "gold"})
    typo = _pod({"nvidia.com/gpu-shared": 1})
    typo["metadata"]["name"] = "typo"
    exclusive = _pod({"nvidia.com/gpu": 1})
    exclusive["metadata"]["name"] = "exclusive"
    code, out, _ = _audit(capsys, tmp_path, [namespace, typo, exclusive])
    assert code == 0
    assert (
        'namespace team-a: policy "default" (no gpu-share.io/policy label; did you mean'
        " gpu-share.io/policy? Label gpu-share.io/polcy is ignored)"
    ) in out
    # The untouched pod with a near miss is listed by default; the other only with --show all.
    assert (
        "    Pod/typo: it asks for nvidia.com/gpu-shared, which looks like a misspelt GPU"
        " resource (see the warning)\n"
        "      ! did you mean nvidia.com/gpu.shared? nvidia.com/gpu-shared is no NVIDIA GPU"
        ' resource (container "cuda")\n'
    ) in out
    assert "Pod/exclusive" not in out
    assert "Warnings: 1 object (listed above with !)" in out
    code, out, _ = _audit(capsys, tmp_path, [namespace, typo, exclusive], "--show", "all")
    assert (
        '    Pod/exclusive: it asks for nvidia.com/gpu, no shared GPU of policy "default"'
    ) in out
    code, out, _ = _audit(capsys, tmp_path, [namespace, typo, exclusive], "-o", "json")
    listed = [o["name"] for ns in json.loads(out)["namespaces"] for o in ns["objects"]]
    assert listed == ["typo"]


def test_explain_tells_an_empty_policy_label_from_none(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["explain", "namespace", "team-a", "--policies", str(POLICIES), "-l", OPT_IN]
    assert cli.main([*args, "-l", "gpu-share.io/policy="]) == 0
    assert "its label gpu-share.io/policy is empty, which means the default policy" in (
        capsys.readouterr().out
    )
    assert cli.main(args) == 0
    assert "no gpu-share.io/policy label, so the default policy" in capsys.readouterr().out


OPT_IN = "gpu-share.io/enabled=true"


# --------------------------------------------------------------------------- bounded

# Objects built to make the checks expensive: each costs a pass over its names and a bounded
# number of fuzzy matches, and gives a bounded number of warnings (before the budget, the
# second took a minute and sent 50,000 warnings). bench/near_misses.py times them.
HOSTILE = {
    "annotations": _pod(SHARED, {f"gpu-share.io/p{i}": "v" for i in range(5_000)}),
    "long-annotations": _pod(SHARED, {f"gpu-share.io/{'x' * 280}{i}": "v" for i in range(500)}),
    "labels": _pod(SHARED, labels={f"gpushare/p{i}": "v" for i in range(5_000)}),
    "resources": _pod({f"nvidia.com/gpux{i}": 1 for i in range(2_000)}),
    "resources-case": _pod({f"NVIDIA.com/gpu{i}": 1 for i in range(2_000)}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_near_misses_cost_a_bounded_number_of_matches_and_warnings(
    name: str, loaded: policies.PolicySet, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = difflib.get_close_matches

    def counted(*args: Any, **kwargs: Any) -> list[str]:
        calls.append(args[0])
        return real(*args, **kwargs)

    # A spy, not a stand-in: every match is the real one, counted.
    monkeypatch.setattr(difflib, "get_close_matches", counted)
    decision = reviewing.review_object(HOSTILE[name], policy=loaded.governing("default"))
    assert len(calls) <= hints.LOOKS
    ours = _ours(decision.warnings)
    assert len(ours) + decision.warnings.count(hints.MORE) <= hints.LINES + 1


def test_a_namespace_with_many_labels_costs_a_bounded_number_of_matches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    real = difflib.get_close_matches

    def counted(*args: Any, **kwargs: Any) -> list[str]:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(difflib, "get_close_matches", counted)
    labels = {f"gpushare.io/l{i}": "v" for i in range(5_000)}
    assert namespaces.label_near_misses(labels) == []  # no near misses, at a bounded cost
    assert len(calls) <= hints.LOOKS
    labels = {f"gpu-share.io/l{i}": "v" for i in range(5_000)}
    assert len(namespaces.label_near_misses(labels)) == hints.LINES + 1


# What the webhook echoes of an object (a key in a warning, a name in a refusal) cannot start
# a line or rewrite one where it is printed: kubectl's terminal, an audit log.
UNPRINTABLE = {
    "newline": "gpu-share.io/profle\nWarning: all pods approved",
    "terminal-escape": "gpu-share.io/profle\x1b[2K\x1b[1A",
    "bidi-override": "gpu-share.io/\u202eelifrp",
    "zero-width": "gpu-share.io/pro\u200bfile",
}


@pytest.mark.parametrize("name", sorted(UNPRINTABLE))
def test_what_is_echoed_is_printable(name: str, loaded: policies.PolicySet) -> None:
    key = UNPRINTABLE[name]
    decision = reviewing.review_object(
        _pod(SHARED, {key: "small"}), policy=loaded.governing("default"))
    assert decision.warnings
    for warning in decision.warnings:
        assert warning.isprintable(), warning
    assert any(
        f"\\u{ord(c):04x}" in w for w in decision.warnings for c in key if not c.isprintable()
    )
    refused = _pod({"nvidia.com/gpu.shared": 2})
    unprintable = "".join(c for c in key if not c.isprintable())
    refused["spec"]["containers"][0]["name"] = f"cuda{unprintable}"
    decision = reviewing.review_object(refused, policy=loaded.governing("default"))
    assert not decision.allowed
    assert decision.message.isprintable()
    assert f"cuda\\u{ord(unprintable[0]):04x}" in decision.message


# --------------------------------------------------------------------------- advice that holds
# (found by attacking the change: each warning must not point anyone at a harmful action)

NAMESPACE_ADVICE = {
    # An opt-out word is no misspelling of the opt-in: telling an admin "did you mean
    # gpu-share.io/enabled?" would have them opt the namespace in.
    "opt-out": (
        {"gpu-share.io/disabled": "true"},
        "a namespace without gpu-share.io/enabled=true is left alone. Label"
        " gpu-share.io/disabled is ignored",
    ),
    "exempt": (
        {"gpu-share.io/exempt": "true"},
        "a namespace without gpu-share.io/enabled=true is left alone. Label"
        " gpu-share.io/exempt is ignored",
    ),
    "unknown": (
        {"gpu-share.io/team": "research"},
        "gpu-share reads gpu-share.io/enabled and gpu-share.io/policy. Label"
        " gpu-share.io/team is ignored",
    ),
    # A pod annotation on a namespace is not taken for the policy label (whose value would
    # then name no policy, and refuse every GPU pod).
    "profile-on-a-namespace": (
        {"gpu-share.io/profile": "small"},
        "gpu-share.io/profile is a pod annotation. Label gpu-share.io/profile on a namespace"
        " is ignored",
    ),
}


@pytest.mark.parametrize("name", sorted(NAMESPACE_ADVICE))
def test_namespace_advice_never_points_at_the_opt_in_by_guess(name: str) -> None:
    labels, line = NAMESPACE_ADVICE[name]
    assert namespaces.label_near_misses(labels) == [line]
    assert namespaces.meant_label(next(iter(labels))) != namespaces.ENABLED_LABEL


def test_mutate_takes_an_opt_out_word_for_no_misspelt_opt_in(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = _mutate(capsys, tmp_path, [_pod(SHARED)], "-l", "gpu-share.io/exempt=true")
    assert code == 0
    assert "not reviewed" not in err
    assert "nvidia.com/gpu.sharing-strategy" in out


def test_a_policy_that_does_not_load_is_not_called_missing_and_no_policy_is_named(
    tmp_path: Path,
) -> None:
    shutil.copytree(POLICIES, tmp_path / "policies")
    (tmp_path / "policies" / "gold.yaml").write_text(
        "apiVersion: gpu-share.io/v1alpha1\nkind: SharingPolicy\nmetadata: {name: gold}\n"
        "spec: {nodeClasses: []}\n"
    )
    loaded, problems = policies.assemble(
        policies.FileLoad.of(path.read_text(), str(path))
        for path in policies.policy_files(tmp_path / "policies")
    )
    assert problems
    assert "gold" in loaded.broken
    labels = {"gpu-share.io/enabled": "true", "gpu-share.io/policy": "gold"}
    assert namespaces.label_warnings(labels, loaded) == [
        'policy "gold" is not in force (its file does not load): GPU pods of this namespace'
        " are refused until the admin fixes it"
    ]
    labels["gpu-share.io/policy"] = "silver"
    (missing,) = namespaces.label_warnings(labels, loaded)
    assert missing == 'no policy is named "silver": GPU pods of this namespace are refused'
    assert "not-renamed" not in missing


def test_a_policy_like_pod_annotation_is_sent_to_the_namespace_label(
    loaded: policies.PolicySet,
) -> None:
    decision = reviewing.review_object(
        _pod(SHARED, {"gpu-share.io/polciy": "gold"}), policy=loaded.governing("default")
    )
    assert decision.warnings == [
        "the namespace's label gpu-share.io/policy picks the policy. Annotation"
        " gpu-share.io/polciy is ignored"
    ]


@pytest.mark.parametrize("limits", [{"nvidia.com/gpu": 1}, {}], ids=["exclusive-gpu", "no-gpu"])
def test_no_default_profile_is_claimed_where_none_applies(
    limits: dict[str, Any], loaded: policies.PolicySet
) -> None:
    decision = reviewing.review_object(
        _pod(limits, {"gpu-share.io/profle": "small"}), policy=loaded.governing("default")
    )
    assert decision.warnings == [
        "did you mean gpu-share.io/profile? Annotation gpu-share.io/profle is ignored"
    ]


def test_the_advice_survives_the_cut_of_a_long_warning(loaded: policies.PolicySet) -> None:
    pod = _pod({"nvidia.com/gpu-shared": 1})
    pod["spec"]["containers"][0]["name"] = (
        "a-container-with-a-name-of-sixty-characters-for-the-test-xx"
    )
    (warning,) = _ours(reviewing.review_object(pod, policy=loaded.governing("default")).warnings)
    assert warning.startswith("did you mean nvidia.com/gpu.shared? nvidia.com/gpu-shared")
    assert len(warning) <= 120


def test_warnings_are_capped_with_a_count(loaded: policies.PolicySet) -> None:
    pod = _pod(SHARED)
    template = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [
        {**template, "name": f"c{i}", "envFrom": [{"configMapRef": {"name": "settings"}}]}
        for i in range(100)
    ]
    warnings = reviewing.review_object(pod, policy=loaded.governing("default")).warnings
    # At most 30, and 2,000 characters in all (the API server keeps 4,096 of a request's).
    kept = warnings[:-1]
    assert 20 <= len(kept) <= 30
    assert sum(map(len, warnings)) <= 2000
    assert warnings[-1] == f"and {100 - len(kept)} more warnings like these"


def test_a_workloads_audit_annotation_names_what_every_template_adds(
    loaded: policies.PolicySet,
) -> None:
    job = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": role,
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [
                                        {
                                            "name": role,
                                            "image": route_cases.CUDA,
                                            "envFrom": [{"configMapRef": {"name": "s"}}],
                                            "resources": {"limits": SHARED},
                                        }
                                    ],
                                }
                            }
                        }
                    },
                }
                for role in ("trainer", "evaluator", "logger")
            ]
        },
    }
    found = workload_kinds.kinds_by_name(workload_kinds.all_kinds())
    decision = reviewing.review_object(
        job, policy=loaded.governing("default"), mutate=False, kinds=found)
    assert decision.audit["env-from"] == "trainer,evaluator,logger"


def test_the_commands_print_what_they_echo_printable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A dump holds what tenants wrote: an admin's terminal must not take it for escapes."""
    escape = "\x1b]0;owned\x07\x1b[2J"
    pod = _pod({"nvidia.com/gpu.shared": 2}, {f"gpu-share.io/profle{escape}": f"small{escape}"})
    pod["metadata"]["name"] = "train"
    namespace = _namespace({"gpu-share.io/enabled": "true"})
    for out, err in (
        _mutate(capsys, tmp_path, [pod])[1:],
        _audit(capsys, tmp_path, [namespace, pod], "--show", "all")[1:],
    ):
        assert "\x1b" not in out + err
        assert "\\u001b" in out + err
