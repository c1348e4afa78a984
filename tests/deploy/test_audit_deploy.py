"""The background audit as the Helm chart (audit.enabled) and the kustomize component
deploy/optional/audit install it: a CronJob that runs `gpu-share-webhook audit --cluster
--output=<api> --write-reports` with the server's image, policies and security contexts, as
an account of its own whose ClusterRole holds the least the command needs.

The chart is rendered by Helm's own engine (helm-python-sdk, tests/support/audit_deploy.py), the
component built with `kubectl kustomize` into an install as docs/install.md's site
kustomizations are, and every object checked by kubernetes-validate (strict) and checkov
(tests/deploy/test_checkov.py).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from tests.support import audit_deploy as ad
from tests.support import deploy_helpers as dh
from webhook import cli
from webhook.policy import kinds, names

POLICIES_PATH = "/etc/gpu-share-webhook/policies"
SERVER = ad.RELEASE  # the Deployment, its account and NetworkPolicy
CONTAINER = "audit"
AUDIT_KINDS = ["ClusterRole", "ClusterRoleBinding", "CronJob", "NetworkPolicy", "ServiceAccount"]

# The command of the brief (reports-brief.md, "CLI"): the cluster's objects, the reports of
# the chosen API written, with the server's policies and the webhook's namespace.
COMMAND = [
    "audit",
    "--cluster",
    "--output=policyreport",
    "--write-reports",
    f"--policies={POLICIES_PATH}",
    f"--webhook-namespace={ad.NAMESPACE}",
    "--page-size=500",
]

# The least RBAC of the brief ("RBAC the CronJob needs"), written out here rather than taken
# from the chart: list on what the audit reads, cluster-wide...
READS: dict[str, list[str]] = {
    "": ["namespaces", "pods", "replicationcontrollers"],
    "apps": ["deployments", "replicasets", "statefulsets", "daemonsets"],
    "batch": ["jobs", "cronjobs"],
    "resource.k8s.io": ["resourceclaims", "resourceclaimtemplates"],
}
# ... and on the chosen report API's two kinds, the
# verbs of server-side apply, of finding its own reports and of deleting those gone.
REPORT_RESOURCES = {
    "policyreport": ("wgpolicyk8s.io", ["policyreports", "clusterpolicyreports"]),
    "openreports": ("openreports.io", ["reports", "clusterreports"]),
}
REPORT_VERBS = ["list", "create", "patch", "delete"]
FORBIDDEN_VERBS = {"get", "watch", "update", "deletecollection", "escalate", "bind", "*"}


def _workload_kind_reads() -> dict[str, list[str]]:
    """Each kind of the WorkloadKinds file shipped in the image, by group: its resource."""
    out: dict[str, list[str]] = {}
    for kind in kinds.load(kinds.DEFAULT_FILE):
        out.setdefault(kind.group, []).append(kind.resource)
    return out


def least_rules(reports: str) -> list[dict[str, Any]]:
    """The ClusterRole's rules the brief asks for, in the chart's order."""
    rules = [
        {"apiGroups": [group], "resources": resources, "verbs": ["list"]}
        for group, resources in {**READS, **_workload_kind_reads()}.items()
    ]
    group, resources = REPORT_RESOURCES[reports]
    return [*rules, {"apiGroups": [group], "resources": resources, "verbs": REPORT_VERBS}]


def _audit(values: dict[str, Any] | None = None, **render: Any) -> list[dict[str, Any]]:
    return ad.audit_objects(ad.render(values or ad.audit_values(), **render))


def _cronjob(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(dh.find(objects, "CronJob"))


def _pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(_cronjob(objects)["spec"]["jobTemplate"]["spec"]["template"]["spec"])


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = _pod(objects)["containers"]
    assert c["name"] == CONTAINER
    return dict(c)


def _server_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(dh.find(objects, "Deployment", SERVER)["spec"]["template"]["spec"])


def _pod_labels(objects: list[dict[str, Any]]) -> dict[str, str]:
    return dict(_cronjob(objects)["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"])


# --------------------------------------------------------------------------- off and on


def test_the_audit_is_off_by_default() -> None:
    objects = ad.render()
    assert ad.audit_objects(objects) == []
    assert "CronJob" not in dh.kinds(objects)
    assert not [o for o in objects if o["metadata"]["name"].endswith("-audit")]
    # Off as written, too: the render is the default one, object for object.
    assert ad.render({"audit": {"enabled": False, "reports": "openreports"}}) == objects


@pytest.mark.parametrize("reports", ad.REPORTS)
def test_on_it_adds_the_audit_objects_and_changes_nothing_else(reports: str) -> None:
    objects = ad.render(ad.audit_values(reports))
    audit = ad.audit_objects(objects)
    assert dh.kinds(audit) == AUDIT_KINDS
    assert {o["metadata"]["name"] for o in audit} == {ad.NAME}
    assert [o for o in objects if o not in audit] == ad.render()
    for obj in audit:
        if obj["kind"] in dh.CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"]
        else:
            assert obj["metadata"]["namespace"] == ad.NAMESPACE


def test_without_network_policies_the_audit_has_none_either() -> None:
    audit = _audit({**ad.audit_values(), "networkPolicy": {"enabled": False}})
    assert dh.kinds(audit) == [k for k in AUDIT_KINDS if k != "NetworkPolicy"]


@pytest.mark.slow  # every object against two versions' schemas, three renders
@pytest.mark.parametrize("version", dh.VERSIONS)
def test_every_audit_object_validates_strictly(version: str) -> None:
    renders = [_audit(ad.audit_values(r)) for r in ad.REPORTS] + [_audit(ad.CUSTOM)]
    checked = 0
    for objects in renders:
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)
            checked += 1
    assert checked == 3 * len(AUDIT_KINDS)


# --------------------------------------------------------------------------- the command


def test_the_cronjob_runs_the_agreed_command() -> None:
    assert _container(_audit())["args"] == COMMAND


def test_the_webhook_namespace_is_the_releases() -> None:
    args = _container(_audit(release="gsw", namespace="gpu-share"))["args"]
    assert "--webhook-namespace=gpu-share" in args
    assert f"--webhook-namespace={ad.NAMESPACE}" not in args


@pytest.mark.parametrize("reports", ad.REPORTS)
def test_the_cli_reads_the_command_as_meant(reports: str) -> None:
    args = cli.build_parser().parse_args(_container(_audit(ad.audit_values(reports)))["args"])
    assert args.command == "audit"
    assert args.cluster is True
    assert args.output == reports
    assert args.write_reports is True
    assert args.policies == POLICIES_PATH
    assert args.webhook_namespace == ad.NAMESPACE
    assert args.page_size == 500
    # No kinds file of its own: the one shipped in the image, as the server reads it.
    assert args.workload_kinds is None
    assert args.exclude_namespaces == []


def test_the_namespaces_the_webhook_leaves_out_are_left_out_of_the_audit() -> None:
    values = {**ad.audit_values(), "webhook": {"excludedNamespaces": ["ci", "sandbox"]}}
    args = cli.build_parser().parse_args(_container(_audit(values))["args"])
    assert args.exclude_namespaces == ["ci", "sandbox"]


def test_the_audit_reads_the_policies_the_server_reads() -> None:
    """The same ConfigMap, mounted where the server's pods have it, which --policies names;
    the same image."""
    objects = ad.render(ad.audit_values())
    audit, server = _pod(objects), _server_pod(objects)
    (container,) = audit["containers"]
    (serving,) = server["containers"]
    volumes = {v["name"]: v for v in audit["volumes"]}
    server_volumes = {v["name"]: v for v in server["volumes"]}
    assert volumes["policies"] == server_volumes["policies"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    server_mounts = {m["name"]: m for m in serving["volumeMounts"]}
    assert mounts["policies"] == server_mounts["policies"]
    assert mounts["policies"]["readOnly"] is True
    env = {e["name"]: e.get("value") for e in serving["env"]}
    assert env["GPU_SHARE_WEBHOOK_POLICIES"] == mounts["policies"]["mountPath"] == POLICIES_PATH
    assert f"--policies={POLICIES_PATH}" in container["args"]
    # The server's ConfigMap of the policies, which the render holds.
    configmap = volumes["policies"]["configMap"]["name"]
    assert dh.find(objects, "ConfigMap", configmap)
    # Nothing else of the server's: no certificates, no state.
    assert set(volumes) == {"policies", "tmp"}
    for key in ("image", "imagePullPolicy"):
        assert container[key] == serving[key]


def test_the_audit_runs_as_restricted_as_the_server() -> None:
    objects = ad.render(ad.audit_values())
    audit, server = _pod(objects), _server_pod(objects)
    assert audit["securityContext"] == server["securityContext"]
    (container,) = audit["containers"]
    assert container["securityContext"] == server["containers"][0]["securityContext"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert audit["restartPolicy"] == "Never"


def test_only_the_audits_pods_get_a_token_and_only_its_account_is_bound() -> None:
    objects = ad.render(ad.audit_values())
    audit = _pod(objects)
    assert audit["serviceAccountName"] == ad.NAME
    assert audit["automountServiceAccountToken"] is True
    assert _server_pod(objects)["automountServiceAccountToken"] is False
    assert dh.find(objects, "ServiceAccount", SERVER)["automountServiceAccountToken"] is False
    binding = dh.find(objects, "ClusterRoleBinding", ad.NAME)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": ad.NAME,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": ad.NAME, "namespace": ad.NAMESPACE}
    ]
    for obj in objects:
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert SERVER not in {s["name"] for s in obj["subjects"]}


def test_the_cronjobs_defaults() -> None:
    cronjob = _cronjob(_audit())
    spec = cronjob["spec"]
    # Hourly, at a fixed minute other than :00.
    minute, *rest = spec["schedule"].split()
    assert rest == ["*", "*", "*", "*"]
    assert minute.isdigit()
    assert 0 < int(minute) < 60
    assert "timeZone" not in spec
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] == 600
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (1, 3)
    job = spec["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 2
    # A hung run ends before the next one is due.
    assert job["activeDeadlineSeconds"] < 3600
    assert "ttlSecondsAfterFinished" not in job
    # Exit 2 (usage, unloadable policies) is not retried; evictions are not counted.
    assert job["podFailurePolicy"]["rules"] == [
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": [2]},
        },
        {
            "action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        },
    ]
    # Requests and a memory limit; no CPU limit.
    assert _container(_audit())["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }


def test_the_values_reach_the_cronjob() -> None:
    objects = _audit(ad.CUSTOM)
    values = ad.CUSTOM["audit"]
    spec = _cronjob(objects)["spec"]
    for key in (
        "schedule",
        "timeZone",
        "concurrencyPolicy",
        "startingDeadlineSeconds",
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
    ):
        assert spec[key] == values[key], key
    job = spec["jobTemplate"]["spec"]
    for key in ("activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"):
        assert job[key] == values[key], key
    pod = _pod(objects)
    for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
        assert pod[key] == values[key], key
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    template = spec["jobTemplate"]["spec"]["template"]["metadata"]
    assert template["annotations"] == values["podAnnotations"]
    assert template["labels"]["team"] == "platform"
    container = _container(objects)
    assert container["image"] == "registry.example.com/gpu-share-webhook@sha256:" + "ab" * 32
    assert container["resources"] == values["resources"]
    assert container["args"] == [
        "audit",
        "--cluster",
        "--output=openreports",
        "--write-reports",
        f"--policies={POLICIES_PATH}",
        f"--webhook-namespace={ad.NAMESPACE}",
        "--page-size=100",
        "--some-option=1",
    ]


def test_a_cpu_limit_drops_the_checkov_skip_of_it() -> None:
    def skips(objects: list[dict[str, Any]]) -> list[str]:
        annotations = _cronjob(objects)["metadata"]["annotations"]
        return [v.split("=", 1)[0] for k, v in sorted(annotations.items())]

    assert skips(_audit()) == ["CKV_K8S_38", "CKV_K8S_11", "CKV_K8S_43", "CKV_K8S_15"]
    # ad.CUSTOM pins a digest and sets a CPU limit; its pull policy is still IfNotPresent.
    assert skips(_audit(ad.CUSTOM)) == ["CKV_K8S_38", "CKV_K8S_15"]


def test_the_longest_release_name_still_makes_a_cronjob_name() -> None:
    # A CronJob's name has at most 52 characters (its Jobs get 11 more, Jobs have 63).
    # Helm takes release names of up to 53 characters; the chart's names stop at 40.
    objects = _audit(release="r" * 53, namespace=ad.NAMESPACE)
    name = _cronjob(objects)["metadata"]["name"]
    assert name == "r" * 40 + "-audit"
    assert len(name) <= 52


# --------------------------------------------------------------------------- RBAC


@pytest.mark.parametrize("reports", ad.REPORTS)
def test_the_cluster_role_is_exactly_the_least_the_audit_needs(reports: str) -> None:
    rules = dh.find(_audit(ad.audit_values(reports)), "ClusterRole", ad.NAME)["rules"]
    assert rules == least_rules(reports)
    for rule in rules:
        assert not FORBIDDEN_VERBS & set(rule["verbs"]), rule
        assert "*" not in rule["apiGroups"] + rule["resources"], rule
        assert "secrets" not in rule["resources"]
        assert "resourceNames" not in rule
        assert "nonResourceURLs" not in rule
    writes = [r for r in rules if r["verbs"] != ["list"]]
    group, resources = REPORT_RESOURCES[reports]
    assert writes == [{"apiGroups": [group], "resources": resources, "verbs": REPORT_VERBS}]
    # Nothing of the other report API.
    (other,) = set(REPORT_RESOURCES) - {reports}
    assert REPORT_RESOURCES[other][0] not in {g for r in rules for g in r["apiGroups"]}


def test_the_reads_cover_every_kind_the_webhook_reviews() -> None:
    """Every built-in workload kind and every kind of the WorkloadKinds file (its group and
    resource), besides Namespaces, Pods and the DRA claims."""
    rules = ad.audit_cluster_role_rules()
    listed = {
        (g, r)
        for rule in rules
        if rule["verbs"] == ["list"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    wanted = {("", "namespaces"), ("", "pods")}
    wanted |= {(k.group, k.resource) for k in kinds.all_kinds(kinds.DEFAULT_FILE)}
    wanted |= {(names.DRA_GROUP, r) for r in names.CLAIM_RESOURCES}
    assert listed == wanted
    assert {(k.group, k.resource) for k in kinds.BUILTIN_KINDS} < listed


@pytest.mark.parametrize("reports", ad.REPORTS)
def test_the_support_function_returns_the_rendered_rules(reports: str) -> None:
    assert ad.audit_cluster_role_rules(reports) == least_rules(reports)
    with pytest.raises(ValueError, match="reports"):
        ad.audit_cluster_role_rules("foo")


def test_the_rules_grant_the_requests_the_brief_names() -> None:
    """As RBAC matches them: cluster-wide lists of each kind, server-side applies (PATCH) and
    creates of reports, deletes of reports by name; and nothing of the others."""
    roles = [(None, ad.audit_cluster_role_rules())]

    def granted(method: str, path: str) -> bool:
        return bool(dh.granting_rules(roles, dh.api_request(method, path)))

    for path in (
        "/api/v1/namespaces",
        "/api/v1/pods",
        "/apis/apps/v1/deployments",
        "/apis/batch/v1/cronjobs",
        "/apis/resource.k8s.io/v1/resourceclaimtemplates",
        "/apis/jobset.x-k8s.io/v1alpha2/jobsets",
        "/apis/wgpolicyk8s.io/v1alpha2/policyreports",
        "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports",
    ):
        assert granted("GET", path), path
    reports = "/apis/wgpolicyk8s.io/v1alpha2/namespaces/team-a/policyreports"
    cluster = "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports"
    for method, path in (
        ("PATCH", f"{reports}/gpu-share-webhook"),
        ("POST", reports),
        ("DELETE", f"{reports}/gpu-share-webhook-2"),
        ("PATCH", f"{cluster}/gpu-share-webhook"),
    ):
        assert granted(method, path), (method, path)
    for method, path in (
        ("GET", "/api/v1/namespaces/team-a/pods/p"),  # get
        ("PUT", f"{reports}/gpu-share-webhook"),  # update
        ("DELETE", reports),  # deletecollection
        ("GET", "/api/v1/secrets"),
        ("GET", "/api/v1/configmaps"),
        ("PATCH", "/apis/apps/v1/namespaces/team-a/deployments/d"),
        ("GET", "/apis/openreports.io/v1alpha1/reports"),
    ):
        assert not granted(method, path), (method, path)


# --------------------------------------------------------------------------- network


def test_no_network_policy_cuts_the_audit_off_from_the_api_server() -> None:
    """The server's NetworkPolicy closes all egress, but selects the server's pods only; the
    audit's own closes ingress only. Both installs."""
    for objects in (ad.render(ad.audit_values()), ad.kustomized("cert-manager")):
        labels = _pod_labels(objects)
        policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
        selecting = [p for p in policies if dh.selector_matches(p["spec"]["podSelector"], labels)]
        assert [p["metadata"]["name"] for p in selecting] == [ad.NAME]
        (own,) = selecting
        assert own["spec"]["policyTypes"] == ["Ingress"]
        assert own["spec"]["ingress"] == []
        server = dh.find(policies, "NetworkPolicy", SERVER)
        assert "Egress" in server["spec"]["policyTypes"]


