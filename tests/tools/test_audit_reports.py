"""`audit -o policyreport` and `-o openreports`: the audit of a dump as policy reports, one
per opted-in namespace and one for the cluster, one result per object and rule."""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.support import report_schemas
from tests.support.audit_dump import (
    BATCH,
    INFERENCE,
    JOBSET_ONLY,
    OPTED_IN,
    REPO,
    ROLLOUT_POLICY,
    Cluster,
    admitted,
    cluster,
    container,
    spec,
)
from webhook import cli
from webhook.policy import kinds, names, policies
from webhook.tools import auditing, reporting

NOW = 1_790_000_000


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reports")
    c = cluster()
    (root / "namespaces.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": c.namespaces})
    )
    (root / "cluster.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": c.objects})
    )
    policy_dir = root / "policies"
    policy_dir.mkdir()
    for name in ("default.yaml", "not-renamed.yaml"):
        (policy_dir / name).write_text((REPO / "policies" / name).read_text())
    (policy_dir / "rollout.yaml").write_text(ROLLOUT_POLICY)
    (root / "jobset.yaml").write_text(JOBSET_ONLY)
    return {"root": root, "policies": policy_dir, "jobset": root / "jobset.yaml",
            "namespaces": root / "namespaces.yaml", "cluster": root / "cluster.json"}


def run(capsys: pytest.CaptureFixture[str], dump: dict[str, Path],
        output: str = "policyreport") -> tuple[int, list[dict[str, Any]]]:
    code = cli.main([
        "audit", "-f", str(dump["namespaces"]), "-f", str(dump["cluster"]),
        "--policies", str(dump["policies"]), "--workload-kinds", str(dump["jobset"]),
        "-o", output,
    ])
    out, _err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["apiVersion"] == "v1"
    assert doc["kind"] == "List"
    return code, doc["items"]


def report_of(items: list[dict[str, Any]], namespace: str | None) -> dict[str, Any]:
    found = [r for r in items if r["metadata"].get("namespace") == namespace]
    assert len(found) == 1, [r["metadata"] for r in items]
    return found[0]


def results_for(report: dict[str, Any], kind: str, name: str) -> list[dict[str, Any]]:
    return [r for r in report["results"]
            if (r["resources"][0]["kind"], r["resources"][0]["name"]) == (kind, name)]


def by_rule(results: list[dict[str, Any]]) -> dict[str | None, dict[str, Any]]:
    out = {r.get("rule"): r for r in results}
    assert len(out) == len(results), "one result per object and rule"
    return out


# --------------------------------------------------------------------------- the reports


