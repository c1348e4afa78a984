"""`audit --cluster` and `--write-reports`: the audit read from the Kubernetes API and its
reports written back, against a stand-in of the API over real HTTP (`tests/support/kube_api.py`:
paged lists over a snapshot, continue tokens that expire, server-side apply with field
ownership, RBAC with the real 403 messages, namespace admission) and the official client,
run by the command in a worker thread as in a CronJob. No part of the client is replaced."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from aiohttp import web

from tests.support import audit_deploy, kube_api, report_schemas
from tests.support.audit_dump import (
    JOBSET_ONLY,
    OPTED_IN,
    REPO,
    ROLLOUT_POLICY,
    cluster,
    container,
    spec,
)
from webhook import cli
from webhook.policy import kinds, names
from webhook.tools import cluster as cluster_module
from webhook.tools import reporting

JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")

def chart_rules(api: reporting.ReportApi) -> list[dict[str, Any]]:
    """The rules of the ClusterRole the chart gives the audit's CronJob for `api`: the runs
    below have exactly those rights."""
    return audit_deploy.audit_cluster_role_rules(api.output)


@functools.cache
def _dump_json() -> str:
    c = cluster()
    return json.dumps({"namespaces": c.namespaces, "objects": c.objects})


def _dump() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The dump's namespaces and objects (`audit_dump.cluster`): built once, a copy each time
    (the same every time: its uids are counted, not drawn)."""
    dump = json.loads(_dump_json())
    return dump["namespaces"], dump["objects"]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    for name in ("default.yaml", "not-renamed.yaml", "dra.yaml"):
        (policy_dir / name).write_text((REPO / "policies" / name).read_text())
    (policy_dir / "rollout.yaml").write_text(ROLLOUT_POLICY)
    (tmp_path / "jobset.yaml").write_text(JOBSET_ONLY)
    namespaces, objects = _dump()
    (tmp_path / "namespaces.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": namespaces}))
    (tmp_path / "cluster.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return {"root": tmp_path, "policies": policy_dir, "jobset": tmp_path / "jobset.yaml",
            "namespaces": tmp_path / "namespaces.yaml", "cluster": tmp_path / "cluster.json"}


def seeded(rules: list[dict[str, Any]] | None = None) -> kube_api.KubeAPI:
    """The stand-in holding the audit's dump (kinds the dump has that the audit never reads,
    a Service, are not served and left out), the JobSet CRD and both report APIs served."""
    kube = kube_api.KubeAPI(rules=rules, validate=report_schemas.validate)
    # Every kind of the shipped WorkloadKinds file is installed.
    for kind in kinds.load():
        kube.serve_crd(kind.group, kind.versions[0], kind.resource, kind.kind)
    for resource in (kube_api.POLICY_REPORTS, kube_api.CLUSTER_POLICY_REPORTS,
                     kube_api.REPORTS, kube_api.CLUSTER_REPORTS):
        kube.serve(resource)
    namespaces, objects = _dump()
    kube.add(*namespaces)
    # A namespace's objects exist only in a namespace that exists: the dump's "ghost" pod
    # (whose Namespace is left out of the files) is not in the cluster.
    exist = {ns["metadata"]["name"] for ns in namespaces}
    kube.add(*(o for o in objects
               if o["kind"] != "Service" and o["metadata"]["namespace"] in exist))
    return kube


@pytest.fixture
async def kube(aiohttp_server: Any) -> kube_api.KubeAPI:
    return await kube_api.serve(aiohttp_server, seeded())


