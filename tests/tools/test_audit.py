"""`gpu-share-webhook audit`: a generated cluster dump (namespaces, workloads and what their
controllers made of them) judged per namespace as the rendered webhook configurations would
route it; each verdict, the modes of a policy being rolled out, the JSON report, the exit
codes and one clear line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.audit_dump import (
    INFERENCE,
    JOBSET_ONLY,
    NO_KINDS,
    OPTED_IN,
    PRIVILEGED,
    REPO,
    ROLLOUT_POLICY,
    SHARED,
    Cluster,
    cluster,
    container,
    spec,
)
from webhook import cli
from webhook.engine import namespaces
from webhook.policy import kinds, names, policies
from webhook.tools import auditing, rendering


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The dump as kubectl writes it: the Namespaces in one file (YAML here), the rest in a
    JSON List; the policies (the shipped ones and the rollout one); the kinds files."""
    root = tmp_path_factory.mktemp("audit")
    c = cluster()
    (root / "namespaces.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": c.namespaces}))
    (root / "cluster.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": c.objects}))
    policy_dir = root / "policies"
    policy_dir.mkdir()
    for name in ("default.yaml", "not-renamed.yaml"):
        (policy_dir / name).write_text((REPO / "policies" / name).read_text())
    (policy_dir / "rollout.yaml").write_text(ROLLOUT_POLICY)
    (root / "jobset.yaml").write_text(JOBSET_ONLY)
    (root / "no-kinds.yaml").write_text(NO_KINDS)
    return {"root": root, "namespaces": root / "namespaces.yaml",
            "cluster": root / "cluster.json", "policies": policy_dir,
            "jobset": root / "jobset.yaml", "no-kinds": root / "no-kinds.yaml"}


def audit(capsys: pytest.CaptureFixture[str], dump: dict[str, Path], *extra: str,
          files: tuple[str, ...] = ("namespaces", "cluster"),
          kinds: str = "jobset") -> tuple[int, str, str]:
    argv = ["audit"]
    for f in files:
        argv += ["-f", str(dump[f])]
    argv += ["--policies", str(dump["policies"]), "--workload-kinds", str(dump[kinds]), *extra]
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys: pytest.CaptureFixture[str], dump: dict[str, Path],
            *extra: str) -> dict[str, Any]:
    code, out, _ = audit(capsys, dump, "-o", "json", "--show", "all", *extra)
    assert code == 1
    doc: dict[str, Any] = json.loads(out)
    return doc