# --------------------------------------------------------------------------- values refused


@pytest.mark.parametrize(
    ("audit", "message"),
    [
        ({"reports": "foo"}, "/audit/reports"),
        ({"schedule": 17}, "/audit/schedule"),
        ({"schedule": "every hour"}, "/audit/schedule"),
        ({"schedule": "0 * * *"}, "/audit/schedule"),
        # Kubernetes refuses a time zone in the schedule since 1.29: timeZone says it.
        ({"schedule": "CRON_TZ=UTC 0 * * * *"}, "/audit/schedule"),
        ({"timeZone": "Europe Berlin"}, "/audit/timeZone"),
        ({"concurrencyPolicy": "Allow"}, "/audit/concurrencyPolicy"),
        ({"startingDeadlineSeconds": 5}, "/audit/startingDeadlineSeconds"),
        ({"activeDeadlineSeconds": 0}, "/audit/activeDeadlineSeconds"),
        ({"backoffLimit": -1}, "/audit/backoffLimit"),
        ({"ttlSecondsAfterFinished": "1d"}, "/audit/ttlSecondsAfterFinished"),
        ({"successfulJobsHistoryLimit": -1}, "/audit/successfulJobsHistoryLimit"),
        ({"pageSize": 0}, "/audit/pageSize"),
        ({"pageSize": "500"}, "/audit/pageSize"),
        ({"enabled": "yes"}, "/audit/enabled"),
        ({"extraArgs": [5]}, "/audit/extraArgs/0"),
        ({"extraArgs": "--x"}, "/audit/extraArgs"),
        ({"resources": {"request": {}}}, "/audit/resources"),
        ({"nodeSelector": {"a": 1}}, "/audit/nodeSelector"),
        ({"schedules": "@daily"}, "additional properties 'schedules' not allowed"),
    ],
)
def test_the_schema_refuses_bad_audit_values(audit: dict[str, Any], message: str) -> None:
    assert message in _refused({"audit": {"enabled": True, **audit}})