class Run:
    """One run of the command: exit code, standard output and error."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> Any:
        return json.loads(self.out)


async def audit(capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI,
                files: dict[str, Path], *extra: str, token: str | None = None,
                shipped_kinds: bool = False) -> Run:
    """Run the command on the stand-in; with the JobSet-only kinds file (as the dump's
    audit), or with the shipped one (`shipped_kinds`, as the chart's CronJob runs it)."""
    kubeconfig = kube_api.write_kubeconfig(files["root"] / "kubeconfig", kube, token=token)
    argv = ["audit", "--cluster", "--kubeconfig", str(kubeconfig),
            "--policies", str(files["policies"])]
    if not shipped_kinds:
        argv += ["--workload-kinds", str(files["jobset"])]
    argv += extra
    code = await asyncio.to_thread(cli.main, argv)
    out, err = capsys.readouterr()
    return Run(code, out, err)


def file_audit(capsys: pytest.CaptureFixture[str], files: dict[str, Path], *extra: str) -> Run:
    code = cli.main(["audit", "-f", str(files["namespaces"]), "-f", str(files["cluster"]),
                     "--policies", str(files["policies"]),
                     "--workload-kinds", str(files["jobset"]), *extra])
    out, err = capsys.readouterr()
    return Run(code, out, err)


def error_line(run: Run) -> str:
    """The one error line of a run's standard error (notes may come before it)."""
    (line,) = [x for x in run.err.splitlines() if not x.startswith("note: ")]
    return line


def lists(kube: kube_api.KubeAPI, path: str) -> list[kube_api.Request]:
    return list(kube.requests(method="GET", path=path))


# --------------------------------------------------------------------------- reading


async def test_the_cluster_reads_as_its_dump_does(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    """Built-in list items come without kind and apiVersion; the audit of the API is the
    audit of `kubectl get -o json` all the same, entry for entry."""
    from_files = file_audit(capsys, files, "-o", "json", "--show", "all")
    from_api = await audit(capsys, kube, files, "-o", "json", "--show", "all")
    assert from_api.code == from_files.code == 1
    # 12 kinds: the built-in 11 and the JobSets of the kinds file; one request each.
    assert "note: read 40 objects of 12 kinds in 12 list requests\n" in from_api.err
    a, b = from_files.json(), from_api.json()
    assert b["files"] == ["the cluster"]
    # The dump's Service and the Pods of namespace "ghost" (no Namespace object) are not in
    # the cluster (a namespace of pods always exists there).
    b_namespaces = {ns["name"]: ns for ns in b["namespaces"]}
    for ns in a["namespaces"]:
        if ns["status"] == "not-in-files":
            assert ns["name"] not in b_namespaces
            continue
        assert b_namespaces[ns["name"]] == ns
    # Every list was cluster-wide.
    for r in kube.requests(method="GET"):
        assert "/namespaces/" not in r.path, r.path


async def test_lists_are_paged_and_every_page_is_read(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    run = await audit(capsys, kube, files, "-o", "json", "--show", "all", "--page-size", "3")
    assert run.code == 1
    pods = kube.objects("v1", "Pod")
    pod_lists = lists(kube, "/api/v1/pods")
    assert len(pod_lists) == math.ceil(len(pods) / 3)
    assert all(r.query["limit"] == "3" for r in pod_lists)
    assert "continue" not in pod_lists[0].query
    assert all("continue" in r.query for r in pod_lists[1:])
    judged = sum(ns["counts"]["objects"] for ns in run.json()["namespaces"])
    whole = await audit(capsys, kube, files, "-o", "json", "--show", "all")
    assert judged == sum(ns["counts"]["objects"] for ns in whole.json()["namespaces"])


async def test_an_expired_continue_token_restarts_the_list_from_the_start(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    whole = await audit(capsys, kube, files, "-o", "json", "--show", "all")
    kube.log.clear()
    kube.expire_next_continue(1)
    run = await audit(capsys, kube, files, "-o", "json", "--show", "all", "--page-size", "4")
    assert run.code == 1
    # The same audit: nothing read twice or left out.
    assert run.json()["namespaces"] == whole.json()["namespaces"]
    expired = [r for r in kube.log if r.status == 410]
    assert len(expired) == 1
    # The kind whose token expired was listed again from its first page.
    path = expired[0].path
    firsts = [r for r in lists(kube, path) if "continue" not in r.query]
    assert len(firsts) == 2


async def test_tokens_that_keep_expiring_are_one_clear_line_and_exit_3(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    kube.expire_next_continue(1000)
    run = await audit(capsys, kube, files, "--page-size", "2")
    assert run.code == 3
    assert run.out == ""
    line = run.err.strip()
    assert "\n" not in line
    assert line.startswith("error: listing namespaces: the list's continue token expired 4 times")
    assert "raise --page-size" in line


async def test_kinds_not_served_are_a_note_and_the_rest_is_audited(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    kube.unserve("resource.k8s.io", "v1")
    kube.unserve("jobset.x-k8s.io", "v1alpha2", "jobsets")
    run = await audit(capsys, kube, files, "-o", "json", "--show", "all")
    assert run.code == 1
    assert ("note: resourceclaims.resource.k8s.io (resource.k8s.io/v1) is not served by this"
            " cluster: no ResourceClaim to audit") in run.err
    assert "note: jobsets.jobset.x-k8s.io (jobset.x-k8s.io/v1alpha2) is not served" in run.err
    kinds_seen = {o["kind"] for ns in run.json()["namespaces"] for o in ns["objects"]}
    assert "JobSet" not in kinds_seen
    assert "Deployment" in kinds_seen


async def test_a_built_in_kind_not_served_is_an_error(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    kube.unserve("batch", "v1", "cronjobs")
    run = await audit(capsys, kube, files)
    assert run.code == 3
    assert run.err.startswith("error: list cronjobs.batch at the cluster scope: 404 the server"
                              " could not find the requested resource")


async def test_a_wrong_token_and_an_unreachable_server_are_one_line(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    run = await audit(capsys, kube, files, token="not-the-token")
    assert run.code == 3
    assert run.err.strip() == (
        "error: list namespaces at the cluster scope: not authenticated (401): check the"
        " kubeconfig or the service account token"
    )
    dead = kube_api.KubeAPI()
    dead.url = "http://127.0.0.1:9"  # discard: nothing listens
    run = await audit(capsys, dead, files)
    assert run.code == 3
    assert run.err.startswith("error: list namespaces at the cluster scope: the API server did"
                              " not answer: ")
    assert run.err.count("\n") == 1


@pytest.mark.parametrize(("argv", "problem"), [
    (["--cluster", "-f", "x.json"], "--cluster reads the cluster: leave out -f"),
    (["--write-reports", "-f", "x.json", "-o", "policyreport"], "--write-reports needs --cluster"),
    (["--cluster", "--write-reports"], "--write-reports needs -o policyreport or -o openreports"),
    (["--cluster", "--page-size", "0"], "--page-size: invalid"),
])
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                             problem: str) -> None:
    try:
        code = cli.main(["audit", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    _, err = capsys.readouterr()
    assert code == 2
    assert problem in err


async def test_a_kubeconfig_that_is_not_there_is_one_line(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path]
) -> None:
    code = cli.main(["audit", "--cluster", "--kubeconfig", str(files["root"] / "nope"),
                     "--policies", str(files["policies"])])
    _, err = capsys.readouterr()
    assert code == 3
    assert err == f"error: {files['root'] / 'nope'}: no such kubeconfig file\n"


# --------------------------------------------------------------------------- RBAC


async def test_the_chart_s_rights_are_enough_to_read_and_write(
    capsys: pytest.CaptureFixture[str], aiohttp_server: Any, files: dict[str, Path]
) -> None:
    for api in reporting.APIS.values():
        kube = await kube_api.serve(aiohttp_server, seeded(chart_rules(api)))
        for stage in _Stages(kube, _opt_out_of(kube)):
            run = await audit(capsys, kube, files, "-o", api.output, "--write-reports",
                              shipped_kinds=True)
            assert run.code == 0, (stage, run.err)
        assert not [r for r in kube.log if r.status == 403]
        # Nothing but list, and apply and delete on the reports.
        assert {r.method for r in kube.log} <= {"GET", "PATCH", "DELETE"}
        assert all(f"/{api.plural}/" in r.path or f"/{api.cluster_plural}/" in r.path
                   for r in kube.log if r.method != "GET")
        # Every verb on the reports was used: create and patch (apply), list, delete.
        done = {(r.method, "create" if r.status == 201 else "") for r in kube.writes()}
        assert done == {("PATCH", "create"), ("PATCH", ""), ("DELETE", "")}


class _Stages:
    """Runs that between them need every right: the first creates the reports; before the
    second a pod goes (a report is patched) and a namespace opts out (one is deleted);
    before the third every namespace opts out (the cluster report goes too)."""

    def __init__(self, kube: kube_api.KubeAPI, opt_out: Any) -> None:
        self.kube, self.opt_out = kube, opt_out

    def __iter__(self) -> Any:
        yield "first run: creates"
        self.kube.remove("v1", "Pod", "notebook", "team-a")
        self.opt_out("legacy")
        yield "second run: patches and deletes a namespace's report"
        self.opt_out(*(ns["metadata"]["name"] for ns in self.kube.objects("v1", "Namespace")))
        yield "third run: deletes the cluster report"


def _without(rules: list[dict[str, Any]], group: str, resource: str,
             verb: str) -> list[dict[str, Any]]:
    out = []
    for rule in copy.deepcopy(rules):
        if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
            others = [r for r in rule["resources"] if r != resource]
            if others:
                out.append({**rule, "resources": others})
            if len(rule["verbs"]) > 1:
                out.append({**rule, "resources": [resource],
                            "verbs": [v for v in rule["verbs"] if v != verb]})
            continue
        out.append(rule)
    return out


_EVERY_RIGHT = [
    pytest.param(api, group, resource, verb, id=f"{api.output}-{group or 'core'}-{resource}-{verb}")
    for api in reporting.APIS.values()
    for rule in chart_rules(api)
    for group in rule["apiGroups"]
    for resource in rule["resources"]
    for verb in rule["verbs"]
]


# Slow: 50 rights (both report APIs), each up to three runs of the command (~25 s in all).
@pytest.mark.slow
@pytest.mark.parametrize(("api", "group", "resource", "verb"), _EVERY_RIGHT)
async def test_every_right_the_chart_grants_is_needed_and_its_absence_says_which(  # noqa: PLR0917
    capsys: pytest.CaptureFixture[str], aiohttp_server: Any, files: dict[str, Path],
    api: reporting.ReportApi, group: str, resource: str, verb: str,
) -> None:
    """Least: without any one right of the chart's ClusterRole, one of the stages fails with
    exit 3 and one line naming the verb and the resource (the stages before it pass)."""
    kube = await kube_api.serve(aiohttp_server, seeded(_without(chart_rules(api), group,
                                                                 resource, verb)))
    for stage in _Stages(kube, _opt_out_of(kube)):
        run = await audit(capsys, kube, files, "-o", api.output, "--write-reports",
                          shipped_kinds=True)
        if run.code == 0:
            continue
        assert run.code == 3, (stage, run.out, run.err)
        assert f'needs {verb} on "{resource}" in API group "{group}"' in error_line(run), run.err
        return
    pytest.fail(f"every stage ran without {verb} on {resource}.{group}")


def _opt_out_of(kube: kube_api.KubeAPI) -> Any:
    def opt_out(*names_: str) -> None:
        for name in names_:
            ns = kube.object("v1", "Namespace", name)
            assert ns is not None
            ns["metadata"]["labels"].pop(names.ENABLED_LABEL, None)
            kube.add(ns)

    return opt_out


# --------------------------------------------------------------------------- writing


@pytest.mark.parametrize("api", list(reporting.APIS.values()), ids=list(reporting.APIS))
async def test_reports_are_applied_then_left_alone_then_updated_and_pruned(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path],
    api: reporting.ReportApi,
) -> None:
    first = await audit(capsys, kube, files, "-o", api.output, "--write-reports")
    assert first.code == 0, first.err
    assert first.out.startswith(f"{api.kind} and {api.cluster_kind} ({api.api_version}):"
                                " 5 created, 0 updated, 0 unchanged, 0 deleted")
    stored = {(r["metadata"].get("namespace"), r["metadata"]["name"])
              for r in kube.objects(api.api_version, api.kind)}
    assert stored == {(ns, "gpu-share-webhook") for ns in ("legacy", "rollout", "team-a",
                                                            "typo")}
    assert len(kube.objects(api.api_version, api.cluster_kind)) == 1
    applies = list(kube.writes())
    assert all(r.method == "PATCH" and r.content_type == kube_api.APPLY_PATCH
               and r.query["fieldManager"] == "gpu-share-webhook" and r.query["force"] == "true"
               for r in applies)
    # What was stored is what -o prints (the stand-in validated it against the CRD schemas).
    printed = await audit(capsys, kube, files, "-o", api.output)
    for item in printed.json()["items"]:
        meta = item["metadata"]
        live = kube.object(api.api_version, item["kind"], meta["name"], meta.get("namespace"))
        assert live is not None
        assert live["results"] == item["results"] or _same_but_time(live, item)

    # Nothing changed: nothing written.
    kube.log.clear()
    again = await audit(capsys, kube, files, "-o", api.output, "--write-reports")
    assert again.code == 0
    assert "0 created, 0 updated, 5 unchanged, 0 deleted" in again.out
    assert kube.writes() == []

    # A pod goes, a namespace opts out: one report updated, one deleted, the others left.
    before = {r["metadata"]["namespace"]: r for r in kube.objects(api.api_version, api.kind)}
    kube.remove("v1", "Pod", "notebook", "team-a")
    ns = kube.object("v1", "Namespace", "legacy")
    assert ns is not None
    ns["metadata"]["labels"].pop(names.ENABLED_LABEL)
    kube.add(ns)
    kube.log.clear()
    third = await audit(capsys, kube, files, "-o", api.output, "--write-reports")
    assert third.code == 0
    assert "0 created, 2 updated, 2 unchanged, 1 deleted" in third.out  # team-a, cluster
    assert "deleted: legacy/gpu-share-webhook" in third.out
    after = {r["metadata"]["namespace"]: r for r in kube.objects(api.api_version, api.kind)}
    assert set(after) == {"rollout", "team-a", "typo"}
    assert after["rollout"] == before["rollout"]
    names_left = {x["resources"][0]["name"] for x in after["team-a"]["results"]}
    assert "notebook" not in names_left
    # Results that did not change kept their timestamps.
    old = {(x["resources"][0]["uid"], x.get("rule")): x["timestamp"]
           for x in before["team-a"]["results"]}
    for x in after["team-a"]["results"]:
        assert x["timestamp"] == old[(x["resources"][0]["uid"], x.get("rule"))]


def _same_but_time(live: dict[str, Any], item: dict[str, Any]) -> bool:
    def strip(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in x.items() if k != "timestamp"} for x in results]

    return strip(live["results"]) == strip(item["results"])


async def test_reports_of_others_and_foreign_fields_are_left_alone(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    """Kyverno's reports (another manager, another label) stay, even one labelled as ours; a
    label another manager set on our report stays; a report of our name and label that this
    run does not make (a leftover part) is deleted."""
    kyverno = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
               "metadata": {"name": "kyverno-abc", "namespace": "team-a",
                            "labels": {"app.kubernetes.io/managed-by": "kyverno"}},
               "results": [{"policy": "disallow-latest-tag", "result": "pass"}]}
    stray = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
             "metadata": {"name": "gpu-share-webhook-7", "namespace": "team-a",
                          "labels": {"app.kubernetes.io/managed-by": "gpu-share-webhook"}},
             "results": []}
    # Another tool's report that a tenant labelled as ours: not a name this tool gives, so
    # not this tool's to delete (the label alone would make it delete what the tenant may
    # only patch).
    disguised = copy.deepcopy(kyverno)
    disguised["metadata"]["name"] = "kyverno-def"
    disguised["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "gpu-share-webhook"}
    kube.add(kyverno, manager="kyverno")
    kube.add(disguised, manager="kyverno")
    kube.add(stray, manager="someone")
    run = await audit(capsys, kube, files, "-o", "policyreport", "--write-reports")
    assert run.code == 0, run.err
    assert "deleted: team-a/gpu-share-webhook-7" in run.out
    assert kube.object("wgpolicyk8s.io/v1alpha2", "PolicyReport", "kyverno-abc", "team-a")
    assert kube.object("wgpolicyk8s.io/v1alpha2", "PolicyReport", "kyverno-def", "team-a")
    ours = kube.object("wgpolicyk8s.io/v1alpha2", "PolicyReport", "gpu-share-webhook", "team-a")
    assert ours is not None
    ours["metadata"]["labels"]["team"] = "ml"
    kube.add(ours)
    again = await audit(capsys, kube, files, "-o", "policyreport", "--write-reports")
    assert "5 unchanged" in again.out
    label = kube.object("wgpolicyk8s.io/v1alpha2", "PolicyReport", "gpu-share-webhook",
                        "team-a")
    assert label is not None
    assert label["metadata"]["labels"]["team"] == "ml"


async def test_a_report_crd_not_installed_is_one_line(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    kube.unserve("openreports.io", "v1alpha1")
    run = await audit(capsys, kube, files, "-o", "openreports", "--write-reports")
    assert run.code == 3
    assert error_line(run) == (
        "error: list reports.openreports.io at the cluster scope: the reports.openreports.io"
        " CRD is not installed; install it (see docs/audit.md), or pick the other report API"
        " with -o"
    )
    assert kube.writes() == []


# Slow: two runs that apply and prune some 200 KB of reports (~2 s).
@pytest.mark.slow
async def test_a_namespace_too_large_for_one_report_is_written_in_parts_and_shrinks_back(
    capsys: pytest.CaptureFixture[str], aiohttp_server: Any, files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parts as tests/tools/test_audit_reports.py shows them at the real size; here at 40 KB a
    report (the size is the tool's constant, lowered so that the run stays short), written
    and pruned through the API."""
    monkeypatch.setattr(reporting, "REPORT_BYTES", 40_000)
    kube = kube_api.KubeAPI(validate=report_schemas.validate)
    kube.serve(kube_api.POLICY_REPORTS)
    kube.serve(kube_api.CLUSTER_POLICY_REPORTS)
    kube.serve_crd(*JOBSETS)
    kube.add({"apiVersion": "v1", "kind": "Namespace",
              "metadata": {"name": "big", "labels": dict(OPTED_IN)}})
    pod_spec = spec(container("batch", 1), restartPolicy="Never")
    for i in range(120):
        kube.add({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": f"job-{i:05d}-{'x' * 60}", "namespace": "big"},
                  "spec": pod_spec})
    await kube_api.serve(aiohttp_server, kube)
    run = await audit(capsys, kube, files, "-o", "policyreport", "--write-reports")
    assert run.code == 0, run.err
    parts = kube.objects("wgpolicyk8s.io/v1alpha2", "PolicyReport", "big")
    assert len(parts) >= 3
    assert {r["metadata"]["name"] for r in parts} == {
        "gpu-share-webhook", *(f"gpu-share-webhook-{i}" for i in range(2, len(parts) + 1))}
    # runtime-class, tolerations, node-selection, mps-limits and driver-capabilities, each pod.
    assert sum(len(r["results"]) for r in parts) == 120 * 5
    for i in range(110):
        kube.remove("v1", "Pod", f"job-{i:05d}-{'x' * 60}", "big")
    run = await audit(capsys, kube, files, "-o", "policyreport", "--write-reports")
    assert run.code == 0
    left = kube.objects("wgpolicyk8s.io/v1alpha2", "PolicyReport", "big")
    assert [r["metadata"]["name"] for r in left] == ["gpu-share-webhook"]
    assert len(left[0]["results"]) == 10 * 5


def test_what_is_listed_is_every_kind_the_audit_judges() -> None:
    listed = {(r.group, r.plural) for r in cluster_module.resources(kinds.all_kinds())}
    extra = {(k.group, k.resource) for k in kinds.load()}
    assert extra <= listed
    assert {("", "pods"), ("apps", "deployments"), ("resource.k8s.io", "resourceclaims")} <= listed



async def test_finished_pods_are_left_out_and_counted(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    """A Job's completed pods run nothing and hold no GPU: no advice to delete them."""
    for name, phase in (("done", "Succeeded"), ("crashed", "Failed"), ("waiting", "Pending")):
        kube.add({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": name, "namespace": "team-a"},
                  "spec": spec(container("c", 1, securityContext={"privileged": True})),
                  "status": {"phase": phase}})
    run = await audit(capsys, kube, files, "-o", "json", "--show", "all")
    assert "note: 2 finished pods (phase Succeeded or Failed) not audited: they run nothing and" \
           " hold no GPU" in run.err
    team_a = next(ns for ns in run.json()["namespaces"] if ns["name"] == "team-a")
    named = {m["name"] for o in team_a["objects"] for m in [o, *o["members"]]}
    assert "waiting" in named
    assert not {"done", "crashed"} & named


async def test_a_namespace_being_deleted_is_skipped_and_the_others_are_written(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    ns = kube.object("v1", "Namespace", "rollout")
    assert ns is not None
    ns["status"] = {"phase": "Terminating"}
    kube.add(ns)
    run = await audit(capsys, kube, files, "-o", "policyreport", "--write-reports")
    assert run.code == 0, run.err
    assert "4 created, 0 updated, 0 unchanged, 0 deleted, 1 skipped" in run.out
    assert "skipped: rollout/gpu-share-webhook (the namespace is being deleted)" in run.out
    written = {r["metadata"]["namespace"]
               for r in kube.objects("wgpolicyk8s.io/v1alpha2", "PolicyReport")}
    assert written == {"legacy", "team-a", "typo"}


async def test_a_tenant_s_emoji_and_escapes_reach_the_report_the_api_server_reads(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    """The client sends an apply body through json.dumps, which writes a character beyond
    the BMP as surrogate escapes (\\ud83d\\ude80) that the API server's YAML reader refuses
    (and the stand-in with it): a report holds none."""
    kube.add({"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "rocket", "namespace": "team-a",
                           "annotations": {names.ANNOTATION_PROFILE: "l\U0001f680rge\x1b[2J"}},
              "spec": spec(container("c", 1))})
    run = await audit(capsys, kube, files, "-o", "policyreport", "--write-reports")
    assert run.code == 0, run.err
    report = kube.object("wgpolicyk8s.io/v1alpha2", "PolicyReport", "gpu-share-webhook",
                         "team-a")
    assert report is not None
    (found,) = [r for r in report["results"]
                if r["resources"][0]["name"] == "rocket" and r.get("rule") == "profile"]
    assert "l\\U0001f680rge\\u001b[2J" in found["message"]


# --------------------------------------------------------------------------- odd answers


def odd_api(pages: Callable[[int], bytes]) -> Any:
    """An API server that answers every list with `pages(n)` (n: the request's number)."""
    count = {"n": 0}

    async def answer(request: web.Request) -> web.Response:
        count["n"] += 1
        return web.Response(body=pages(count["n"]), content_type="application/json")

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    return app


@pytest.mark.parametrize(("pages", "problem"), [
    (lambda n: b'{"metadata": {"continue": "again"}, "items": []}',
     "list namespaces at the cluster scope: the API server sent a continue token twice"),
    (lambda n: b'{"metadata": {"continue": 7}, "items": []}',
     "list namespaces at the cluster scope: the answer's continue token is not a string"),
    (lambda n: b'{"metadata": {}}',
     "list namespaces at the cluster scope: the answer is not a list (no items)"),
    (lambda n: b'{"metadata": {}, "items": {"a": 1}}',
     "list namespaces at the cluster scope: the answer is not a list (no items)"),
    (lambda n: b"<html>busy</html>",
     "list namespaces at the cluster scope: the answer is not JSON (Expecting value: line 1"
     " column 1 (char 0))"),
    (lambda n: b"[1, 2]", "list namespaces at the cluster scope: the answer is not a list"),
], ids=["token-again", "token-not-string", "no-items", "items-not-list", "not-json", "array"])
async def test_an_answer_that_is_no_list_is_one_line_and_exit_3(
    capsys: pytest.CaptureFixture[str], aiohttp_server: Any, files: dict[str, Path],
    pages: Callable[[int], bytes], problem: str,
) -> None:
    server = await aiohttp_server(odd_api(pages))
    kube = kube_api.KubeAPI()
    kube.url = f"http://{server.host}:{server.port}"
    run = await asyncio.wait_for(audit(capsys, kube, files), timeout=60)
    assert run.code == 3
    assert run.err == f"error: {problem}\n"


async def test_an_object_nested_deeper_than_orjson_reads_is_audited(
    capsys: pytest.CaptureFixture[str], aiohttp_server: Any, files: dict[str, Path]
) -> None:
    """A JobSet with a field nested 5,000 deep (the API server stores what its decoder
    takes) in a namespace that has not opted in: the audit reads it rather than failing."""
    deep = b'{"x":' * 5000 + b"1" + b"}" * 5000
    jobset = (b'{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":'
              b'{"name":"deep","namespace":"batch","uid":"u-deep"},"spec":{"extra":' + deep
              + b',"replicatedJobs":[]}}')
    namespaces = json.dumps({"kind": "NamespaceList", "apiVersion": "v1", "metadata": {},
                             "items": [{"metadata": {"name": "batch"}}]}).encode()

    async def answer(request: web.Request) -> web.Response:
        if request.path == "/api/v1/namespaces":
            body = namespaces
        elif request.path.endswith("/jobsets"):
            body = b'{"kind":"JobSetList","apiVersion":"jobset.x-k8s.io/v1alpha2",' \
                   b'"metadata":{},"items":[' + jobset + b"]}"
        else:
            body = b'{"metadata":{},"items":[]}'
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    server = await aiohttp_server(app)
    kube = kube_api.KubeAPI()
    kube.url = f"http://{server.host}:{server.port}"
    run = await audit(capsys, kube, files, "-o", "json", "--show", "all")
    assert run.code == 0, run.err
    (batch,) = run.json()["namespaces"]
    assert batch["counts"]["objects"] == 1


async def test_claim_parameters_orjson_refuses_do_not_stop_the_audit(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    """A claim's opaque parameters are kept as the tenant sent them (a RawExtension): a lone
    surrogate escape, which orjson refuses, in a namespace that never opted in and in one
    that did. The page is read the lenient way and the reports are written."""
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": "dra-team", "labels": {**OPTED_IN, names.POLICY_LABEL: "dra"}}}
    kube.add(ns)
    for namespace in ("batch", "dra-team"):
        kube.add({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                  "metadata": {"name": "nic", "namespace": namespace},
                  "spec": {"devices": {
                      "requests": [{"name": "nic", "exactly": {
                          "deviceClassName": "nic.example.com"}}],
                      "config": [{"opaque": {"driver": "nic.example.com",
                                             "parameters": {"iface": "eth\ud800"}}}]}}})
    run = await audit(capsys, kube, files, "-o", "policyreport", "--write-reports")
    assert run.code == 0, run.err
    report = kube.object("wgpolicyk8s.io/v1alpha2", "PolicyReport", "gpu-share-webhook",
                         "dra-team")
    assert report is not None
    assert [x["resources"][0]["name"] for x in report["results"]] == ["nic"]


async def test_objects_of_namespaces_never_reviewed_are_only_counted(
    kube: kube_api.KubeAPI,
) -> None:
    """What the webhook never sees is not held: its kind, name and uid only."""
    api_client = kube_api_client(kube)
    with api_client:
        found = await asyncio.to_thread(
            cluster_module.read, api_client, cluster_module.BUILTIN, page_size=3,
            reviewed=lambda namespaces: {"team-a"})
    pods_ = {o["metadata"]["name"]: o for o in found.objects if o["kind"] == "Pod"}
    assert set(pods_["privileged"]) == {"apiVersion", "kind", "metadata"}  # in batch
    assert set(pods_["privileged"]["metadata"]) == {"name", "namespace", "uid"}
    assert "spec" in pods_["notebook"]  # in team-a


def kube_api_client(kube: kube_api.KubeAPI) -> Any:
    return kubernetes.client.ApiClient(kube_api.client_configuration(kube))


async def test_a_report_of_our_name_is_ours_whoever_wrote_it(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    """A tenant allowed to write reports who made (or took over, unlabelled) the report
    `gpu-share-webhook` of their namespace, or the cluster's, before the audit: with a field
    of theirs, an apply without force would conflict every run and leave their `pass`
    standing. The name is the audit's: it applies with force and the findings are back."""
    forged = {"policy": "default", "result": "pass", "source": "gpu-share-webhook",
              "resources": [{"kind": "Pod", "name": "notebook", "namespace": "team-a"}]}
    theirs = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
              "metadata": {"name": "gpu-share-webhook", "namespace": "team-a"},
              "summary": {"pass": 1}, "results": [forged]}
    cluster_theirs = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "ClusterPolicyReport",
                      "metadata": {"name": "gpu-share-webhook"}, "results": []}
    kube.add(theirs, manager="tenant")
    kube.add(cluster_theirs, manager="tenant")
    for _ in range(2):
        run = await audit(capsys, kube, files, "-o", "policyreport", "--write-reports")
        assert run.code == 0, run.err
    report = kube.object("wgpolicyk8s.io/v1alpha2", "PolicyReport", "gpu-share-webhook",
                         "team-a")
    assert report is not None
    assert forged not in report["results"]
    notebook = [x for x in report["results"] if x["resources"][0]["name"] == "notebook"]
    assert [x["result"] for x in notebook] == ["fail"]
    top = kube.object("wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport", "gpu-share-webhook")
    assert top is not None
    assert top["results"]
    assert "0 created, 0 updated, 5 unchanged" in run.out


async def test_a_report_the_api_server_refuses_does_not_keep_the_others_unwritten(
    capsys: pytest.CaptureFixture[str], aiohttp_server: Any, files: dict[str, Path]
) -> None:
    kube = seeded()
    app = kube.app()

    @web.middleware
    async def refuse(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "PATCH" and "/namespaces/legacy/" in request.path:
            return web.json_response(
                {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422,
                 "reason": "Invalid", "message": "invalid for a reason of its own"},
                status=422)
        return await handler(request)

    app.middlewares.append(refuse)
    server = await aiohttp_server(app)
    kube.url = f"http://{server.host}:{server.port}"
    run = await audit(capsys, kube, files, "-o", "policyreport", "--write-reports")
    assert run.code == 3
    assert "4 created, 0 updated, 0 unchanged, 0 deleted, 1 failed" in run.out
    assert error_line(run) == (
        "error: apply policyreports.wgpolicyk8s.io legacy/gpu-share-webhook: 422 invalid for a"
        " reason of its own"
    )
    written = {r["metadata"].get("namespace")
               for r in kube.objects("wgpolicyk8s.io/v1alpha2", "PolicyReport")}
    assert written == {"rollout", "team-a", "typo"}


async def test_an_apply_answered_too_many_requests_is_tried_again(
    capsys: pytest.CaptureFixture[str], aiohttp_server: Any, files: dict[str, Path]
) -> None:
    kube = seeded()
    app = kube.app()
    refused: list[str] = []

    @web.middleware
    async def busy(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "PATCH" and len(refused) < 2:
            refused.append(request.path)
            return web.json_response(
                {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429,
                 "reason": "TooManyRequests", "message": "too many requests"},
                status=429, headers={"Retry-After": "0"})
        return await handler(request)

    app.middlewares.append(busy)
    server = await aiohttp_server(app)
    kube.url = f"http://{server.host}:{server.port}"
    run = await audit(capsys, kube, files, "-o", "policyreport", "--write-reports")
    assert run.code == 0, run.err
    assert len(refused) == 2
    assert "5 created" in run.out


@pytest.mark.parametrize(("depth", "kept"), [
    (5, True), (cluster_module.MAX_DEPTH - 3, True), (cluster_module.MAX_DEPTH - 2, False),
    (cluster_module.MAX_DEPTH + 300, False)])
def test_a_lenient_read_leaves_out_what_lies_deeper_than_max_depth(depth: int,
                                                                     kept: bool) -> None:
    """Strings with brackets, quotes and backslashes are not structure; what lies deeper
    than MAX_DEPTH becomes null (a tenant's 5,000-deep parameters are not a million lists)."""
    tricky = 'a"[{\\\\"]}'
    deep: Any = "bottom"
    for _ in range(depth):
        deep = [deep]
    page = {"items": [{"s": tricky, "deep": deep, "after": {"x": "]"}}]}
    text = json.dumps(page)
    read = json.loads(cluster_module._shallow(text))
    assert read["items"][0]["s"] == tricky
    assert read["items"][0]["after"] == {"x": "]"}
    inner = read["items"][0]["deep"]
    levels = 0
    while isinstance(inner, list):
        inner, levels = inner[0], levels + 1
    assert (inner == "bottom") is kept
    if not kept:
        assert inner is None
        assert levels == cluster_module.MAX_DEPTH - 3  # the page, the items, the item


def test_excluded_namespaces_are_names_and_their_list_is_trimmed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_AUDIT_EXCLUDE_NAMESPACES", "ci, sandbox ,")
    args = cli.build_parser().parse_args(["audit", "--cluster"])
    assert args.exclude_namespaces == ["ci", "sandbox"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(["audit", "--cluster", "--exclude-namespace", "Not_A_Name"])
    assert exit_.value.code == 2
    assert "--exclude-namespace: invalid value 'Not_A_Name'" in capsys.readouterr().err


async def test_a_page_of_large_objects_is_asked_for_again_with_fewer(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Deployments of many small env entries in a namespace never reviewed (each some
    20 times its JSON once read): the page is asked for again with fewer objects before it
    is read, so what is held at once stays near PAGE_BYTES of JSON (lowered here: 20 KB,
    objects of 9 KB)."""
    monkeypatch.setattr(cluster_module, "PAGE_BYTES", 20_000)
    env = [{"name": f"E{i}"} for i in range(900)]
    for i in range(6):
        kube.add({"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": f"big-{i}", "namespace": "batch"},
                  "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
                           "template": {"metadata": {"labels": {"a": "b"}},
                                        "spec": spec(container("c", env=env))}}})
    run = await audit(capsys, kube, files, "-o", "json", "--show", "all")
    assert run.code == 1
    limits = [int(r.query["limit"]) for r in lists(kube, "/apis/apps/v1/deployments")]
    assert limits[0] == 500
    assert min(limits) <= 2
    batch = next(ns for ns in run.json()["namespaces"] if ns["name"] == "batch")
    assert batch["counts"]["objects"] == 6 + 1  # and the dump's privileged pod


async def test_a_lone_surrogate_a_refusal_quotes_reaches_the_report_escaped(
    capsys: pytest.CaptureFixture[str], kube: kube_api.KubeAPI, files: dict[str, Path]
) -> None:
    """A GPU claim whose GpuConfig strategy holds a lone surrogate (parameters are kept as
    sent): rule dra-config quotes it; the report says `\\ud800` as text, which the API
    server's YAML reader takes (an escaped backslash, then "ud800"), and the next run writes
    nothing."""
    kube.add({"apiVersion": "v1", "kind": "Namespace",
              "metadata": {"name": "dra-team",
                           "labels": {**OPTED_IN, names.POLICY_LABEL: "dra"}}})
    kube.add({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
              "metadata": {"name": "gpu", "namespace": "dra-team"},
              "spec": {"devices": {
                  "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
                  "config": [{"requests": ["gpu"], "opaque": {
                      "driver": "gpu.nvidia.com",
                      "parameters": {"apiVersion": "resource.nvidia.com/v1beta1",
                                     "kind": "GpuConfig",
                                     "sharing": {"strategy": "MPS\ud800"}}}}]}}})
    for _ in range(2):
        run = await audit(capsys, kube, files, "-o", "policyreport", "--write-reports")
        assert run.code == 0, run.err
    assert "0 created, 0 updated, 6 unchanged" in run.out
    report = kube.object("wgpolicyk8s.io/v1alpha2", "PolicyReport", "gpu-share-webhook",
                         "dra-team")
    assert report is not None
    (found,) = [x for x in report["results"] if x.get("rule") == "dra-config"]
    assert '"MPS\\ud800"' in found["message"]