def namespace(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(ns for ns in doc["namespaces"] if ns["name"] == name)
    return found


def entry(ns: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    """The entry whose subject is kind/name, or that holds it as a member."""
    for e in ns["objects"]:
        if (e["kind"], e["name"]) == (kind, name) or {"kind": kind, "name": name} in e["members"]:
            found: dict[str, Any] = e
            return found
    raise AssertionError(f"{kind}/{name} is in no entry of {ns['name']}")


def section(text: str, ns: str) -> str:
    """The text report's part about namespace `ns`."""
    start = text.index(f"namespace {ns}:")
    end = text.find("\n\n", start)
    return text[start:end]


# --------------------------------------------------------------------------- namespaces


def test_each_namespace_is_met_as_the_webhook_configurations_route_it(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    doc = as_json(capsys, dump)
    status = {ns["name"]: (ns["status"], ns["policy"], ns["policyInForce"])
              for ns in doc["namespaces"]}
    assert status == {
        "team-a": ("judged", "default", True),
        "legacy": ("judged", "not-renamed", True),
        "rollout": ("judged", "rollout", True),
        "typo": ("judged", "larg", False),
        "batch": ("not-opted-in", None, False),
        "empty": ("not-opted-in", None, False),
        "kube-system": ("excluded", None, False),
        "gpu-share-system": ("excluded", None, False),
        "ghost": ("not-in-files", None, False),
    }
    # Labelled as opted in, and still never sent to the webhook: untouched, whatever they hold.
    for name in ("batch", "kube-system", "gpu-share-system"):
        ns = namespace(doc, name)
        assert ns["counts"] == {"objects": 1, "refused": 0, "changed": 0, "untouched": 1,
                                "notJudged": 0}
        assert ns["objects"] == []
    assert "own namespace" in namespace(doc, "gpu-share-system")["reason"]
    assert namespace(doc, "ghost")["counts"]["notJudged"] == 1


def test_the_routes_are_the_rendered_selectors() -> None:
    """The audit reads the namespaceSelectors `render` writes: every opted-in namespace that
    is not excluded reaches the entry of the policy `namespaces.policy_name` picks, or the
    catch-all; the others reach none."""
    loaded = policies.load_directory(REPO / "policies")
    where = rendering.routes(loaded, webhook_namespace="gpu")
    cases = [
        ("a", {}, None),
        ("a", {names.ENABLED_LABEL: "false"}, None),
        ("a", OPTED_IN, "default"),
        ("a", {**OPTED_IN, names.POLICY_LABEL: ""}, "default"),
        ("a", {**OPTED_IN, names.POLICY_LABEL: "not-renamed"}, "not-renamed"),
        ("a", {**OPTED_IN, names.POLICY_LABEL: "nope"}, names.UNKNOWN_POLICY_PATH),
        ("gpu", OPTED_IN, None),
        ("gpu-share-system", OPTED_IN, "default"),  # another webhook namespace was given
        ("kube-system", OPTED_IN, None),
    ]
    for name, labels, expected in cases:
        seen = {**labels, names.NAME_LABEL: name}
        assert where.selected_path(seen) == expected, (name, labels)
        picked = namespaces.policy_name(labels)
        if expected not in (None, names.UNKNOWN_POLICY_PATH):
            assert picked == expected
    # They are the selectors of both configurations' entries, in order, with their paths.
    rendered = rendering.render(
        loaded, service="hook", namespace="gpu", name="hook", kinds=kinds.BUILTIN_KINDS
    )
    for configuration in rendered:
        selectors = tuple(
            (
                str(w["clientConfig"]["service"]["path"]).split("/", 2)[2],
                tuple(w["namespaceSelector"]["matchExpressions"]),
            )
            for w in configuration["webhooks"]
            if w["name"] != rendering.NAMESPACE_ENTRY
        )
        assert selectors == where.entries, configuration["kind"]


# --------------------------------------------------------------------------- verdicts


def test_refused_names_the_rule_the_container_and_the_fix(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    team = namespace(as_json(capsys, dump), "team-a")
    trainer = entry(team, "Deployment", "trainer")
    assert trainer["verdict"] == "refused"
    # The Deployment, both ReplicaSets and both pods: one entry.
    assert trainer["count"] == 5
    assert {(m["kind"], m["name"]) for m in trainer["members"]} == {
        ("ReplicaSet", "trainer-6b7c8d"), ("ReplicaSet", "trainer-5d4f8b"),
        ("Pod", "trainer-5d4f8b-00000"), ("Pod", "trainer-5d4f8b-00001")}
    [v] = trainer["violations"]
    assert (v["rule"], v["container"], v["mode"]) == ("multi-replica", "train", "enforce")
    assert v["message"].endswith(f"Ask for {SHARED}: 1")

    notebook = entry(team, "Pod", "notebook")
    assert notebook["owner"] is None
    assert notebook["count"] == 1
    assert [(v["rule"], v["container"]) for v in notebook["violations"]] == [
        ("privileged", "shell")]
    assert "Remove spec.containers[0].securityContext.privileged" in (
        notebook["violations"][0]["message"])

    # A workload kind from the WorkloadKinds file: the JobSet's workers template.
    sweep = entry(team, "JobSet", "sweep")
    assert sweep["verdict"] == "refused"
    [v] = sweep["violations"]
    assert (v["rule"], v["container"]) == ("multi-replica", "worker")
    assert v["message"].startswith("JobSet spec.replicatedJobs[1].template.spec.template: ")
    # What the JobSet controller made of that template is judged too, each Job as its pods,
    # and gets the same verdict (the same rule, on the same field of the pod, in the same
    # container): one entry with the JobSet.
    assert sweep["members"] == [{"kind": "Job", "name": "sweep-workers-0"},
                                {"kind": "Pod", "name": "sweep-workers-0-0-abcde"}]
    driver = entry(team, "Job", "sweep-driver-0")
    assert driver["verdict"] == "changed"
    assert driver["adds"] == [
        'env of container "driver": NVIDIA_VISIBLE_DEVICES=void',
        "annotations: gpu-share.io/policy=default, gpu-share.io/mutations=visible-devices"]


def test_changed_says_what_would_be_added(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    doc = as_json(capsys, dump)
    inference = entry(namespace(doc, "team-a"), "Deployment", "inference")
    assert inference["verdict"] == "changed"
    # The Deployment, its current ReplicaSet and the three pods not admitted yet.
    assert inference["count"] == 5
    # The old revision gets other additions: an entry of its own.
    old = entry(namespace(doc, "team-a"), "ReplicaSet", "inference-6b7c8d")
    assert old["count"] == 1
    assert old["owner"] == {"kind": "Deployment", "name": "inference"}
    assert old["note"] == "0 replicas: an old revision, used again only by a rollback"
    assert [m["rule"] for m in old["mutations"]] == [
        "runtime-class", "tolerations", "node-selection", "mps-limits", "driver-capabilities"]
    assert [m["rule"] for m in inference["mutations"]] == [
        "runtime-class", "tolerations", "node-selection", "mps-limits", "driver-capabilities",
        "visible-devices"]
    assert {m["mode"] for m in inference["mutations"]} == {"enforce"}
    adds = inference["adds"]
    assert "runtimeClassName: nvidia" in adds
    assert f"tolerations: nvidia.com/gpu Exists NoSchedule, {SHARED} Exists NoSchedule" in adds
    assert ('env of container "server": CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25,'
            " CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=3840M, NVIDIA_DRIVER_CAPABILITIES=compute,utility"
            ) in adds
    assert 'env of container "log": NVIDIA_VISIBLE_DEVICES=void' in adds
    [affinity] = [a for a in adds if a.startswith("required node affinity: ")]
    assert "nvidia.com/gpu.product In Tesla-T4" in affinity

    nightly = entry(namespace(doc, "team-a"), "CronJob", "nightly")
    assert (nightly["verdict"], nightly["count"]) == ("changed", 3)

    # Not renamed: the -SHARED product label selects the nodes.
    render = entry(namespace(doc, "legacy"), "Pod", "render")
    assert render["verdict"] == "changed"
    assert (render["count"], render["owner"]) == (2, None)
    assert any("Tesla-T4-SHARED" in a for a in render["adds"])


def test_untouched_pods_and_namespaces(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    doc = as_json(capsys, dump)
    team = namespace(doc, "team-a")
    admitted_pod = entry(team, "Pod", "inference-5d4f8b-admitted")
    assert admitted_pod["verdict"] == "untouched"
    assert admitted_pod["owner"] == {"kind": "Deployment", "name": "inference"}
    assert (admitted_pod["adds"], admitted_pod["violations"]) == ([], [])
    quiet = entry(team, "Pod", "quiet")
    assert quiet["verdict"] == "untouched"
    # 7 + 5 of the Deployments, 3 of the CronJob, 5 of the JobSet, 2 pods; the Service is
    # no workload.
    assert team["counts"] == {"objects": 22, "refused": 9, "changed": 11, "untouched": 2,
                              "notJudged": 0}
    assert doc["totals"] == {"objects": 33, "refused": 12, "changed": 15, "untouched": 5,
                             "notJudged": 1, "ignored": 1, "duplicates": 0}


def test_a_policy_label_naming_no_policy_is_reported_as_such(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    doc = as_json(capsys, dump)
    typo = namespace(doc, "typo")
    assert "no policy is named \"larg\"" in typo["reason"]
    [v] = entry(typo, "Pod", "gpu")["violations"]
    assert v["rule"] == "unknown-policy"
    assert "names a policy that does not exist (policies: default, not-renamed, rollout)" in (
        v["message"])
    # The rules that need no policy still apply to the other view.
    cpu = entry(typo, "Pod", "cpu")
    assert cpu["verdict"] == "changed"
    assert [m["rule"] for m in cpu["mutations"]] == ["visible-devices"]


def test_a_policy_in_warn_or_dry_run_reports_what_enforce_would_refuse_and_the_mode_today(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    doc = as_json(capsys, dump)
    rollout = namespace(doc, "rollout")
    assert (rollout["mode"], rollout["ruleModes"]) == ("dry-run", {"privileged": "warn"})
    [debug] = entry(rollout, "Pod", "debug")["violations"]
    assert (debug["rule"], debug["container"], debug["mode"]) == ("privileged", "shell", "warn")
    [leaky] = entry(rollout, "Pod", "leaky")["violations"]
    assert (leaky["rule"], leaky["container"], leaky["mode"]) == (
        "device-variables", "tool", "dry-run")
    # In dry-run nothing is added today; the report shows what enforce adds.
    batch = entry(rollout, "Pod", "batch")
    assert batch["verdict"] == "changed"
    assert {m["mode"] for m in batch["mutations"]} == {"dry-run"}
    assert "runtimeClassName: nvidia" in batch["adds"]

    code, out, _ = audit(capsys, dump)
    assert code == 1
    text = section(out, "rollout")
    assert text.startswith('namespace rollout: policy "rollout"'
                           f" (label {names.POLICY_LABEL}=rollout), mode dry-run"
                           " (privileged: warn)")
    assert "      - privileged (warn today): container \"shell\": privileged container" in text
    assert "      - device-variables (dry-run today): container \"tool\"" in text
    assert ("    Pod/batch: runtime-class, tolerations, node-selection, mps-limits"
            " (dry-run today: not added yet)\n") in text
    assert "2 of them only by rules in warn or dry-run mode today" in out


def test_every_rule_that_refuses_is_listed() -> None:
    """Not the first one only: the user fixes them all in one go."""
    loaded = policies.load_directory(REPO / "policies")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "both", "namespace": "a"},
           "spec": spec(container("main", 1, securityContext={"privileged": True}),
                        nodeSelector={"nvidia.com/gpu.product": "Tesla-V100"})}
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": OPTED_IN}}
    report = auditing.audit([ns, pod], policies=loaded)
    [judged] = report.namespaces
    [found] = judged.entries
    assert [f.rule for f in found.verdict.refusals] == ["privileged", "node-selection"]
    assert {f.mode for f in found.verdict.refusals} == {names.ENFORCE}


# --------------------------------------------------------------------------- the text report


def test_the_text_report_per_namespace_and_the_summary(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    code, out, err = audit(capsys, dump)
    assert code == 1
    team = section(out, "team-a")
    assert team.splitlines()[0] == (
        f'namespace team-a: policy "default" (no {names.POLICY_LABEL} label), mode enforce')
    assert "  would be refused: 9 objects" in team
    assert "    Deployment/trainer with 2 ReplicaSets and 2 pods" in team
    assert '      - multi-replica: container "train": invalid multi-replica request' in team
    assert ("    Deployment/inference with ReplicaSet/inference-5d4f8b and 3 pods: runtime-class,"
            " tolerations, node-selection, mps-limits, driver-capabilities, visible-devices"
            ) in team
    assert ("    ReplicaSet/inference-6b7c8d of Deployment/inference (0 replicas: an old"
            " revision, used again only by a rollback): runtime-class,") in team
    assert '      + env of container "log": NVIDIA_VISIBLE_DEVICES=void' in team
    assert "  untouched: 2 objects (--show all lists them)" in team
    assert section(out, "batch") == (
        f"namespace batch: not opted in (no label {names.ENABLED_LABEL}=true);"
        " 1 object untouched")
    assert section(out, "kube-system") == (
        "namespace kube-system: never reviewed (kube-system is never sent to the webhook);"
        " 1 object untouched")
    # A namespace the webhook never sees, with nothing in it: not worth a line.
    assert "empty" not in out
    summary = out[out.index("Summary\n"):]
    rows = {line.split()[0]: line.split() for line in summary.splitlines()[2:] if line}
    assert rows["team-a"] == ["team-a", "default", "enforce", "22", "9", "11", "2"]
    assert rows["typo"][:3] == ["typo", "larg", "(no"]
    assert rows["batch"] == ["batch", "(not", "opted", "in)", "-", "1", "-", "-", "1"]
    assert rows["TOTAL"] == ["TOTAL", "33", "12", "15", "5"]
    assert "Would be refused: 12 objects" in out
    assert "Ignored: 1 object of kinds the webhook never reviews (Service)." in out
    # On stderr: the namespace whose labels are unknown.
    assert err.splitlines() == [
        "warning: 1 object not judged: no Namespace object for ghost (their labels pick the"
        " policy); add them to the files"]


def test_show_refused_lists_only_refusals(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    code, out, _ = audit(capsys, dump, "--show", "refused")
    assert code == 1
    team = section(out, "team-a")
    assert "Deployment/trainer" in team
    assert "Deployment/inference" not in team
    assert "  would be changed: 11 objects (--show changed lists them)" in team


# --------------------------------------------------------------------------- exit codes


def test_exit_0_when_nothing_would_be_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, dump: dict[str, Path]
) -> None:
    c = Cluster()
    c.namespace("team-a", OPTED_IN)
    c.namespace("batch", {})
    c.deployment("inference", "team-a", INFERENCE, replicas=1)
    c.pod("privileged", "batch", PRIVILEGED)
    path = tmp_path / "clean.yaml"
    # Single objects, one YAML document each.
    path.write_text(yaml.safe_dump_all([*c.namespaces, *c.objects]))
    code = cli.main(["audit", "-f", str(path), "--policies", str(dump["policies"])])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert out.endswith("Nothing would be refused.\n")
    assert "namespace team-a:" in out
    assert "would be changed: 4 objects" in out
    assert err == ""


def test_the_dump_reads_the_same_in_every_shape(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, dump: dict[str, Path]
) -> None:
    """kubectl's Lists; the API's own lists, whose items carry no kind or apiVersion; one
    JSON object after another (`jq -c '.items[]'`, or dumps appended to one file); YAML."""
    c = cluster()
    by_list: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for obj in [*c.namespaces, *c.objects]:
        bare = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        by_list.setdefault((obj["apiVersion"], obj["kind"]), []).append(bare)
    shapes = {
        "api.json": "".join(
            json.dumps({"apiVersion": api, "kind": f"{kind}List", "items": items})
            for (api, kind), items in by_list.items()),
        "stream.json": "\n".join(json.dumps(o) for o in [*c.namespaces, *c.objects]),
        "all.yaml": yaml.safe_dump_all([*c.namespaces, *c.objects]),
    }
    _, out, warnings = audit(capsys, dump, "-o", "json", "--show", "all")
    expected = json.loads(out)
    del expected["files"]
    for name, text in shapes.items():
        (tmp_path / name).write_text(text)
        code, out, err = audit(capsys, {**dump, "one": tmp_path / name}, "-o", "json",
                               "--show", "all", files=("one",))
        assert (code, err) == (1, warnings), name
        found = json.loads(out)
        del found["files"]
        assert found == expected, name


def test_workload_kinds_come_from_the_file_given(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    """Without JobSet among the kinds, a JobSet is ignored; its Jobs and pods still count."""
    doc = as_json(capsys, dump, "--workload-kinds", str(dump["no-kinds"]))
    team = namespace(doc, "team-a")
    assert team["counts"]["objects"] == 21
    assert doc["totals"]["ignored"] == 2
    workers = entry(team, "Job", "sweep-workers-0")
    assert workers["verdict"] == "refused"
    assert workers["note"] == "JobSet/sweep is not in the files"


def test_the_json_report_schema(
    capsys: pytest.CaptureFixture[str], dump: dict[str, Path]
) -> None:
    doc = as_json(capsys, dump)
    assert set(doc) == {"apiVersion", "kind", "files", "webhookNamespace", "totals", "namespaces",
                        "withoutPodSecurityBaseline"}
    assert (doc["apiVersion"], doc["kind"]) == ("gpu-share.io/v1alpha1", "AuditReport")
    assert doc["files"] == [str(dump["namespaces"]), str(dump["cluster"])]
    assert doc["webhookNamespace"] == names.DEFAULT_NAMESPACE
    for ns in doc["namespaces"]:
        assert set(ns) == {"name", "status", "reason", "policy", "policyInForce", "mode",
                           "ruleModes", "podSecurity", "hostAccess", "counts", "objects"}
        assert ns["status"] in auditing.STATUSES
        assert set(ns["podSecurity"]) == {"enforce", "baselineEnforced"}
        if ns["status"] == "judged":
            assert ns["hostAccess"] in auditing.HOST_ACCESS_STATES
        else:
            assert ns["hostAccess"] is None
        for e in ns["objects"]:
            assert set(e) == {"verdict", "kind", "apiVersion", "name", "owner", "note", "count",
                              "members", "violations", "mutations", "adds", "warnings",
                              "unchanged"}
            assert e["verdict"] in auditing.VERDICTS
            assert e["count"] == 1 + len(e["members"])
            for v in e["violations"]:
                assert set(v) == {"rule", "container", "field", "type", "mode", "message"}
                assert v["field"]
                assert v["type"].startswith("FieldValue")
                assert v["rule"] in names.RULES
                assert v["mode"] in names.MODES
            for m in e["mutations"]:
                assert m["rule"] in names.RULES
                assert m["mode"] in names.MODES
        listed = sum(e["count"] for e in ns["objects"])
        counts = ns["counts"]
        if ns["status"] == "judged":
            assert listed == counts["objects"] == (
                counts["refused"] + counts["changed"] + counts["untouched"])
    for ns in doc["withoutPodSecurityBaseline"]:
        assert set(ns) == {"namespace", "podSecurity", "policy", "hostAccess", "reason",
                           "refused", "objects"}
        assert ns["refused"] == sum(e["count"] for e in ns["objects"])
        for e in ns["objects"]:
            assert e["verdict"] == "refused"
            assert {v["rule"] for v in e["violations"]} == {"host-access"}
    # The same file twice: each object once, and a warning.
    code, out, err = audit(capsys, dump, "-o", "json", files=("namespaces", "cluster", "cluster"))
    assert code == 1
    assert json.loads(out)["totals"]["objects"] == doc["totals"]["objects"]
    assert "found more than once; the last one counts" in err


@pytest.mark.parametrize(
    ("content", "args", "expected"),
    [
        (None, (), "no such file"),
        ("{not: [json", (), "not valid YAML or JSON at line 1"),
        ("- just\n- strings\n", (), "document 1 is a list, not a Kubernetes object"),
        ('{"kind": "List", "items": []}', (), "holds no Kubernetes object"),
        ('{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}}',
         (), "no Namespace object in"),
        # Namespaces but nothing to audit: a `kubectl get pods ...` that failed must not pass.
        ('{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}',
         (), "no pod or workload in"),
        ('{"kind": "List", "items": [{"apiVersion": "v1", "kind": "Namespace", "metadata":'
         ' {"name": "a"}}, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",'
         ' "namespace": "a"}}]}', (), "nothing to audit"),
        ("", ("-o", "xml"), "argument -o/--output: invalid choice: 'xml'"),
        ("", ("--webhook-namespace", "Not_A_Name"), "expected a namespace name"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | None,
    args: tuple[str, ...], expected: str,
) -> None:
    path = tmp_path / "dump.json"
    if content is not None:
        path.write_text(content)
    try:
        code = cli.main(["audit", "-f", str(path), *args])
    except SystemExit as exc:  # a bad option: argparse's way out
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert expected in err


def test_a_malformed_object_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "dump.json"
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": OPTED_IN}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
           "spec": {"containers": {"name": "not-a-list"}}}
    path.write_text(json.dumps({"kind": "List", "items": [ns, pod]}))
    assert cli.main(["audit", "-f", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: a/Pod/p: spec.containers: must be a list")
    assert len(err.splitlines()) == 1


@pytest.mark.slow  # the command in another interpreter, twice
def test_the_command_as_a_user_runs_it(tmp_path: Path, dump: dict[str, Path]) -> None:
    """A process of its own: a bad file is one line on stderr and exit 2, no traceback;
    standard input works."""
    bad = tmp_path / "binary.json"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    proc = subprocess.run([sys.executable, "-m", "webhook", "audit", "-f", str(bad)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr == f"error: {bad}: is not UTF-8 text\n"
    assert proc.stdout == ""
    ok = subprocess.run(
        [sys.executable, "-m", "webhook", "audit", "-f", str(dump["namespaces"]), "-f", "-",
         "--policies", str(dump["policies"]), "--show", "refused"],
        input=dump["cluster"].read_text(), capture_output=True, text=True, timeout=60,
        check=False,
    )
    assert ok.returncode == 1, ok.stderr
    assert "Traceback" not in ok.stderr
    assert "Would be refused: 12 objects" in ok.stdout


# --------------------------------------------------------------------------- Pod Security

PSA = names.POD_SECURITY_ENFORCE_LABEL
# Each namespace's Pod Security enforce level (None: no label, the cluster's default).
LEVELS = {"open": None, "priv": "privileged", "base": "baseline", "strict": "restricted"}
# A pod with a hostPath no policy allows, and one in the node's network namespace: Pod
# Security baseline refuses both, and so does rule host-access where baseline is not enforced.
HOST_PATH = spec(container("app", volumeMounts=[{"name": "cache", "mountPath": "/cache"}]),
                 volumes=[{"name": "cache", "hostPath": {"path": "/data/cache"}}])
HOST_NETWORK = spec(container("app"), hostNetwork=True)


def host_access_dump(tmp_path: Path, policy: str | None = None) -> list[str]:
    """The four namespaces of LEVELS, opted in, each with the two pods; `policy`: the text of
    a policy file the namespaces pick instead of the shipped default."""
    c = Cluster()
    labels = dict(OPTED_IN)
    if policy is not None:
        labels[names.POLICY_LABEL] = yaml.safe_load(policy)["metadata"]["name"]
    for ns, level in LEVELS.items():
        c.namespace(ns, {**labels, **({PSA: level} if level else {})})
        c.pod("cache", ns, HOST_PATH)
        c.pod("net", ns, HOST_NETWORK)
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"kind": "List", "items": [*c.namespaces, *c.objects]}))
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "default.yaml").write_text((REPO / "policies" / "default.yaml").read_text())
    if policy is not None:
        (policy_dir / "site.yaml").write_text(policy)
    return ["audit", "-f", str(path), "--policies", str(policy_dir)]


def run_audit(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert err == ""
    return code, out


def test_namespaces_without_pod_security_baseline_are_listed_with_what_host_access_refuses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 19: the opted-in namespaces that do not enforce baseline (no label, privileged)
    are listed with the pods host-access would refuse there; those that enforce baseline or
    restricted are judged under `<policy>/baseline`, where host-access leaves its checks to
    Pod Security: not listed, and no host-access finding in them."""
    code, out = run_audit(capsys, [*host_access_dump(tmp_path), "-o", "json"])
    assert code == 1
    doc = json.loads(out)
    seen = {ns["name"]: (ns["podSecurity"], ns["hostAccess"]) for ns in doc["namespaces"]}
    assert seen == {
        "open": ({"enforce": None, "baselineEnforced": False}, "applies"),
        "priv": ({"enforce": "privileged", "baselineEnforced": False}, "applies"),
        "base": ({"enforce": "baseline", "baselineEnforced": True}, "left-to-pod-security"),
        "strict": ({"enforce": "restricted", "baselineEnforced": True},
                   "left-to-pod-security"),
    }
    listed = doc["withoutPodSecurityBaseline"]
    assert [ns["namespace"] for ns in listed] == ["open", "priv"]
    for ns in listed:
        assert (ns["podSecurity"], ns["policy"], ns["hostAccess"], ns["refused"]) == (
            LEVELS[ns["namespace"]], "default", "applies", 2)
        assert "Pod Security baseline not enforced" in ns["reason"]
        found = {(e["kind"], e["name"]): [(v["rule"], v["field"]) for v in e["violations"]]
                 for e in ns["objects"]}
        assert found == {("Pod", "cache"): [("host-access", "spec.volumes[0]")],
                         ("Pod", "net"): [("host-access", "spec.hostNetwork")]}
        cache = entry(ns, "Pod", "cache")["violations"][0]["message"]
        assert 'hostPath "/data/cache"' in cache
        assert "allowedHostPaths: none" in cache
        # The same refusals in the namespace's own report.
        judged = namespace(doc, ns["namespace"])
        assert judged["counts"]["refused"] == 2
        assert entry(judged, "Pod", "net")["violations"] == entry(ns, "Pod", "net")["violations"]
    for name in ("base", "strict"):
        judged = namespace(doc, name)
        assert judged["counts"] == {"objects": 2, "refused": 0, "changed": 2, "untouched": 0,
                                    "notJudged": 0}
        assert all(v["rule"] != "host-access"
                   for e in judged["objects"] for v in e["violations"])


def test_the_text_report_says_where_pod_security_baseline_is_enforced(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = run_audit(capsys, host_access_dump(tmp_path))
    assert code == 1
    assert section(out, "open").splitlines()[1] == (
        f"  Pod Security baseline not enforced (no {PSA} label): host-access applies")
    assert section(out, "priv").splitlines()[1] == (
        f"  Pod Security baseline not enforced ({PSA}=privileged): host-access applies")
    assert section(out, "base").splitlines()[1] == (
        f"  Pod Security baseline enforced ({PSA}=baseline): host-access leaves its checks"
        " to it")
    assert section(out, "strict").splitlines()[1] == (
        f"  Pod Security restricted enforced ({PSA}=restricted): host-access leaves its checks"
        " to it")
    start = out.index("Opted-in namespaces without Pod Security baseline: host-access applies\n")
    listed = out[start:out.index("\n\n", start)].splitlines()
    assert listed[1] == f"  open (no {PSA} label): host-access would refuse 2 objects"
    assert f"  priv ({PSA}=privileged): host-access would refuse 2 objects" in listed
    assert "    Pod/cache" in listed
    assert any(line.startswith('      - host-access: volume "cache" (spec.volumes[0]):'
                               ' hostPath "/data/cache"') for line in listed)
    assert any(line.startswith("      - host-access: host namespace: spec.hostNetwork")
               for line in listed)
    assert not any(line.startswith(("  base", "  strict")) for line in listed)


def test_every_namespace_enforcing_baseline_is_said_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = host_access_dump(tmp_path)
    dump_file = Path(argv[2])
    doc = json.loads(dump_file.read_text())
    doc["items"] = [o for o in doc["items"] if o["metadata"].get("namespace", o["metadata"]["name"])
                    in ("base", "strict")]
    dump_file.write_text(json.dumps(doc))
    code, out = run_audit(capsys, argv)
    assert code == 0, out
    assert ("Every opted-in namespace enforces Pod Security baseline or restricted:"
            " host-access leaves its checks to it.") in out
    assert "Opted-in namespaces without" not in out


SITE_POLICY = """\
apiVersion: gpu-share.io/v1alpha1
kind: SharingPolicy
metadata:
  name: site
spec:
  nodeClasses:
    - {name: t4-mps, product: Tesla-T4, strategy: mps, replicas: 4, memoryMiB: 15360}
"""


def test_a_policy_that_does_not_trust_the_label_applies_host_access_everywhere(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = SITE_POLICY + "  hostAccess: {trustPodSecurity: false}\n"
    code, out = run_audit(capsys, [*host_access_dump(tmp_path, policy), "-o", "json"])
    assert code == 1
    doc = json.loads(out)
    listed = {ns["namespace"]: ns for ns in doc["withoutPodSecurityBaseline"]}
    assert set(listed) == set(LEVELS)
    assert {ns["refused"] for ns in listed.values()} == {2}
    assert "does not trust the label (hostAccess.trustPodSecurity: false)" in (
        listed["base"]["reason"])
    assert namespace(doc, "base")["hostAccess"] == "applies"
    assert namespace(doc, "base")["podSecurity"]["baselineEnforced"] is True


def test_host_access_switched_off_is_said_and_refuses_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = SITE_POLICY + "  rules: {denyHostAccess: false}\n"
    code, out = run_audit(capsys, [*host_access_dump(tmp_path, policy), "-o", "json"])
    assert code == 0
    doc = json.loads(out)
    listed = {ns["namespace"]: ns for ns in doc["withoutPodSecurityBaseline"]}
    # Those that enforce baseline leave it to Pod Security whatever the switch says.
    assert set(listed) == {"open", "priv"}
    assert {(ns["hostAccess"], ns["refused"]) for ns in listed.values()} == {("off", 0)}
    assert 'host-access is off in policy "site" (rules.denyHostAccess: false)' in (
        listed["open"]["reason"])


def test_the_path_carries_the_pod_security_level() -> None:
    loaded = policies.load_directory(REPO / "policies")
    where = rendering.routes(loaded, webhook_namespace="gpu")
    cases = [
        ({}, "default"),
        ({PSA: "privileged"}, "default"),
        ({PSA: "baseline"}, "default/baseline"),
        ({PSA: "restricted"}, "default/baseline"),
        ({names.POLICY_LABEL: "nope", PSA: "baseline"}, f"{names.UNKNOWN_POLICY_PATH}/baseline"),
    ]
    for labels, expected in cases:
        assert auditing.selected_path(where, "a", {**OPTED_IN, **labels}) == expected, labels
    assert auditing.selected_path(where, "a", {PSA: "baseline"}) is None
    # The policy at that path leaves host-access to Pod Security.
    assert loaded.governing("default/baseline").pod_security
    # And the audit judges under it: nothing for host-access in a baseline namespace.
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": "a", "labels": {**OPTED_IN, PSA: "baseline"}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "net", "namespace": "a"},
           "spec": HOST_NETWORK}
    report = auditing.audit([ns, pod], policies=loaded, where=where)
    [judged] = report.namespaces
    assert (judged.policy, judged.host_access) == ("default", auditing.POD_SECURITY)
    assert judged.counts[auditing.REFUSED] == 0
    assert report.without_pod_security == []