@pytest.mark.parametrize(
    "arg",
    [
        "--output=json",
        "--output",
        "-o",
        "-ojson",
        "--page-size=10",
        "--policies=/tmp",
        "--webhook-namespace=other",
        "--cluster",
        "--write-reports",
        "-f",
        "--filename=dump.json",
    ],
)
def test_the_chart_refuses_extra_args_it_sets_itself(arg: str) -> None:
    message = _refused(ad.audit_values(extraArgs=[arg]))
    assert f"audit.extraArgs: {arg} is set by the chart" in message


def test_the_chart_takes_schedules_kubernetes_takes() -> None:
    for schedule in ("@hourly", "*/15 * * * *", "0 2 * * mon-fri", "5 0-23/6 1,15 * ?"):
        spec = _cronjob(_audit(ad.audit_values(schedule=schedule)))["spec"]
        assert spec["schedule"] == schedule


def _refused(values: Mapping[str, Any]) -> str:
    with helm_python.Chart.load(ad.CHART) as chart, pytest.raises(helm_python.HelmError) as caught:
        chart.render(dict(values), name=ad.RELEASE, namespace=ad.NAMESPACE)
    return str(caught.value)


# --------------------------------------------------------------------------- the chart itself


@pytest.mark.parametrize("values", [ad.audit_values(r) for r in ad.REPORTS] + [ad.CUSTOM])
def test_helm_lint_is_clean_with_the_audit(values: dict[str, Any]) -> None:
    report = helm_python.lint(ad.CHART, values, namespace=ad.NAMESPACE, strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("reports", ad.REPORTS)
def test_the_notes_show_how_to_run_it_and_read_the_reports(reports: str) -> None:
    with helm_python.Chart.load(ad.CHART) as chart:
        notes = chart.render(ad.audit_values(reports), name=ad.RELEASE, namespace=ad.NAMESPACE)
        default = chart.render({}, name=ad.RELEASE, namespace=ad.NAMESPACE)
    text = next(t for p, t in notes.items() if p.endswith("NOTES.txt"))
    group, (plural, cluster_plural) = REPORT_RESOURCES[reports]
    assert f"create job --from=cronjob/{ad.NAME}" in text
    label = "-l app.kubernetes.io/managed-by=gpu-share-webhook"
    assert f"kubectl get {plural}.{group} -A {label}" in text
    assert f"kubectl get {cluster_plural}.{group} {label}" in text
    # Offline, Helm knows no CRD: the warning shows.
    assert f"Helm did not find {group}/" in text
    assert "Background audit" not in next(t for p, t in default.items() if p.endswith("NOTES.txt"))


# --------------------------------------------------------------------------- kustomize


# What only a chart writes: Helm's labels, and checkov's skips (worded for each install).
CHART_ONLY_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
    }
)
_POLICIES_CONFIGMAP = re.compile(r"^(gpu-share-webhook-policies)-[0-9a-z]{10}$")