def test_one_report_per_opted_in_namespace_and_one_for_the_cluster(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    code, items = run(capsys, dump)
    assert code == 1  # something would be refused, as with -o text
    namespaced = sorted(r["metadata"]["namespace"] for r in items if r["kind"] == "PolicyReport")
    # batch and empty have not opted in; kube-system and the webhook's own are never
    # reviewed; ghost has no Namespace object.
    assert namespaced == ["legacy", "rollout", "team-a", "typo"]
    clusters = [r for r in items if r["kind"] == "ClusterPolicyReport"]
    assert [r["metadata"]["name"] for r in clusters] == [reporting.REPORT_NAME]
    for r in items:
        assert r["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
        assert r["metadata"]["name"] == reporting.REPORT_NAME
        assert r["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpu-share-webhook"}
        assert "source" not in r  # v1alpha2 has no report-level source
        if r["kind"] == "PolicyReport":
            ns = r["metadata"]["namespace"]
            assert r["scope"] == {"apiVersion": "v1", "kind": "Namespace", "name": ns}


@pytest.mark.parametrize("output", list(reporting.APIS))
def test_every_report_is_valid_against_every_copy_of_its_crd(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path], output: str
) -> None:
    """Kyverno's and wg-policy-prototypes' wgpolicyk8s.io CRDs, openreports' install.yaml:
    what the API server would refuse or prune, nothing."""
    _, items = run(capsys, dump, output)
    assert items
    for r in items:
        assert report_schemas.validate(r) == [], r["metadata"]


def test_the_large_and_the_claims_reports_are_valid_too(tmp_path: Path) -> None:
    c = Cluster()
    c.namespace("big", OPTED_IN)
    for i in range(1500):
        c.pod(f"job-{i:05d}-{'x' * 200}", "big", BATCH)
    for r in build(c, tmp_path, None):
        assert report_schemas.validate(r) == []


def test_every_result_names_one_object_and_the_summary_counts_them(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    _, items = run(capsys, dump)
    for r in items:
        counts = Counter(x["result"] for x in r["results"])
        assert r["summary"] == {k: counts.get(k, 0) for k in reporting.RESULTS}
        for x in r["results"]:
            assert x["source"] == "gpu-share-webhook"
            assert x["policy"]
            assert x["result"] in reporting.RESULTS
            assert x.get("severity", "high") in ("high", "medium", "low")
            assert x["timestamp"]["nanos"] == 0
            assert isinstance(x["timestamp"]["seconds"], int)
            assert x["scored"] is True
            assert len(x["resources"]) == 1
            ref = x["resources"][0]
            if r["kind"] == "PolicyReport":
                assert ref["namespace"] == r["metadata"]["namespace"]
                assert ref["uid"].startswith("uid-")
            assert all(isinstance(v, str) for v in x["properties"].values())


def test_every_object_of_an_opted_in_namespace_has_results(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    _, items = run(capsys, dump)
    c = cluster()
    wanted = {
        (o["metadata"]["namespace"], o["kind"], o["metadata"]["name"])
        for o in c.objects
        if o["metadata"]["namespace"] in ("team-a", "legacy", "rollout", "typo")
        and o["kind"] != "Service"
    }
    got = {
        (x["resources"][0]["namespace"], x["resources"][0]["kind"], x["resources"][0]["name"])
        for r in items if r["kind"] == "PolicyReport" for x in r["results"]
    }
    assert got == wanted


def test_a_refusal_is_a_fail_with_its_rule_severity_and_message(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    _, items = run(capsys, dump)
    team_a = report_of(items, "team-a")
    notebook = by_rule(results_for(team_a, "Pod", "notebook"))
    assert set(notebook) == {"privileged"}
    found = notebook["privileged"]
    assert found["result"] == "fail"
    assert found["severity"] == "high"
    assert found["category"] == "GPU isolation"
    assert found["policy"] == "default"
    assert 'container "shell"' in found["message"]
    assert found["properties"] == {"verdict": "refused", "mode": "enforce",
                                   "containers": "shell"}
    # The trainer asks for two replicas of a shared GPU: the pods and what makes them.
    for kind, name in (("Deployment", "trainer"), ("Pod", "trainer-5d4f8b-00000")):
        found = by_rule(results_for(team_a, kind, name))["multi-replica"]
        assert found["result"] == "fail"
        assert found["severity"] == "medium"
    pod = by_rule(results_for(team_a, "Pod", "trainer-5d4f8b-00001"))["multi-replica"]
    assert pod["properties"]["owner"] == "Deployment/trainer"


def test_a_rule_in_warn_or_dry_run_mode_today_is_a_warn(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    _, items = run(capsys, dump)
    rollout = report_of(items, "rollout")
    debug = by_rule(results_for(rollout, "Pod", "debug"))["privileged"]
    assert debug["result"] == "warn"
    assert debug["properties"]["mode"] == "warn"
    assert "is in warn mode today: admitted now, refused once enforced" in debug["message"]
    leaky = by_rule(results_for(rollout, "Pod", "leaky"))["device-variables"]
    assert leaky["result"] == "warn"
    assert leaky["properties"]["mode"] == "dry-run"
    assert leaky["severity"] == "high"


def test_a_pod_created_without_what_the_webhook_adds_is_a_warn_per_rule(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    _, items = run(capsys, dump)
    team_a = report_of(items, "team-a")
    pod = by_rule(results_for(team_a, "Pod", "inference-5d4f8b-00000"))
    assert set(pod) >= {"runtime-class", "tolerations", "node-selection", "mps-limits",
                        "visible-devices"}
    assert all(r["result"] == "warn" for r in pod.values())
    # Each says what its own rule adds, and what to do.
    assert "(runtimeClassName: nvidia)" in pod["runtime-class"]["message"]
    assert 'NVIDIA_VISIBLE_DEVICES=void' in pod["visible-devices"]["message"]
    assert "NVIDIA_VISIBLE_DEVICES" not in pod["runtime-class"]["message"]
    assert pod["visible-devices"]["severity"] == "high"
    assert pod["tolerations"]["severity"] == "medium"
    assert 'delete it, and Deployment "inference" makes it again' in pod["tolerations"]["message"]
    # The Deployment's new pods get it: a pass with what is added.
    deployment = by_rule(results_for(team_a, "Deployment", "inference"))
    assert deployment["runtime-class"]["result"] == "pass"
    assert deployment["runtime-class"]["message"] == (
        "the webhook adds to what this makes: runtimeClassName: nvidia"
    )
    # A pod the webhook admitted: one pass, no rule.
    admitted = results_for(team_a, "Pod", "inference-5d4f8b-admitted")
    assert [(r["result"], r.get("rule")) for r in admitted] == [("pass", None)]
    assert admitted[0]["message"].startswith("admitted as it is")


def test_a_workload_whose_rule_is_in_dry_run_makes_pods_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = Cluster()
    c.namespace("rollout", {**OPTED_IN, names.POLICY_LABEL: "rollout"})
    c.deployment("serve", "rollout", INFERENCE, replicas=1)
    items = build(c, tmp_path, ROLLOUT_POLICY)
    deployment = by_rule(results_for(report_of(items, "rollout"), "Deployment", "serve"))
    assert deployment["tolerations"]["result"] == "warn"
    assert deployment["tolerations"]["message"].startswith(
        "rule tolerations is in dry-run mode today: what this makes is created without"
        " tolerations: nvidia.com/gpu Exists NoSchedule"
    )


def test_the_cluster_report_has_one_result_per_opted_in_namespace(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    _, items = run(capsys, dump)
    top = report_of(items, None)
    got = {x["resources"][0]["name"]: x for x in top["results"]}
    assert set(got) == {"team-a", "legacy", "rollout", "typo", names.SYSTEM_NAMESPACE,
                        names.DEFAULT_NAMESPACE}
    assert got["team-a"]["result"] == "pass"
    assert got["typo"]["result"] == "fail"
    assert got["typo"]["rule"] == "unknown-policy"
    assert got["typo"]["policy"] == "larg"
    assert 'no policy is named "larg"' in got["typo"]["message"]
    for ns in (names.SYSTEM_NAMESPACE, names.DEFAULT_NAMESPACE):
        assert got[ns]["result"] == "skip"
    for x in top["results"]:
        assert x["resources"][0]["kind"] == "Namespace"
        assert "namespace" not in x["resources"][0]


def test_host_access_left_to_nothing_is_a_warn_on_the_namespace(tmp_path: Path) -> None:
    c = Cluster()
    c.namespace("open", {**OPTED_IN, names.POLICY_LABEL: "open"})
    c.pod("p", "open", spec(container("c", 1)))
    policy = ROLLOUT_POLICY.replace("name: rollout", "name: open").replace(
        "  mode: dry-run\n  ruleModes: {privileged: warn}\n", "  rules: {denyHostAccess: false}\n"
    )
    items = build(c, tmp_path, policy)
    found = report_of(items, None)["results"][0]
    assert (found["result"], found["rule"]) == ("warn", "host-access")
    assert "enforce Pod Security baseline or switch host-access on" in found["message"]


def test_a_namespace_the_install_leaves_out_gets_no_report_and_is_a_skip(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    code = cli.main([
        "audit", "-f", str(dump["namespaces"]), "-f", str(dump["cluster"]),
        "--policies", str(dump["policies"]), "--workload-kinds", str(dump["jobset"]),
        "-o", "policyreport", "--exclude-namespace", "team-a",
        "--exclude-namespace", "legacy",
    ])
    items = json.loads(capsys.readouterr().out)["items"]
    assert code == 1
    namespaced = sorted(r["metadata"]["namespace"] for r in items if r["kind"] == "PolicyReport")
    assert namespaced == ["rollout", "typo"]
    top = {x["resources"][0]["name"]: x for x in report_of(items, None)["results"]}
    assert top["team-a"]["result"] == "skip"
    assert "left out by the install: --exclude-namespace" in top["team-a"]["message"]


def test_openreports_are_the_same_results_under_another_api(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    _, wg = run(capsys, dump)
    _, ours = run(capsys, dump, "openreports")
    assert [r["kind"] for r in ours] == [
        "Report" if r["kind"] == "PolicyReport" else "ClusterReport" for r in wg
    ]
    for a, b in zip(wg, ours, strict=True):
        assert b["apiVersion"] == "openreports.io/v1alpha1"
        assert b["source"] == "gpu-share-webhook"
        strip = [{k: v for k, v in x.items() if k != "timestamp"} for x in a["results"]]
        assert strip == [{k: v for k, v in x.items() if k != "timestamp"} for x in b["results"]]


@pytest.mark.parametrize(("name", "ours"), [
    ("gpu-share-webhook", True), ("gpu-share-webhook-2", True), ("gpu-share-webhook-17", True),
    ("gpu-share-webhook-1", False), ("gpu-share-webhook-0", False),
    ("gpu-share-webhook-02", False), ("gpu-share-webhook-x", False), ("kyverno-abc", False),
    ("gpu-share-webhook2", False),
])
def test_the_names_this_tool_gives_its_reports(name: str, ours: bool) -> None:
    assert reporting.is_report_name(name) is ours


# --------------------------------------------------------------------------- claims


def test_the_claims_of_one_entry_each_carry_their_own_name(tmp_path: Path) -> None:
    c = Cluster()
    c.namespace("team-a", {**OPTED_IN, names.POLICY_LABEL: "dra"})
    for name in ("job-gpu-a1", "job-gpu-b2"):
        c.add(f"{names.DRA_GROUP}/v1", names.CLAIM_KIND, name, "team-a", {"spec": {"devices": {
            "requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}]}}})
    items = build(c, tmp_path, None)
    report = report_of(items, "team-a")
    for name in ("job-gpu-a1", "job-gpu-b2"):
        found = by_rule(results_for(report, names.CLAIM_KIND, name))["dra-all-devices"]
        assert found["result"] == "fail"
        assert found["message"].startswith(f'claim "{name}"'), found["message"]


# --------------------------------------------------------------------------- size, time


def test_a_namespace_too_large_for_one_report_gets_more_never_splitting_an_object(
    tmp_path: Path,
) -> None:
    c = Cluster()
    c.namespace("big", OPTED_IN)
    for i in range(4000):
        c.pod(f"job-{i:05d}-{'x' * 40}", "big", BATCH)
    items = build(c, tmp_path, None)
    big = [r for r in items if r["metadata"].get("namespace") == "big"]
    assert [r["metadata"]["name"] for r in big] == [
        "gpu-share-webhook", *(f"gpu-share-webhook-{i}" for i in range(2, len(big) + 1))
    ]
    assert len(big) >= 3
    seen: dict[str, str] = {}
    for r in big:
        assert len(orjson.dumps(r["results"])) <= reporting.REPORT_BYTES
        for x in r["results"]:
            owner = seen.setdefault(x["resources"][0]["uid"], r["metadata"]["name"])
            assert owner == r["metadata"]["name"], "an object's results in two reports"
    # runtime-class, tolerations, node-selection, mps-limits and driver-capabilities, each pod.
    assert sum(len(r["results"]) for r in big) == 4000 * 5


def test_unchanged_results_keep_their_timestamp_and_new_ones_get_now() -> None:
    c = cluster()
    loaded = load_policies(None)
    report = auditing.audit([*c.namespaces, *c.objects], policies=loaded,
                            kinds=kinds.BUILTIN_KINDS)
    first = reporting.build(report, reporting.POLICY_REPORT, now=NOW)
    again = reporting.build(report, reporting.POLICY_REPORT, now=NOW + 3600, previous=first)
    assert again == first
    # One pod changes: only its results are new.
    changed = [o for o in c.objects if o["metadata"]["name"] != "notebook"]
    changed.append(c.pod("notebook", "team-a", spec(container("shell", 1))))
    report = auditing.audit([*c.namespaces, *changed], policies=loaded, kinds=kinds.BUILTIN_KINDS)
    later = reporting.build(report, reporting.POLICY_REPORT, now=NOW + 7200, previous=first)
    stamps = {
        (x["resources"][0]["name"], x.get("rule")): x["timestamp"]["seconds"]
        for r in later for x in r["results"]
    }
    assert {k for k, v in stamps.items() if v == NOW + 7200} == {
        ("notebook", r) for r in ("runtime-class", "tolerations", "node-selection",
                                  "mps-limits", "driver-capabilities")
    }


# --------------------------------------------------------------------------- helpers


def load_policies(extra: str | None, name: str = "extra") -> policies.PolicySet:
    directory = Path(REPO / "policies")
    texts = {p.name: p.read_text() for p in directory.glob("*.yaml")}
    if extra is not None:
        texts[f"{name}.yaml"] = extra
    with tempfile.TemporaryDirectory() as tmp:
        for file, text in texts.items():
            (Path(tmp) / file).write_text(text)
        return policies.load_directory(Path(tmp))


def build(c: Cluster, tmp_path: Path, policy: str | None, *,
          name: str = "extra") -> list[dict[str, Any]]:
    loaded = load_policies(policy, name)
    report = auditing.audit([*c.namespaces, *c.objects], policies=loaded,
                            kinds=kinds.BUILTIN_KINDS)
    assert not report.malformed
    return reporting.build(report, reporting.POLICY_REPORT, now=NOW)


# --------------------------------------------------------------------------- what each says


def test_bare_pods_of_one_verdict_share_no_owner(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    """render and render-2 in legacy are one entry; neither made the other."""
    _, items = run(capsys, dump)
    legacy = report_of(items, "legacy")
    for name in ("render", "render-2"):
        for r in results_for(legacy, "Pod", name):
            assert "owner" not in r["properties"]
            if r["result"] == "warn":
                assert r["message"].endswith("; make it again to get it"), r["message"]


def test_a_live_pod_whose_rule_is_in_dry_run_is_not_told_to_make_it_again(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    _, items = run(capsys, dump)
    batch = by_rule(results_for(report_of(items, "rollout"), "Pod", "batch"))
    found = batch["runtime-class"]
    assert found["result"] == "warn"
    assert found["message"] == (
        "rule runtime-class is in dry-run mode today: it was created without runtimeClassName:"
        " nvidia"
    )


def test_a_change_of_the_record_annotations_alone_is_rule_annotations(tmp_path: Path) -> None:
    shipped = policies.load_directory(REPO / "policies")
    default = shipped.get("default")
    assert default is not None
    c = Cluster()
    c.namespace("team-a", OPTED_IN)
    kept = admitted(INFERENCE, default)
    del kept["annotations"][names.ANNOTATION_POLICY]
    c.pod("served", "team-a", **kept)
    (found,) = results_for(report_of(build(c, tmp_path, None), "team-a"), "Pod", "served")
    assert (found["result"], found["rule"], found["severity"]) == ("warn", "annotations", "low")
    assert "gpu-share.io/policy=default" in found["message"]


def test_text_from_a_tenant_is_printable_and_within_the_bmp(tmp_path: Path) -> None:
    c = Cluster()
    c.namespace("team-a", OPTED_IN)
    c.pod("p", "team-a", spec(container("c", 1)),
          annotations={names.ANNOTATION_PROFILE: "l\U0001f680rge\x1b[31m\u202e"})
    (found,) = [r for r in results_for(report_of(build(c, tmp_path, None), "team-a"), "Pod", "p")
                if r.get("rule") == "profile"]
    message = found["message"]
    assert "\\U0001f680" in message
    assert "\\u001b" in message
    assert "\\u202e" in message
    assert message.isprintable()
    assert all(ord(ch) <= 0xFFFF for ch in message)


def test_previous_reports_of_any_shape_are_read_without_failing() -> None:
    """The reports in the cluster are whatever whoever may write them wrote."""
    c = cluster()
    report = auditing.audit([*c.namespaces, *c.objects], policies=load_policies(None),
                            kinds=kinds.BUILTIN_KINDS)
    odd = [
        {"results": "no"},
        {"results": [1, None, {"timestamp": "x"}, {"timestamp": {"seconds": "1", "nanos": 0}}]},
        {"results": [{"resources": [{"uid": {"a": 1}}], "message": ["x"], "rule": {},
                      "timestamp": {"seconds": 5, "nanos": 0}}]},
        {"results": [{"resources": "x", "policy": 3, "timestamp": {"seconds": 5, "nanos": 0}}]},
    ]
    assert reporting.build(report, reporting.POLICY_REPORT, now=NOW, previous=odd) == (
        reporting.build(report, reporting.POLICY_REPORT, now=NOW))


def test_a_timestamp_no_run_could_have_written_is_not_kept() -> None:
    """Whoever may write reports could date a finding in 2100, or before 1970."""
    c = cluster()
    report = auditing.audit([*c.namespaces, *c.objects], policies=load_policies(None),
                            kinds=kinds.BUILTIN_KINDS)
    first = reporting.build(report, reporting.POLICY_REPORT, now=NOW)
    forged = json.loads(json.dumps(first))
    for r in forged:
        for i, x in enumerate(r["results"]):
            x["timestamp"]["seconds"] = (4_102_444_800, -62_135_596_800, 0)[i % 3]
    again = reporting.build(report, reporting.POLICY_REPORT, now=NOW + 60, previous=forged)
    assert {x["timestamp"]["seconds"] for r in again for x in r["results"]} == {NOW + 60}