def _comparable(obj: Mapping[str, Any], policies_configmap: str) -> dict[str, Any]:
    """An audit object without what differs by installer alone: Helm's labels, checkov's
    skips (their wording), and the policies ConfigMap's name, whose hash each install makes
    its own way (checked to be the install's own ConfigMap first)."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items() if k not in CHART_ONLY_LABELS}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out: dict[str, Any] = walk(obj)
    out["metadata"].pop("annotations", None)
    if out["kind"] == "CronJob":
        pod = out["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "policies"]
        assert volume["configMap"]["name"] == policies_configmap
        volume["configMap"]["name"] = "gpu-share-webhook-policies"
    return out


def _policies_configmap(objects: list[dict[str, Any]]) -> str:
    (configmap,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and _POLICIES_CONFIGMAP.match(o["metadata"]["name"])
    ]
    return str(configmap["metadata"]["name"])


@pytest.mark.parametrize("overlay", dh.INSTALLS)
@pytest.mark.parametrize("reports", ad.REPORTS)
def test_the_component_installs_what_the_chart_installs(overlay: str, reports: str) -> None:
    """The audit objects of the kustomize component equal the chart's with default values
    (openreports/: with audit.reports=openreports), field for field: args, RBAC rules,
    security contexts, volumes and the rest."""
    built = ad.kustomized(overlay, openreports=reports == "openreports")
    rendered = ad.render(ad.audit_values(reports))
    theirs = {
        (o["kind"], o["metadata"]["name"]): _comparable(o, _policies_configmap(built))
        for o in ad.audit_objects(built)
    }
    ours = {
        (o["kind"], o["metadata"]["name"]): _comparable(o, _policies_configmap(rendered))
        for o in ad.audit_objects(rendered)
    }
    assert sorted(theirs) == sorted(ours)
    for key, want in ours.items():
        assert theirs[key] == want, f"{key[0]} {key[1]} differs from deploy/optional/audit"
    # The fields that matter, named once more.
    assert (
        _container(ad.audit_objects(built))["args"]
        == _container(ad.audit_objects(rendered))["args"]
    )
    assert dh.find(built, "ClusterRole", ad.NAME)["rules"] == least_rules(reports)


@pytest.mark.parametrize("overlay", dh.INSTALLS)
def test_the_component_adds_the_audit_and_changes_nothing_else(overlay: str) -> None:
    built = ad.kustomized(overlay)
    audit = ad.audit_objects(built)
    assert dh.kinds(audit) == AUDIT_KINDS
    assert [o for o in built if o not in audit] == dh.kustomize(dh.BUILDS[overlay])
    for obj in audit:
        if obj["kind"] in dh.CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"]
        else:
            assert obj["metadata"]["namespace"] == ad.NAMESPACE


def test_the_component_mounts_the_policies_of_the_sites_install(tmp_path: Path) -> None:
    """With the site-policies example (its own policies in place of the shipped ones), the
    audit mounts the site's ConfigMap, as the server does."""
    site = tmp_path / "deploy" / "examples" / "site-policies"
    for part in (dh.DEPLOY, dh.POLICIES):
        shutil.copytree(part, tmp_path / part.name)
    kustomization = yaml.safe_load((site / "kustomization.yaml").read_text())
    kustomization["components"] = ["../../optional/audit"]
    (site / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    objects = dh.kustomize(site)
    server = {v["name"]: v for v in _server_pod(objects)["volumes"]}
    audit = {v["name"]: v for v in _pod(objects)["volumes"]}
    assert audit["policies"] == server["policies"]
    assert dh.find(objects, "ConfigMap", audit["policies"]["configMap"]["name"])


def test_the_component_built_alone_stops_rather_than_mount_a_configmap_of_no_install() -> None:
    done = dh.run([dh.tool("kubectl"), *dh.KUSTOMIZE, str(ad.AUDIT)])
    assert done.returncode != 0
    assert "nothing selected by ConfigMap" in done.stderr
    assert "gpu-share-webhook-policies" in done.stderr


def test_the_openreports_component_refuses_to_patch_a_changed_rule(tmp_path: Path) -> None:
    """Its JSON patches test what they replace: a ClusterRole whose report rule moved stops
    the build rather than replace another rule."""
    copy = tmp_path / "audit"
    shutil.copytree(ad.AUDIT, copy)
    rbac = copy / "rbac.yaml"
    docs = list(yaml.safe_load_all(rbac.read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    role["rules"].insert(0, role["rules"].pop())
    rbac.write_text(yaml.safe_dump_all(docs))
    shutil.copytree(dh.DEPLOY / "overlays", tmp_path / "deploy" / "overlays")
    shutil.copytree(dh.DEPLOY / "base", tmp_path / "deploy" / "base")
    shutil.copytree(dh.POLICIES, tmp_path / "policies")
    site = tmp_path / "site"
    site.mkdir()
    (site / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../deploy/overlays/cert-manager"],
                "components": ["../audit", "../audit/openreports"],
            }
        )
    )
    done = dh.run([dh.tool("kubectl"), *dh.KUSTOMIZE, str(site)])
    assert done.returncode != 0
    assert "test failed" in done.stderr


@pytest.mark.slow  # every object against two versions' schemas
@pytest.mark.parametrize("version", dh.VERSIONS)
def test_every_component_object_validates_strictly(version: str) -> None:
    for openreports in (False, True):
        audit = ad.audit_objects(ad.kustomized("cert-manager", openreports=openreports))
        for obj in audit:
            kubernetes_validate.validate(obj, version, strict=True)
        assert len(audit) == len(AUDIT_KINDS)
