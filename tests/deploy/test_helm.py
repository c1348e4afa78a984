"""charts/gpu-share-webhook: the Helm chart, rendered by Helm's own engine (helm-python-sdk:
Helm v4 as a library, no binary), held to what deploy/ installs and to what
`gpu-share-webhook render` prints.

Each set of values is rendered once per module: the three certificate modes with the chart's
defaults, and a release with non-default values everywhere (another name and namespace, its
own policies, other switches, Ignore, extra excluded namespaces, monitoring on).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import importlib
import importlib.util
import io
import re
import shlex
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import helm_python
import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import deploy_helpers as dh
from tests.support import nodes
from webhook import __version__, cli, tools
from webhook.policy import names, policies, quantities
from webhook.policy import names as names_mod
from webhook.server import certificates
from webhook.tools import rendering

CHART = dh.REPO / "charts" / "gpu-share-webhook"
INSTALL_GUIDE = dh.REPO / "docs" / "install.md"

# `helm install gpu-share-webhook ... -n gpu-share-system` makes the names deploy/ uses.
RELEASE = "gpu-share-webhook"
NAMESPACE = "gpu-share-system"
# Another release, whose names are <release>-gpu-share-webhook.
OTHER_RELEASE = "gsw"
OTHER_NAMESPACE = "gpu-share"
OTHER_FULLNAME = "gsw-gpu-share-webhook"

# Kinds kubernetes-validate has no schema for (CRDs): checked by shape in their own tests.
CRD_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")
# Labels Helm charts add that deploy/ has no use for (one install per kustomize build).
CHART_ONLY_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
    }
)
STATE_DIR = "/var/run/gpu-share-webhook"
STATE_ENV = "GPU_SHARE_WEBHOOK_STATE_DIR"

# Two policies in one file, as a site might keep them: the second document's separator
# carries a comment, and team-a turns escape route 2 off.
TEAM_POLICIES = """\
# The teams' GPU nodes.
apiVersion: gpu-share.io/v1alpha1
kind: SharingPolicy
metadata:
  name: team-a
spec:
  nodeClasses:
    - {name: l4-mps, product: NVIDIA-L4, strategy: mps, replicas: 2, memoryMiB: 23034}
  profiles:
    half: {activeThreadPercentage: 50, pinnedMemoryMiB: 11517}
  defaultProfile: half
  rules:
    voidVisibleDevicesWithoutGpu: false
  hostAccess:
    trustPodSecurity: false
--- # MIG slices, shared by time
apiVersion: gpu-share.io/v1alpha1
kind: SharingPolicy
metadata:
  name: team-b
spec:
  sharedResources: [nvidia.com/mig-1g.10gb.shared]
  nodeClasses:
    - name: a100-mig
      resource: nvidia.com/mig-1g.10gb
      product: NVIDIA-A100-SXM4-80GB
      strategy: time-slicing
      replicas: 2
  rules:
    denyHostAccess: false
  # Claims of a class of its own too (listed before NVIDIA's, sorted after them), and of
  # NVIDIA's (listed again: once in the conditions).
  dra:
    deviceClasses:
      - {name: gpu.nvidia.com, allowed: true, sharing: [TimeSlicing]}
      - {name: a100.example.com, allowed: true}
"""
# One policy given as a mapping rather than a file's text; its dra section lists no class,
# so NVIDIA's are governed, closed.
SOLO_POLICY = {
    "apiVersion": "gpu-share.io/v1alpha1",
    "kind": "SharingPolicy",
    "metadata": {"name": "solo"},
    "spec": {
        "nodeClasses": [
            {"name": "t4", "product": "Tesla-T4", "strategy": "time-slicing", "replicas": 4}
        ],
        "dra": {},
    },
}
# Non-default switches for the shipped policies.
SWITCHES = {
    "voidVisibleDevicesWithoutGpu": False,
    "denyEnvFromOnGpuContainers": True,
    "denyCdiAnnotations": False,
}
EXCLUDED = ["monitoring", "gpu-operator"]
DIGEST = "sha256:" + "ab" * 32
CA_PEM = certificates.make_ca().cert_pem.decode("ascii")

CUSTOM_VALUES: dict[str, Any] = {
    "namespace": {"create": True},
    "listenAddress": "::",
    "image": {"repository": "registry.example.com/gpu-share-webhook", "digest": DIGEST},
    "replicas": 3,
    "resources": {
        "requests": {"cpu": "200m", "memory": "256Mi"},
        "limits": {"cpu": "2", "memory": "512Mi"},
    },
    "logLevel": "debug",
    "extraEnv": [{"name": "GPU_SHARE_WEBHOOK_WORKERS", "value": "2"}],
    "webhook": {"failurePolicy": "Ignore", "timeoutSeconds": 10, "excludedNamespaces": EXCLUDED},
    "policies": {
        "exclude": ["default.yaml"],
        "files": {"teams.yaml": TEAM_POLICIES, "solo.yaml": SOLO_POLICY},
        "rules": SWITCHES,
    },
    "certificates": {"bootstrap": {"days": 90}},
    "networkPolicy": {
        "metricsFrom": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "observability"}
                },
                "podSelector": {"matchLabels": {"app": "vmagent"}},
            },
            {"ipBlock": {"cidr": "10.0.0.0/16"}},
        ]
    },
    "monitoring": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "alertLabels": {"team": "gpu-platform"}},
    },
}

# name: (values, release, namespace)
RENDERS: dict[str, tuple[dict[str, Any], str, str]] = {
    "bootstrap": ({}, RELEASE, NAMESPACE),
    "certManager": ({"certificates": {"mode": "certManager"}}, RELEASE, NAMESPACE),
    "existingSecret": (
        {
            "certificates": {
                "mode": "existingSecret",
                "existingSecret": {"name": "site-webhook-tls", "caBundle": CA_PEM},
            }
        },
        RELEASE,
        NAMESPACE,
    ),
    "custom": (CUSTOM_VALUES, OTHER_RELEASE, OTHER_NAMESPACE),
}


# --------------------------------------------------------------------------- rendering


@pytest.fixture(scope="session")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded


def _render(
    chart: helm_python.Chart, values: Mapping[str, Any], release: str, namespace: str
) -> list[dict[str, Any]]:
    """The objects `helm install` would send, in template order."""
    manifests = chart.render(dict(values), name=release, namespace=namespace)
    return [
        doc
        for path in sorted(manifests)
        if path.endswith((".yaml", ".yml"))
        for doc in dh.load_all(manifests[path])
        if doc
    ]


@pytest.fixture(scope="module")
def rendered(chart: helm_python.Chart) -> dict[str, list[dict[str, Any]]]:
    return {name: _render(chart, *args) for name, args in RENDERS.items()}


def _refused(chart: helm_python.Chart, values: Mapping[str, Any]) -> str:
    """The message with which the chart refuses these values."""
    with pytest.raises(helm_python.HelmError) as caught:
        chart.render(dict(values), name=RELEASE, namespace=NAMESPACE)
    return str(caught.value)


def _sync_script() -> ModuleType:
    path = CHART / "hack" / "sync.py"
    spec = importlib.util.spec_from_file_location("chart_sync", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _configurations(objects: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(o) for o in objects if o["kind"].endswith("WebhookConfiguration")]


def _policy_set(objects: Sequence[Mapping[str, Any]]) -> policies.PolicySet:
    """The policies the server loads from the rendered ConfigMap, every file valid."""
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
    files = [policies.FileLoad.of(text, name) for name, text in configmap["data"].items()]
    loaded, problems = policies.assemble(files)
    assert problems == []
    return loaded


def _server(objects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    return dict(deployment)


def _pod(objects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return dict(_server(objects)["spec"]["template"]["spec"])


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


# --------------------------------------------------------------------------- the chart itself


@pytest.mark.parametrize("name", list(RENDERS))
def test_helm_lint_is_clean(name: str) -> None:
    values, _, namespace = RENDERS[name]
    report = helm_python.lint(CHART, dict(values), namespace=namespace, strict=True)
    assert report["errors"] == []
    # Severity 1 is information ("icon is recommended"); 2 warnings, 3 errors.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_the_chart_is_the_packages_release(chart: helm_python.Chart) -> None:
    assert chart.metadata["appVersion"] == __version__
    assert chart.metadata["kubeVersion"] == ">=1.30.0-0"
    # The script that needs the repository stays out of the packaged chart.
    assert not [f["name"] for f in chart.files if f["name"].startswith("hack/")]


def test_the_generated_file_and_the_policy_copies_are_current() -> None:
    """files/generated.yaml is what hack/sync.py makes from webhook/ now, and the chart's
    policies/ is the repository's policies/, file for file."""
    stale = _sync_script().stale()
    assert stale == [], (
        f"stale chart files {stale}: run `python charts/gpu-share-webhook/hack/sync.py`"
    )
    copies = sorted(p.name for p in (CHART / "policies").iterdir())
    assert copies == [p.name for p in policies.policy_files(dh.POLICIES)]
    for name in copies:
        assert (CHART / "policies" / name).read_bytes() == (dh.POLICIES / name).read_bytes()


def test_the_switch_values_are_the_policies_defaults(chart: helm_python.Chart) -> None:
    assert chart.values["policies"]["rules"] == policies.RulesSpec().model_dump(by_alias=True)


def test_the_log_settings_the_schema_allows_are_the_servers(chart: helm_python.Chart) -> None:
    assert chart.schema is not None
    for value, option in (("logLevel", "--log-level"), ("logFormat", "--log-format")):
        allowed = chart.schema["properties"][value]["enum"]
        assert chart.values[value] in allowed
        for choice in allowed:
            args = vars(cli.build_parser().parse_args(["serve", option, choice]))
            assert args[option[2:].replace("-", "_")] == choice


# --------------------------------------------------------------------------- every object


@pytest.mark.slow  # every object against two versions' schemas
@pytest.mark.parametrize("version", dh.VERSIONS)
@pytest.mark.parametrize("name", list(RENDERS))
def test_every_rendered_object_validates_strictly(
    rendered: dict[str, list[dict[str, Any]]], name: str, version: str
) -> None:
    checked = 0
    for obj in rendered[name]:
        if obj["apiVersion"].startswith(CRD_GROUPS):
            continue
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 8  # the server's objects at least


@pytest.mark.parametrize("name", list(RENDERS))
def test_namespaced_objects_live_in_the_release_namespace(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    namespace = RENDERS[name][2]
    for obj in rendered[name]:
        if obj["kind"] in dh.CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], obj["kind"]
        else:
            assert obj["metadata"]["namespace"] == namespace, obj["kind"]


def test_each_mode_installs_its_parts(rendered: dict[str, list[dict[str, Any]]]) -> None:
    base = {
        "ServiceAccount",
        "ConfigMap",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
    bootstrap = base | dh.RBAC_KINDS | dh.SECRET_POLICY_KINDS | {"Job"}
    assert set(dh.kinds(rendered["bootstrap"])) == bootstrap
    assert set(dh.kinds(rendered["certManager"])) == base | {"Issuer", "Certificate"}
    assert set(dh.kinds(rendered["existingSecret"])) == base
    assert set(dh.kinds(rendered["custom"])) == bootstrap | {
        "Namespace",
        "ServiceMonitor",
        "PrometheusRule",
    }


# --------------------------------------------------------------------------- deploy/


def _as_deploy_writes_it(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object with what only a chart has taken out: Helm's labels, annotations (checkov's
    skips, worded for each; the cert-manager one is compared with render's), the hash of the
    policies ConfigMap's name and the revision of the Job's name."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items() if k not in CHART_ONLY_LABELS}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, str):
            return re.sub(r"^(gpu-share-webhook-policies)-[0-9a-z]{10}$", r"\1", node)
        return node

    out: dict[str, Any] = walk(obj)
    out["metadata"].pop("annotations", None)
    if out["kind"] == "Job":
        out["metadata"]["name"] = re.sub(r"-[0-9]+$", "", out["metadata"]["name"])
    return out


@pytest.mark.parametrize(
    ("overlay", "mode"), [("bootstrap", "bootstrap"), ("cert-manager", "certManager")]
)
def test_the_chart_installs_what_deploy_installs(
    chart: helm_python.Chart, overlay: str, mode: str
) -> None:
    """With the release and namespace deploy/ uses, every object of the kustomize overlay
    comes out of the chart equal, and nothing else does."""
    values = {"namespace": {"create": True}, "certificates": {"mode": mode}}
    ours = {
        (o["kind"], o["metadata"]["name"]): o
        for o in map(_as_deploy_writes_it, _render(chart, values, RELEASE, NAMESPACE))
    }
    theirs = {
        (o["kind"], o["metadata"]["name"]): o
        for o in map(_as_deploy_writes_it, dh.kustomize(dh.BUILDS[overlay]))
    }
    assert sorted(ours) == sorted(theirs)
    for key, want in theirs.items():
        assert ours[key] == want, f"{key[0]} {key[1]} differs from deploy/overlays/{overlay}"


def test_the_server_keeps_its_last_good_policies_in_a_state_volume(
    rendered: dict[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for objects in rendered.values():
        pod = _pod(objects)
        (container,) = pod["containers"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "state"]
        assert volume == {"name": "state", "emptyDir": {"sizeLimit": "16Mi"}}
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "state"]
        assert mount == {"name": "state", "mountPath": STATE_DIR}
        assert _env(container)[STATE_ENV] == STATE_DIR
    monkeypatch.setenv(STATE_ENV, STATE_DIR)
    assert cli.build_parser().parse_args(["serve"]).state_dir == STATE_DIR


@pytest.mark.parametrize("name", list(RENDERS))
def test_serve_reads_what_the_deployment_mounts(
    rendered: dict[str, list[dict[str, Any]]], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = rendered[name]
    pod = _pod(objects)
    (c,) = pod["containers"]
    for key, value in _env(c).items():
        monkeypatch.setenv(key, value)
    args = cli.build_parser().parse_args(c["args"])
    assert args.command == "serve"
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
    policies_volume = volumes[mounts[args.policies]["name"]]
    assert policies_volume["configMap"]["name"] == configmap["metadata"]["name"]
    secret = volumes[mounts[args.cert_dir]["name"]]["secret"]["secretName"]
    assert secret == _serving_secret(objects)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert (args.port, args.metrics_port) == (ports["https"], ports["metrics"])
    # The server alone listens on 127.0.0.1, which neither the Service nor the kubelet's
    # probes reach: the chart sets every address (or the values' listenAddress).
    assert args.host == (CUSTOM_VALUES["listenAddress"] if name == "custom" else "0.0.0.0")
    writable = {p for p, m in mounts.items() if not m.get("readOnly")}
    assert writable == {"/tmp", STATE_DIR}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True


def _serving_secret(objects: Sequence[Mapping[str, Any]]) -> str:
    """The Secret each mode fills: the Job's --secret, the Certificate's, or the user's."""
    for obj in objects:
        if obj["kind"] == "Job":
            (c,) = obj["spec"]["template"]["spec"]["containers"]
            return str(cli.build_parser().parse_args(c["args"]).secret)
        if obj["kind"] == "Certificate" and not obj["spec"].get("isCA"):
            return str(obj["spec"]["secretName"])
    return "site-webhook-tls"


# --------------------------------------------------------------------------- the configurations


def _expected_configurations(
    objects: Sequence[Mapping[str, Any]], values: Mapping[str, Any], fullname: str, namespace: str
) -> list[dict[str, Any]]:
    """What `gpu-share-webhook render` prints for the policies of the rendered ConfigMap, with
    the options matching these values, plus the excluded namespaces `render` has no option
    for (the chart adds them to the same NotIn list)."""
    webhook = values.get("webhook", {})
    certs = values.get("certificates", {})
    mode = certs.get("mode", "bootstrap")
    expected = rendering.render(
        _policy_set(objects),
        service=fullname,
        namespace=namespace,
        name=fullname,
        failure_policy=webhook.get("failurePolicy", "Fail"),
        timeout_seconds=webhook.get("timeoutSeconds", rendering.DEFAULT_TIMEOUT_SECONDS),
        ca_bundle=(
            certs["existingSecret"]["caBundle"].encode() if mode == "existingSecret" else None
        ),
        cert_manager_certificate=f"{namespace}/{fullname}" if mode == "certManager" else None,
    )
    for config in expected:
        for entry in config["webhooks"]:
            for requirement in entry["namespaceSelector"]["matchExpressions"]:
                if requirement["key"] == names.NAME_LABEL:
                    extra = webhook.get("excludedNamespaces", [])
                    requirement["values"] = sorted({*requirement["values"], *extra})
    return expected


@pytest.mark.parametrize("name", list(RENDERS))
def test_the_configurations_are_what_render_prints_for_the_same_policies(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    values, release, namespace = RENDERS[name]
    fullname = RELEASE if release == RELEASE else OTHER_FULLNAME
    expected = _expected_configurations(rendered[name], values, fullname, namespace)
    got = _configurations(rendered[name])
    assert [c["kind"] for c in got] == [c["kind"] for c in expected]
    for want, have in zip(expected, got, strict=True):
        kind = want["kind"]
        assert have["metadata"]["name"] == want["metadata"]["name"]
        assert have["metadata"].get("annotations") == want["metadata"].get("annotations")
        assert want["metadata"]["labels"].items() <= have["metadata"]["labels"].items()
        assert [e["name"] for e in have["webhooks"]] == [e["name"] for e in want["webhooks"]]
        for w, h in zip(want["webhooks"], have["webhooks"], strict=True):
            assert sorted(h) == sorted(w), f"{kind} {w['name']}: fields"
            for field in w:
                assert h[field] == w[field], f"{kind} {w['name']}: {field}"


def test_the_default_configurations_are_deploys(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """...and so, with the shipped policies, the ones committed in deploy/."""
    committed = dh.load_yaml(dh.COMMITTED_CONFIGURATIONS)
    for want, have in zip(committed, _configurations(rendered["bootstrap"]), strict=True):
        assert have["webhooks"] == want["webhooks"]


def test_switches_and_own_policies_change_the_entries_as_render_does(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    mutating, validating = _configurations(rendered["custom"])
    every, rules = rendering.CONDITION_EVERY_POD, rendering.CONDITION_RULES
    for config in (mutating, validating):
        conditions = {e["name"]: e["matchConditions"][1]["name"] for e in dh.pod_entries(config)}
        assert conditions == {
            # No default policy: its entry takes every pod, as for a policy not in force.
            "default.gpu-share.io": every,
            "default.baseline.gpu-share.io": every,
            # The switch turned off in the shipped file, and in an own file.
            "not-renamed.policies.gpu-share.io": rules,
            "not-renamed.baseline.policies.gpu-share.io": rules,
            "dra.policies.gpu-share.io": rules,
            "dra.baseline.policies.gpu-share.io": rules,
            "team-a.policies.gpu-share.io": rules,
            "team-a.baseline.policies.gpu-share.io": rules,
            "team-b.policies.gpu-share.io": every,
            "team-b.baseline.policies.gpu-share.io": every,
            "solo.policies.gpu-share.io": every,
            "solo.baseline.policies.gpu-share.io": every,
            "unknown-policy.gpu-share.io": every,
            "unknown-policy.baseline.gpu-share.io": every,
        }
        by_name = {e["name"]: e["matchConditions"][1]["expression"] for e in dh.pod_entries(config)}
        # Host access (route 9): sent where the webhook stands in for Pod Security baseline;
        # team-a trusts no Pod Security label, team-b leaves host access alone.
        for name, host_access in (
            ("solo.policies.gpu-share.io", True),
            ("solo.baseline.policies.gpu-share.io", False),
            ("team-a.baseline.policies.gpu-share.io", True),
            ("team-b.policies.gpu-share.io", False),
            ("unknown-policy.gpu-share.io", True),
            ("unknown-policy.baseline.gpu-share.io", False),
        ):
            assert ("t.spec.hostNetwork" in by_name[name]) is host_access, name
        # CDI annotation updates (route 8): never for the shipped policies, which the values
        # let leave them be.
        for name, expression in by_name.items():
            reads_updates = "oldObject" in expression
            assert reads_updates is (not name.startswith(("not-renamed.", "dra."))), name
        # Claims: of the GPU classes, NVIDIA's and every class any policy lists (team-b's
        # a100 too where the policy lists none), sorted and once each, to every entry: judged
        # where the policy has a dra section, refused where it has none or none is in force.
        gpu = sorted(["a100.example.com", *names_mod.DRA_NVIDIA_CLASSES])
        claims = {
            "team-b": gpu,
            "solo": gpu,
            "dra": gpu,
            "team-a": gpu,
            "not-renamed": gpu,
            "default": gpu,
            "unknown-policy": gpu,
        }
        for name, expression in by_name.items():
            assert _claim_classes(expression) == claims[name.split(".")[0]], name
        for entry in config["webhooks"]:
            assert entry["failurePolicy"] == "Ignore"
            assert entry["timeoutSeconds"] == 10
            (names,) = [
                r["values"]
                for r in entry["namespaceSelector"]["matchExpressions"]
                if r["key"] == "kubernetes.io/metadata.name"
            ]
            assert names == sorted(["kube-system", OTHER_NAMESPACE, *EXCLUDED])
            assert entry["clientConfig"]["service"]["name"] == OTHER_FULLNAME
            assert entry["clientConfig"]["service"]["namespace"] == OTHER_NAMESPACE


def _claim_classes(expression: str) -> list[str] | None:
    """The device classes whose claims a condition sends; None when it sends none."""
    claim, _ = expression.split(") : (", 1)
    if claim == "(request.kind.group == 'resource.k8s.io') ? (\n  false\n":
        return None
    lists = re.findall(r"deviceClassName in \[(.*?)\]", claim)
    assert len(lists) == 2
    assert lists[0] == lists[1]
    return [c.strip("'") for c in lists[0].split(", ")]


def test_the_ca_bundle_of_an_existing_secret_is_in_every_entry(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    want = base64.b64encode(CA_PEM.encode()).decode()
    for config in _configurations(rendered["existingSecret"]):
        assert {e["clientConfig"]["caBundle"] for e in config["webhooks"]} == {want}
    for name in ("bootstrap", "certManager"):
        for config in _configurations(rendered[name]):
            assert all("caBundle" not in e["clientConfig"] for e in config["webhooks"])


# --------------------------------------------------------------------------- policies


def _policy_files(objects: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
    return dict(configmap["data"])


def test_the_default_policies_are_the_files_of_policies(
    rendered: dict[str, list[dict[str, Any]]], shipped_policies: policies.PolicySet
) -> None:
    files = {p.name: p.read_text(encoding="utf-8") for p in policies.policy_files(dh.POLICIES)}
    for name in ("bootstrap", "certManager", "existingSecret"):
        assert _policy_files(rendered[name]) == files
        assert _policy_set(rendered[name]).names == shipped_policies.names


def test_switch_values_rewrite_the_shipped_policies_and_leave_own_files_alone(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    files = _policy_files(rendered["custom"])
    assert sorted(files) == ["dra.yaml", "not-renamed.yaml", "solo.yaml", "teams.yaml"]
    assert files["teams.yaml"] == TEAM_POLICIES
    assert yaml.safe_load(files["solo.yaml"]) == SOLO_POLICY
    # The shipped files: everything as in policies/, but the switches of the values.
    for shipped in ("not-renamed.yaml", "dra.yaml"):
        (original,) = dh.load_yaml(dh.POLICIES / shipped)
        (rewritten,) = yaml.safe_load_all(files[shipped])
        rules = rewritten["spec"].pop("rules")
        original["spec"].pop("rules", None)
        assert rewritten == original
        assert rules == {**policies.RulesSpec().model_dump(by_alias=True), **SWITCHES}
    loaded = _policy_set(rendered["custom"])
    assert loaded.names == ["dra", "not-renamed", "solo", "team-a", "team-b"]
    switches = loaded.policies["not-renamed"].rules
    assert switches.void_visible_devices_without_gpu is False
    assert switches.deny_env_from_on_gpu_containers is True


def test_a_policy_change_renames_the_configmap_the_deployment_mounts(
    chart: helm_python.Chart, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    changed = _render(chart, {"policies": {"rules": {"denyPrivileged": False}}}, RELEASE, NAMESPACE)
    before, after = (
        next(o for o in objects if o["kind"] == "ConfigMap")["metadata"]["name"]
        for objects in (rendered["bootstrap"], changed)
    )
    assert before != after
    mounted = [v["configMap"]["name"] for v in _pod(changed)["volumes"] if "configMap" in v]
    assert mounted == [after]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"policies": {"files": {"x.yaml": SOLO_POLICY, "y.yaml": SOLO_POLICY}}},
            'policy "solo" is already defined in x.yaml',
        ),
        (
            {"policies": {"files": {"x.yaml": {**SOLO_POLICY, "kind": "Pod"}}}},
            "every document must be apiVersion: gpu-share.io/v1alpha1, kind: SharingPolicy",
        ),
        ({"policies": {"files": {"x.yaml": "apiVersion: [\n"}}}, "x.yaml: not valid YAML"),
        ({"policies": {"files": {"x.json": SOLO_POLICY}}}, "not a name the server reads"),
        ({"policies": {"shipped": False}}, "no policy files"),
        (
            {"policies": {"exclude": ["defaults.yaml"]}},
            'the chart ships no policy file "defaults.yaml"',
        ),
    ],
)
def test_policy_values_the_chart_refuses(
    chart: helm_python.Chart, values: dict[str, Any], message: str
) -> None:
    assert message in _refused(chart, values)


def test_a_file_of_the_same_name_replaces_a_shipped_one(chart: helm_python.Chart) -> None:
    own = {**SOLO_POLICY, "metadata": {"name": "default"}}
    objects = _render(chart, {"policies": {"files": {"default.yaml": own}}}, RELEASE, NAMESPACE)
    assert yaml.safe_load(_policy_files(objects)["default.yaml"]) == own
    assert _policy_set(objects).names == ["default", "dra", "not-renamed"]


# --------------------------------------------------------------------------- checking policy files

# A valid policy that sets every field the checks read, for the table to break one at a time.
SITE_POLICY: dict[str, Any] = {
    "apiVersion": "gpu-share.io/v1alpha1",
    "kind": "SharingPolicy",
    "metadata": {"name": "site"},
    "spec": {
        "mode": "enforce",
        "ruleModes": {"privileged": "warn"},
        "sharedResources": ["nvidia.com/gpu.shared", "nvidia.com/gpu"],
        "runtimeClassName": "nvidia",
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "example.com/dedicated",
                "value": "gpu",
                "effect": "NoExecute",
                "tolerationSeconds": 60,
            },
        ],
        "nodeClasses": [
            {
                "name": "l4-mps",
                "product": "NVIDIA-L4",
                "strategy": "mps",
                "replicas": 2,
                "memoryMiB": 23034,
            },
            {
                "name": "t4",
                "product": "Tesla-T4",
                "strategy": "time-slicing",
                "renamed": False,
                "replicas": 4,
                "gpusPerNode": 2,
            },
        ],
        "profiles": {"half": {"activeThreadPercentage": 50, "pinnedMemoryMiB": 11517}},
        "defaultProfile": "half",
        "hostAccess": {
            "allowedHostPaths": [{"pathPrefix": "/models"}],
            "deniedHostPaths": ["/opt/gpu-runtime"],
        },
        "rules": {"denyEnvFromOnGpuContainers": True},
        "dra": {
            "deviceClasses": [
                {
                    "name": "gpu.nvidia.com",
                    "allowed": True,
                    "maxDevicesPerRequest": 2,
                    "sharing": ["MPS", "TimeSlicing"],
                    "mps": {"maxActiveThreadPercentage": 50, "maxPinnedMemoryMiB": 8192},
                    "capacity": {"memory": "8Gi"},
                },
                {"name": "vfio.gpu.nvidia.com", "allowed": True},
                {
                    "name": "a100.example.com",
                    "driver": "gpu.example.com",
                    "configKind": "GpuConfig",
                    "sharing": ["TimeSlicing"],
                    "capacity": {"gpu.example.com/memory": "40Gi"},
                },
            ]
        },
    },
}
DELETE = object()
RENAME = object()


def _broken(*edits: tuple[tuple[str | int, ...], Any]) -> dict[str, Any]:
    """SITE_POLICY with each (path, value) set; DELETE removes the key, (RENAME, new) renames
    it."""
    doc: dict[str, Any] = copy.deepcopy(SITE_POLICY)
    for path, value in edits:
        *parents, last = path
        node: Any = doc
        for key in parents:
            node = node[key]
        if value is DELETE:
            del node[last]
        elif isinstance(value, tuple) and value[0] is RENAME:
            node[value[1]] = node.pop(last)
        else:
            node[last] = value
    return doc


CLASS0 = ("spec", "nodeClasses", 0)
CLASS1 = ("spec", "nodeClasses", 1)
TOLERATION0 = ("spec", "tolerations", 0)
HALF = ("spec", "profiles", "half")
DRA0 = ("spec", "dra", "deviceClasses", 0)
DRA1 = ("spec", "dra", "deviceClasses", 1)
DRA2 = ("spec", "dra", "deviceClasses", 2)

# id: (the policy, the fields both name). Every kind of problem the schema of the policy models
# says (files/policy-schema.yaml), which the chart finds where `policy check` does.
SCHEMA_PROBLEMS: dict[str, tuple[dict[str, Any], set[str]]] = {
    # Unknown fields: a typo is never ignored.
    "typo-in-a-class": (
        _broken(((*CLASS0, "strategy"), (RENAME, "stratgy"))),
        {"spec.nodeClasses[0].stratgy", "spec.nodeClasses[0].strategy"},
    ),
    "unknown-spec-field": (_broken((("spec", "mod"), "warn")), {"spec.mod"}),
    "unknown-top-field": (_broken((("specs",), {})), {"specs"}),
    "unknown-rule-switch": (
        _broken((("spec", "rules", "denyEverything"), True)),
        {"spec.rules.denyEverything"},
    ),
    # Values not among those allowed.
    "mode-enforced": (_broken((("spec", "mode"), "enforced")), {"spec.mode"}),
    "strategy": (_broken(((*CLASS0, "strategy"), "MPS")), {"spec.nodeClasses[0].strategy"}),
    "operator": (_broken(((*TOLERATION0, "operator"), "exists")), {"spec.tolerations[0].operator"}),
    "effect": (_broken(((*TOLERATION0, "effect"), "NoExec")), {"spec.tolerations[0].effect"}),
    "rule-mode": (
        _broken((("spec", "ruleModes", "privileged"), "block")),
        {"spec.ruleModes.privileged"},
    ),
    "unknown-rule": (
        _broken((("spec", "ruleModes", "no-such-rule"), "warn")),
        {"spec.ruleModes.no-such-rule.[key]"},
    ),
    "api-version": (_broken((("apiVersion",), "gpu-share.io/v1")), {"apiVersion"}),
    "kind": (_broken((("kind",), "Pod")), {"kind"}),
    "capability": (
        _broken((("spec", "driverCapabilities"), ["compute", "all"])),
        {"spec.driverCapabilities[1]"},
    ),
    # Types.
    "integer-as-word": (_broken(((*CLASS0, "replicas"), "two")), {"spec.nodeClasses[0].replicas"}),
    "integer-with-fraction": (
        _broken(((*CLASS0, "memoryMiB"), 1.5)),
        {"spec.nodeClasses[0].memoryMiB"},
    ),
    "boolean-as-word": (_broken(((*CLASS1, "renamed"), "maybe")), {"spec.nodeClasses[1].renamed"}),
    "boolean-as-number": (
        _broken((("spec", "hostAccess", "trustPodSecurity"), 2)),
        {"spec.hostAccess.trustPodSecurity"},
    ),
    "mapping-for-a-list": (
        _broken((("spec", "tolerations"), {"key": "nvidia.com/gpu"})),
        {"spec.tolerations"},
    ),
    "list-for-a-mapping": (_broken((("spec", "hostAccess"), [])), {"spec.hostAccess"}),
    "list-for-a-string": (
        _broken(((*CLASS0, "product"), ["NVIDIA-L4"])),
        {"spec.nodeClasses[0].product"},
    ),
    "null": (_broken((("spec", "mode"), None)), {"spec.mode"}),
    "spec-is-a-string": (_broken((("spec",), "default")), {"spec"}),
    # Required fields.
    "no-strategy": (_broken(((*CLASS0, "strategy"), DELETE)), {"spec.nodeClasses[0].strategy"}),
    "no-spec": (_broken((("spec",), DELETE)), {"spec"}),
    "no-name": (_broken((("metadata", "name"), DELETE)), {"metadata.name"}),
    # Patterns, lengths, bounds.
    "resource-name": (
        _broken((("spec", "sharedResources", 0), "amd.com/gpu")),
        {"spec.sharedResources[0]"},
    ),
    "runtime-class": (
        _broken((("spec", "runtimeClassName"), "Nvidia_Runtime")),
        {"spec.runtimeClassName"},
    ),
    "policy-name": (_broken((("metadata", "name"), "Site")), {"metadata.name"}),
    "long-policy-name": (_broken((("metadata", "name"), "s" * 64)), {"metadata.name"}),
    "profile-name": (
        _broken((("spec", "profiles", "half"), (RENAME, "Half"))),
        {"spec.profiles.Half.[key]"},
    ),
    "empty-product": (_broken(((*CLASS0, "product"), "")), {"spec.nodeClasses[0].product"}),
    "no-shared-resources": (_broken((("spec", "sharedResources"), [])), {"spec.sharedResources"}),
    "threads-0": (
        _broken(((*HALF, "activeThreadPercentage"), 0)),
        {"spec.profiles.half.activeThreadPercentage"},
    ),
    "threads-101": (
        _broken(((*HALF, "activeThreadPercentage"), 101)),
        {"spec.profiles.half.activeThreadPercentage"},
    ),
    "no-gpus": (_broken(((*CLASS1, "gpusPerNode"), 0)), {"spec.nodeClasses[1].gpusPerNode"}),
    "no-memory": (_broken(((*CLASS0, "memoryMiB"), 0)), {"spec.nodeClasses[0].memoryMiB"}),
    "one-replica": (_broken(((*CLASS1, "replicas"), 1)), {"spec.nodeClasses[1].replicas"}),
    "relative-allowed-path": (
        _broken((("spec", "hostAccess", "allowedHostPaths", 0, "pathPrefix"), "models")),
        {"spec.hostAccess.allowedHostPaths[0].pathPrefix"},
    ),
    "unclean-allowed-path": (
        _broken((("spec", "hostAccess", "allowedHostPaths", 0, "pathPrefix"), "/models/./x")),
        {"spec.hostAccess.allowedHostPaths[0].pathPrefix"},
    ),
    "relative-denied-path": (
        _broken((("spec", "hostAccess", "deniedHostPaths"), ["/opt/gpu", "opt/gpu", "/a//b"])),
        {"spec.hostAccess.deniedHostPaths[1]", "spec.hostAccess.deniedHostPaths[2]"},
    ),
    # The dra section.
    "dra-unknown-field": (
        _broken(((*DRA0, "maxDevices"), 2)),
        {"spec.dra.deviceClasses[0].maxDevices"},
    ),
    "dra-strategy": (
        _broken(((*DRA0, "sharing"), ["mps"])),
        {"spec.dra.deviceClasses[0].sharing[0]"},
    ),
    "dra-config-kind": (
        _broken(((*DRA2, "configKind"), "GPUConfig")),
        {"spec.dra.deviceClasses[2].configKind"},
    ),
    "dra-too-many-devices": (
        _broken(((*DRA0, "maxDevicesPerRequest"), 33)),
        {"spec.dra.deviceClasses[0].maxDevicesPerRequest"},
    ),
    "dra-class-name": (_broken(((*DRA1, "name"), "VFIO")), {"spec.dra.deviceClasses[1].name"}),
    "dra-capacity-name": (
        _broken(((*DRA0, "capacity"), {"memory-mib": "8Gi"})),
        {"spec.dra.deviceClasses[0].capacity.memory-mib.[key]"},
    ),
    "dra-capacity-not-a-quantity": (
        _broken(((*DRA0, "capacity", "memory"), "8 GiB")),
        {"spec.dra.deviceClasses[0].capacity.memory"},
    ),
    "dra-capacity-with-a-domain-not-a-quantity": (
        _broken(((*DRA2, "capacity", "gpu.example.com/memory"), "40GB")),
        {"spec.dra.deviceClasses[2].capacity.gpu.example.com/memory"},
    ),
}

# What only the models' own validators find: fields judged together, or with the server's
# own code (the GPU host paths, the range of a quantity). By class of check, id: (the policy,
# the fields `policy check` names); the chart lets each through, leaving it to `policy check`
# and the server (docs/install.md, "What the chart checks in your policy files").
BEYOND_SCHEMA: dict[str, dict[str, tuple[dict[str, Any], set[str]]]] = {
    # What the API server would refuse of a toleration the webhook adds.
    "tolerations": {
        "exists-with-value": (_broken(((*TOLERATION0, "value"), "x")), {"spec.tolerations[0]"}),
        "equal-without-key": (
            _broken(((*TOLERATION0, "operator"), "Equal"), ((*TOLERATION0, "key"), DELETE)),
            {"spec.tolerations[0]"},
        ),
        "seconds-without-no-execute": (
            _broken(((*TOLERATION0, "tolerationSeconds"), 30)),
            {"spec.tolerations[0]"},
        ),
    },
    # A class's sharing as the device plugin and GFD take it.
    "node-classes": {
        "mps-without-memory": (
            _broken(((*CLASS0, "memoryMiB"), DELETE)),
            {"spec.nodeClasses[0].memoryMiB"},
        ),
        "mps-replicas": (_broken(((*CLASS0, "replicas"), 64)), {"spec.nodeClasses[0].replicas"}),
        "mps-on-mig": (
            _broken(((*CLASS0, "resource"), "nvidia.com/mig-1g.10gb")),
            {"spec.nodeClasses[0].strategy"},
        ),
        "shared-suffix-in-product": (
            _broken(((*CLASS0, "product"), "NVIDIA-L4-SHARED")),
            {"spec.nodeClasses[0].product"},
        ),
        "shared-product-too-long": (
            _broken(((*CLASS1, "product"), "P" * 60)),
            {"spec.nodeClasses[1].product"},
        ),
    },
    # The profiles, against each other and the classes' ceilings.
    "profiles": {
        "empty-profile": (_broken((("spec", "profiles", "none"), {})), {"spec.profiles.none"}),
        "profiles-without-default": (
            _broken((("spec", "defaultProfile"), DELETE)),
            {"spec.defaultProfile"},
        ),
        "default-not-a-profile": (
            _broken((("spec", "defaultProfile"), "full")),
            {"spec.defaultProfile"},
        ),
        "default-without-profiles": (
            _broken((("spec", "profiles"), DELETE)),
            {"spec.defaultProfile"},
        ),
        "profile-above-every-ceiling": (
            _broken(((*HALF, "activeThreadPercentage"), 60)),
            {"spec.profiles.half"},
        ),
    },
    # The policy as a whole: its classes against its resources, names listed twice.
    "the-policy-as-a-whole": {
        # (SITE_POLICY has a dra section, with which nodeClasses may be left out.)
        "no-node-classes": (
            _broken((("spec", "nodeClasses"), DELETE), (("spec", "dra"), DELETE)),
            {"spec.nodeClasses"},
        ),
        "no-classes": (
            _broken((("spec", "nodeClasses"), []), (("spec", "dra"), DELETE)),
            {"spec.nodeClasses"},
        ),
        "two-classes-one-name": (_broken(((*CLASS1, "name"), "l4-mps")), {"spec.nodeClasses"}),
        "resource-twice": (
            _broken((("spec", "sharedResources", 1), "nvidia.com/gpu.shared")),
            {"spec.sharedResources", "spec.nodeClasses[t4]"},
        ),
        "class-resource-not-shared": (
            _broken((("spec", "sharedResources"), ["nvidia.com/gpu.shared"])),
            {"spec.nodeClasses[t4]"},
        ),
        "shared-resource-no-class": (
            _broken(
                (
                    ("spec", "sharedResources"),
                    [*SITE_POLICY["spec"]["sharedResources"], "nvidia.com/mig-1g.10gb.shared"],
                )
            ),
            {"spec.sharedResources"},
        ),
        "capability-twice": (
            _broken((("spec", "driverCapabilities"), ["compute", "utility", "compute"])),
            {"spec.driverCapabilities"},
        ),
    },
    # A rule that refuses bad input has no other mode.
    "rule-modes": {
        "always-enforced-rule": (
            _broken((("spec", "ruleModes", "malformed-object"), "warn")),
            {"spec.ruleModes.malformed-object"},
        ),
    },
    # Allowed host paths against the paths that hand out GPUs, and against the denied ones.
    "host-paths": {
        "allowed-path-hands-out-gpus": (
            _broken((("spec", "hostAccess", "allowedHostPaths", 0, "pathPrefix"), "/dev")),
            {"spec.hostAccess.allowedHostPaths[0]"},
        ),
        "allowed-path-reaches-a-denied-one": (
            _broken((("spec", "hostAccess", "deniedHostPaths"), ["/models/gpu-runtime"])),
            {"spec.hostAccess.allowedHostPaths[0]"},
        ),
    },
    # Each dra class's settings together, and the classes of the section.
    "dra-classes": {
        "dra-class-twice": (
            _broken(((*DRA2, "name"), "gpu.nvidia.com")),
            {"spec.dra.deviceClasses"},
        ),
        "dra-sharing-on-vfio-class": (
            _broken(((*DRA1, "sharing"), ["TimeSlicing"])),
            {"spec.dra.deviceClasses[1].sharing"},
        ),
        "dra-sharing-on-vfio-kind": (
            _broken(((*DRA2, "configKind"), "VfioDeviceConfig")),
            {"spec.dra.deviceClasses[2].sharing"},
        ),
        # No whole device, and no way to share one: every request of the open class refused.
        "dra-whole-device-without-sharing": (
            _broken(((*DRA1, "allowWholeDevice"), False)),
            {"spec.dra.deviceClasses[1].allowWholeDevice"},
        ),
        "dra-add-mps-without-mps": (
            _broken(((*DRA2, "addMpsConfig"), True)),
            {"spec.dra.deviceClasses[2].addMpsConfig"},
        ),
        "dra-add-mps-with-capacity": (
            _broken(((*DRA0, "addMpsConfig"), True)),
            {"spec.dra.deviceClasses[0].addMpsConfig"},
        ),
        "dra-strategy-twice": (
            _broken(((*DRA0, "sharing"), ["MPS", "TimeSlicing", "MPS"])),
            {"spec.dra.deviceClasses[0].sharing"},
        ),
    },
    # A capacity ceiling in the grammar of quantities, but negative or beyond 2^63-1.
    "capacity-ranges": {
        "dra-capacity-negative": (
            _broken(((*DRA0, "capacity", "memory"), "-8Gi")),
            {"spec.dra.deviceClasses[0].capacity.memory"},
        ),
        "dra-capacity-out-of-range": (
            _broken(((*DRA0, "capacity", "memory"), "8Ei")),
            {"spec.dra.deviceClasses[0].capacity.memory"},
        ),
        # `policy check` places a message at the field it starts with, which a name with a
        # domain is not (its '/'): at the class, then.
        "dra-capacity-with-a-domain": (
            _broken(((*DRA2, "capacity", "gpu.example.com/memory"), "-40Gi")),
            {"spec.dra.deviceClasses[2]"},
        ),
    },
}

# id: (the policy, the fields the chart names, those `policy check` names): problems of both
# kinds in one document.
MIXED_PROBLEMS: dict[str, tuple[dict[str, Any], set[str], set[str]]] = {
    "dra-and-spec-problems": (
        _broken(
            ((*DRA2, "configKind"), "VfioDeviceConfig"),
            ((*DRA0, "capacity", "memory"), "lots"),
            (("spec", "ruleModes", "no-such-rule"), "warn"),
        ),
        {"spec.dra.deviceClasses[0].capacity.memory", "spec.ruleModes.no-such-rule.[key]"},
        {
            "spec.dra.deviceClasses[2].sharing",
            "spec.dra.deviceClasses[0].capacity.memory",
            "spec.ruleModes.no-such-rule.[key]",
        },
    ),
    "dra-twice-and-node-class-problems": (
        _broken(((*DRA2, "name"), "vfio.gpu.nvidia.com"), ((*CLASS1, "replicas"), 1)),
        {"spec.nodeClasses[1].replicas"},
        {"spec.dra.deviceClasses", "spec.nodeClasses[1].replicas"},
    ),
}
BEYOND_CASES = {case: v for cases in BEYOND_SCHEMA.values() for case, v in cases.items()}
ALL_CASES: dict[str, dict[str, Any]] = {
    **{case: doc for case, (doc, _) in SCHEMA_PROBLEMS.items()},
    **{case: doc for case, (doc, _) in BEYOND_CASES.items()},
    **{case: doc for case, (doc, _, _) in MIXED_PROBLEMS.items()},
}
assert len(ALL_CASES) == len(SCHEMA_PROBLEMS) + len(BEYOND_CASES) + len(MIXED_PROBLEMS)

# Policies both take, written as people write them: values pydantic converts, and plain
# scalars Helm reads as another type than the server does (y, 1e3: true, a number).
GOOD_POLICY_TEXTS = {
    "quoted-numbers-and-words": """\
apiVersion: gpu-share.io/v1alpha1
kind: SharingPolicy
metadata: {name: site}
spec:
  nodeClasses:
    - {name: l4, product: NVIDIA-L4, strategy: mps, replicas: "2", memoryMiB: 23_034,
       gpusPerNode: 2.0, renamed: "yes", failRequestsGreaterThanOne: 0}
  profiles:
    half: {activeThreadPercentage: " 50", pinnedMemoryMiB: "11517.0"}
  defaultProfile: half
  rules: {denyPrivileged: "on", denyHostAccess: "False"}
  hostAccess: {trustPodSecurity: "n"}
""",
    "plain-scalars-helm-reads-otherwise": """\
apiVersion: gpu-share.io/v1alpha1
kind: SharingPolicy
metadata: {name: site}
spec:
  sharedResources: [nvidia.com/gpu]
  tolerations:
    - {key: y, operator: Equal, value: 1e3, effect: NoSchedule}
  nodeClasses:
    - {name: n, product: 0o17, strategy: time-slicing, renamed: false, replicas: 4}
""",
}


def _site_dir(tmp_path: Path, text: str) -> Path:
    directory = tmp_path / "site"
    directory.mkdir(exist_ok=True)
    (directory / "site.yaml").write_text(text, encoding="utf-8")
    return directory


def _check_problems(directory: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """`gpu-share-webhook policy check DIR`'s problems, each `<file>: <field>: <reason>`."""
    capsys.readouterr()
    code = cli.main(["policy", "check", str(directory)])
    err = capsys.readouterr().err
    lines = [
        line.removeprefix("error: ").removeprefix(f"{directory}/")
        for line in err.splitlines()
        if line.startswith("error: ")
    ]
    assert (code == 0) == (lines == []), err
    return lines


def _checked_files(texts: Mapping[str, str]) -> list[str]:
    """`gpu-share-webhook policy check`'s problems with a directory of these files, each
    `<file>: <field>: <reason>`."""
    with tempfile.TemporaryDirectory() as directory:
        for name, text in texts.items():
            (Path(directory) / name).write_text(text, encoding="utf-8")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            cli.main(["policy", "check", directory])
    return [
        line.removeprefix("error: ").removeprefix(f"{directory}/")
        for line in err.getvalue().splitlines()
        if line.startswith("error: ")
    ]


def _checked(text: str) -> list[str]:
    """`policy check`'s problems with the file site.yaml of `text`."""
    return _checked_files({"site.yaml": text})


def _chart_files(chart: helm_python.Chart, files: Mapping[str, Any]) -> list[str]:
    """The chart's problems with these files of policies.files, each `<file>: <field>:
    <reason>` ([] when it renders)."""
    values = {"policies": {"files": dict(files)}}
    try:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    except helm_python.HelmError as error:
        message = str(error)
        assert "policies.files: the server would not load these policies" in message, message
        return [
            line.strip().removeprefix("policies.files.")
            for line in message.splitlines()
            if line.startswith("  policies.files.")
        ]
    return []


def _chart_problems(chart: helm_python.Chart, content: str | Mapping[str, Any]) -> list[str]:
    """The chart's problems with one file, site.yaml, of policies.files."""
    return _chart_files(chart, {"site.yaml": content})


def _fields(problems: Sequence[str]) -> set[tuple[str, str]]:
    """(file, field) of each problem."""
    return {tuple(p.split(": ", 2)[:2]) for p in problems}  # type: ignore[misc]


def _named(case: str, doc: Mapping[str, Any], suffix: str = "") -> dict[str, Any]:
    """A case's policy named after it (but where the case is about the name), so that the
    cases can be files of one release."""
    named: dict[str, Any] = copy.deepcopy(dict(doc))
    if isinstance(named.get("metadata"), dict) and named["metadata"].get("name") == "site":
        named["metadata"]["name"] = case + suffix
    return named


class Judged(NamedTuple):
    """What `policy check` and the chart say of every case, each a file of its own: the
    fields by case, and the chart's lines."""

    checked: dict[str, set[str]]
    text: dict[str, set[str]]
    mapping: dict[str, set[str]]
    lines: list[str]


def _by_case(problems: Sequence[str], suffix: str = "") -> dict[str, set[str]]:
    found: dict[str, set[str]] = {case: set() for case in ALL_CASES}
    for file, field in _fields(problems):
        found[file.removesuffix(f"{suffix}.yaml")].add(field)
    return found


@pytest.fixture(scope="module")
def judged(chart: helm_python.Chart) -> Judged:
    """Every case as a file of one `policy check`, and of one release, which the chart
    refuses listing every problem of every file: each case given as text (`<case>.yaml`),
    and as a mapping (`<case>-m.yaml`, its policy `<case>-m`)."""
    texts = {
        f"{case}.yaml": yaml.safe_dump(_named(case, doc), sort_keys=False)
        for case, doc in ALL_CASES.items()
    }
    mappings = {f"{case}-m.yaml": _named(case, doc, "-m") for case, doc in ALL_CASES.items()}
    lines = _chart_files(chart, {**texts, **mappings})
    assert lines
    return Judged(
        checked=_by_case(_checked_files(texts)),
        text=_by_case([p for p in lines if p.split(": ", 1)[0] in texts]),
        mapping=_by_case([p for p in lines if p.split(": ", 1)[0] in mappings], "-m"),
        lines=lines,
    )


@pytest.mark.parametrize("form", ["text", "mapping"])
def test_the_site_policy_and_the_shipped_ones_pass_the_charts_check(
    chart: helm_python.Chart, form: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    texts = {p.name: p.read_text(encoding="utf-8") for p in policies.policy_files(dh.POLICIES)}
    texts["site.yaml"] = yaml.safe_dump(SITE_POLICY, sort_keys=False)
    assert _check_problems(_site_dir(tmp_path, texts["site.yaml"]), capsys) == []
    files = {n: t if form == "text" else yaml.safe_load(t) for n, t in texts.items()}
    objects = _render(chart, {"policies": {"files": files}}, RELEASE, NAMESPACE)
    rendered = _policy_files(objects)
    assert {n: yaml.safe_load(t) for n, t in rendered.items()} == {
        n: yaml.safe_load(t) for n, t in texts.items()
    }
    assert _policy_set(objects).names == ["default", "dra", "not-renamed", "site"]


@pytest.mark.parametrize("case", list(SCHEMA_PROBLEMS))
def test_the_chart_refuses_what_the_schema_says_where_policy_check_does(
    judged: Judged, case: str
) -> None:
    """Both name the same file and fields, whether the file is given as text or as a
    mapping."""
    _, fields = SCHEMA_PROBLEMS[case]
    assert judged.checked[case] == fields
    assert judged.text[case] == fields
    assert judged.mapping[case] == fields


@pytest.mark.parametrize("check", list(BEYOND_SCHEMA))
def test_the_chart_leaves_the_checks_across_fields_to_policy_check(
    judged: Judged, check: str
) -> None:
    """`policy check` refuses each of these, and the chart's check lets it through (in a
    release it refuses for other files' problems, which it lists all of): no copy of the
    models' validators is in the chart. A rule the models say as schema belongs in the
    other table."""
    for case, (_, fields) in BEYOND_SCHEMA[check].items():
        assert judged.checked[case] == fields, case
        assert judged.text[case] == set(), case
        assert judged.mapping[case] == set(), case


@pytest.mark.parametrize("case", list(MIXED_PROBLEMS))
def test_a_file_with_both_kinds_of_problem_gets_the_schemas_from_the_chart(
    judged: Judged, case: str
) -> None:
    _, charted, checked = MIXED_PROBLEMS[case]
    assert judged.checked[case] == checked
    assert judged.text[case] == charted
    assert judged.mapping[case] == charted


def test_the_chart_names_the_file_and_the_field(judged: Judged) -> None:
    """As `policy check` words the place; a pattern in words, as `policy check` has it."""
    for case, words in [
        ("mode-enforced", 'spec.mode: "enforced" is not one of: enforce, warn, dry-run'),
        ("typo-in-a-class", "spec.nodeClasses[0].stratgy: unknown field"),
        ("typo-in-a-class", "spec.nodeClasses[0].strategy: required, and missing"),
        ("policy-name", 'metadata.name: "Site" is not a DNS-1123 label ('),
        ("relative-allowed-path", '.pathPrefix: "models" is not an absolute path written clean'),
        ("dra-capacity-not-a-quantity", '.memory: "8 GiB" is not a quantity ('),
    ]:
        assert any(line.startswith(f"{case}.yaml: ") and words in line for line in judged.lines)


@pytest.mark.parametrize("name", list(GOOD_POLICY_TEXTS))
def test_values_the_server_converts_or_reads_otherwise_than_helm_are_not_refused(
    chart: helm_python.Chart, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = GOOD_POLICY_TEXTS[name]
    assert _check_problems(_site_dir(tmp_path, text), capsys) == []
    assert _chart_problems(chart, text) == []


@pytest.mark.parametrize(
    ("plain", "field"),
    [
        # "y" to the server, which no integer is; true to Helm.
        ("memoryMiB: y", "spec.nodeClasses[0].memoryMiB"),
        # "y" to the server, no resource name; true to Helm.
        ("- nvidia.com/gpu.shared\n  - nvidia.com/gpu", "spec.sharedResources[1]"),
    ],
)
def test_a_value_helm_reads_otherwise_is_left_to_the_server(
    chart: helm_python.Chart,
    plain: str,
    field: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = yaml.safe_dump(SITE_POLICY, sort_keys=False, default_flow_style=False)
    if plain.startswith("memoryMiB"):
        assert "memoryMiB: 23034" in text
        text = text.replace("memoryMiB: 23034", plain)
    else:
        assert plain in text
        text = text.replace(plain, "- nvidia.com/gpu.shared\n  - y")
    assert _fields(_check_problems(_site_dir(tmp_path, text), capsys)) == {("site.yaml", field)}
    assert _chart_problems(chart, text) == []


def test_a_mapping_is_checked_as_helm_read_it(chart: helm_python.Chart) -> None:
    """What the server gets of a mapping is Helm's reading of it, written out: true where a
    string belongs stays true, and is refused. In a file's text Helm reads y as true too,
    where the server reads a string, so there the chart leaves both to the server."""
    doc = _broken(((*CLASS0, "product"), True))
    text = yaml.safe_dump(doc)
    assert "product: true" in text
    assert _chart_files(
        chart,
        {
            "m.yaml": doc,
            "t.yaml": text,
            "y.yaml": text.replace("product: true", "product: y").replace(
                "name: site", "name: other"
            ),
        },
    ) == ["m.yaml: spec.nodeClasses[0].product: expected a string, not true"]


def test_a_policy_name_helm_reads_as_true_or_false_must_be_quoted(
    chart: helm_python.Chart,
) -> None:
    """The chart names the webhook entries after the policy, so it must read the name as the
    server does; `policy check` would take a policy named n."""
    text = yaml.safe_dump(SITE_POLICY).replace("name: site", "name: n")
    assert _chart_problems(chart, text) == [
        "site.yaml: metadata.name: Helm reads this name as false, not as text: put it in quotes"
    ]
    assert _chart_problems(chart, text.replace("name: n", "name: 'n'")) == []


def test_problems_of_several_documents_are_numbered_as_policy_check_numbers_them(
    chart: helm_python.Chart, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = yaml.safe_dump(SITE_POLICY)
    bad = yaml.safe_dump(SCHEMA_PROBLEMS["mode-enforced"][0]).replace("name: site", "name: other")
    text = f"# the site's policies\n---\n{good}---\n---  # kept empty\n{bad}"
    checked = _check_problems(_site_dir(tmp_path, text), capsys)
    assert _fields(checked) == {("site.yaml (document 3)", "spec.mode")}
    assert _fields(_chart_problems(chart, text)) == _fields(checked)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # policy check: "a policy is a mapping, not list"
        ("- apiVersion: gpu-share.io/v1alpha1\n", "a policy is a mapping"),
        ("# nothing yet\n", "holds no policy document"),
        ("apiVersion: [\n", "not valid YAML"),
    ],
)
def test_files_that_hold_no_policy_are_refused_by_both(
    chart: helm_python.Chart,
    text: str,
    says: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (checked,) = _check_problems(_site_dir(tmp_path, text), capsys)
    (charted,) = _chart_problems(chart, text)
    for problem in (checked, charted):
        assert problem.startswith("site.yaml: ")
        assert says in problem


def _paths(node: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every place in a document: its keys and list items, at any depth."""
    found: list[tuple[str | int, ...]] = []
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, value in items:
        found.append((*prefix, key))
        found.extend(_paths(value, (*prefix, key)))
    return found


# Values people and typos put in policies: words the models convert, words Helm reads as
# another type, names, paths, bounds and their neighbours, shapes.
ODD_VALUES = st.sampled_from(
    [
        "",
        "y",
        "n",
        "yes",
        "off",
        "4",
        " 4",
        "4.0",
        "1_000",
        "abc",
        "MPS",
        "mps",
        "Exists",
        "NoExecute",
        "warn",
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
        "/models",
        "models",
        "/a/../b",
        "half",
        "l4-mps",
        "P" * 60,
        "8 Gi",
        "-1",
        "1e3",
        -1,
        0,
        1,
        2,
        3,
        47,
        48,
        49,
        50,
        100,
        101,
        23034,
        1.5,
        2.0,
        True,
        False,
        None,
        [],
        {},
        ["x"],
        {"x": 1},
    ]
)


@st.composite
def _mutated_policies(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(SITE_POLICY)
    for _ in range(draw(st.integers(1, 3))):
        places = _paths(doc)
        if not places:
            break
        *parents, last = draw(st.sampled_from(places))
        node: Any = doc
        for key in parents:
            node = node[key]
        action = draw(st.sampled_from(["set", "set", "delete", "add"]))
        if action == "delete":
            del node[last]
        elif action == "add" and isinstance(node, dict):
            key = draw(st.sampled_from(["extra", "Name", "strategy", "mode"]))
            node[key] = copy.deepcopy(draw(ODD_VALUES))
        else:
            node[last] = copy.deepcopy(draw(ODD_VALUES))
    return doc


@pytest.mark.slow  # some forty renders of twelve files
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(_mutated_policies(), min_size=1, max_size=12),
    form=st.sampled_from(["text", "mapping"]),
)
def test_the_chart_refuses_no_policy_that_policy_check_takes(
    chart: helm_python.Chart, docs: list[dict[str, Any]], form: str
) -> None:
    """The other direction of the tables: a policy the server loads is never refused, and
    where both refuse, the chart names no field `policy check` does not. (But for a policy
    name Helm reads as true or false: see test_a_policy_name_helm_reads_as_true_or_false.)"""
    docs = [_named(f"p{i}", doc) for i, doc in enumerate(docs)]
    texts = {f"p{i}.yaml": yaml.safe_dump(doc, sort_keys=False) for i, doc in enumerate(docs)}
    given_ = texts if form == "text" else {f"p{i}.yaml": doc for i, doc in enumerate(docs)}
    problems = _chart_files(chart, given_)
    charted = _fields([p for p in problems if not p.endswith("not as text: put it in quotes")])
    assert charted <= _fields(_checked_files(texts)), charted


# --------------------------------------------------------------------------- certificates


@pytest.mark.parametrize("name", ["bootstrap", "custom"])
def test_the_bootstrap_job_names_the_objects_of_its_release(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    objects = rendered[name]
    namespace = RENDERS[name][2]
    fullname = _server(objects)["metadata"]["name"]
    job = dh.find(objects, "Job")
    assert job["metadata"]["name"] == f"{fullname}-certs-1"
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = cli.build_parser().parse_args(c["args"])
    assert args.command == "certs"
    assert (args.service, args.namespace) == (
        dh.find(objects, "Service")["metadata"]["name"],
        namespace,
    )
    assert args.inject_ca is True
    configs = {o["metadata"]["name"] for o in _configurations(objects)}
    assert configs == {args.mutating_webhook} == {args.validating_webhook}
    assert c["image"] == _pod(objects)["containers"][0]["image"]
    # Its rights name exactly those objects.
    account = pod["serviceAccountName"]
    role = dh.find(objects, "Role", account)
    assert role["rules"][0]["resourceNames"] == [args.secret]
    cluster_role = dh.find(objects, "ClusterRole", account)
    assert cluster_role["rules"][0]["resourceNames"] == sorted(configs)
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        assert dh.find(objects, kind, account)["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": namespace}
        ]
    # The admission policy lets that account create that Secret and no other.
    username = f"system:serviceaccount:{namespace}:{account}"

    def refused(secret: str, user: str = username, type_: str = "kubernetes.io/tls") -> bool:
        obj = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": type_,
            "metadata": {"name": secret, "namespace": namespace},
        }
        return dh.secret_policy_refuses(objects, obj, username=user, namespace=namespace)

    assert not refused(args.secret)
    assert refused("anything-else")
    assert refused(args.secret, type_="Opaque")
    assert not refused("anything-else", user="kubernetes-admin")


def test_the_bootstrap_job_runs_anew_at_every_upgrade(chart: helm_python.Chart) -> None:
    manifests = chart.render({}, name=RELEASE, namespace=NAMESPACE, revision=7, is_upgrade=True)
    (job,) = [
        o
        for o in yaml.safe_load_all(manifests["gpu-share-webhook/templates/certs-bootstrap.yaml"])
        if o and o["kind"] == "Job"
    ]
    assert job["metadata"]["name"] == "gpu-share-webhook-certs-7"


def test_days_reach_the_bootstrap_command(rendered: dict[str, list[dict[str, Any]]]) -> None:
    (c,) = dh.find(rendered["custom"], "Job")["spec"]["template"]["spec"]["containers"]
    assert cli.build_parser().parse_args(c["args"]).days == 90


def test_cert_manager_signs_the_secret_the_server_mounts(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["certManager"]
    for obj in objects:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            assert obj["apiVersion"] == "cert-manager.io/v1"
            assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
    (serving,) = [o for o in objects if o["kind"] == "Certificate" and not o["spec"].get("isCA")]
    assert serving["spec"]["secretName"] == _serving_secret(objects)
    assert f"{RELEASE}.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    for config in _configurations(objects):
        assert config["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{serving['metadata']['name']}"
        }


def test_cert_manager_with_an_issuer_of_the_sites(chart: helm_python.Chart) -> None:
    issuer = {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "site-ca"}
    values = {"certificates": {"mode": "certManager", "certManager": {"issuerRef": issuer}}}
    objects = _render(chart, values, RELEASE, NAMESPACE)
    (certificate,) = [o for o in objects if o["apiVersion"].startswith("cert-manager.io/")]
    assert certificate["kind"] == "Certificate"
    assert certificate["spec"]["issuerRef"] == issuer


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"certificates": {"mode": "existingSecret", "existingSecret": {"caBundle": CA_PEM}}},
            "certificates.existingSecret.name",
        ),
        (
            {"certificates": {"mode": "existingSecret", "existingSecret": {"name": "s"}}},
            "certificates.existingSecret.caBundle",
        ),
        (
            {"certificates": {"existingSecret": {"caBundle": CA_PEM}}},
            "certificates.mode is bootstrap",
        ),
        ({"certificates": {"mode": "selfSigned"}}, "/certificates/mode"),
    ],
)
def test_certificate_values_the_chart_refuses(
    chart: helm_python.Chart, values: dict[str, Any], message: str
) -> None:
    assert message in _refused(chart, values)


# --------------------------------------------------------------------------- other values


def test_the_non_default_values_reach_the_server(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    server = _server(rendered["custom"])
    assert server["metadata"]["name"] == OTHER_FULLNAME
    assert server["spec"]["replicas"] == 3
    (c,) = server["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"registry.example.com/gpu-share-webhook@{DIGEST}"
    assert c["resources"] == CUSTOM_VALUES["resources"]
    env = _env(c)
    assert env["GPU_SHARE_WEBHOOK_WORKERS"] == "2"
    assert env["GPU_SHARE_WEBHOOK_LOG_LEVEL"] == "debug"
    default = _server(rendered["bootstrap"])["spec"]["template"]["spec"]["containers"][0]
    assert default["image"] == f"gpu-share-webhook:{__version__}"
    assert "GPU_SHARE_WEBHOOK_LOG_LEVEL" not in _env(default)
    namespace = dh.find(rendered["custom"], "Namespace")
    assert namespace["metadata"]["name"] == OTHER_NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicas": 1}, "replicas (1) must be more than podDisruptionBudget.minAvailable (1)"),
        ({"webhook": {"failurePolicy": "Maybe"}}, "/webhook/failurePolicy"),
        ({"webhook": {"timeoutSeconds": 31}}, "/webhook/timeoutSeconds"),
        ({"webhook": {"excludedNamespaces": ["Not_A_Namespace"]}}, "/webhook/excludedNamespaces"),
        ({"replica": 3}, "additional properties 'replica' not allowed"),
        ({"policies": {"rules": {"denyEverything": True}}}, "/policies/rules"),
        (
            {"extraEnv": [{"name": "GPU_SHARE_WEBHOOK_PORT", "value": "9443"}]},
            "extraEnv: GPU_SHARE_WEBHOOK_PORT is set by the chart",
        ),
        ({"networkPolicy": {"metricsFrom": [{}]}}, "/networkPolicy/metricsFrom/0"),
    ],
)
def test_values_the_chart_refuses(
    chart: helm_python.Chart, values: dict[str, Any], message: str
) -> None:
    assert message in _refused(chart, values)


def test_the_network_policy_admits_the_scrapers_the_values_name(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    prometheus = {"app.kubernetes.io/name": "prometheus"}
    default = dh.find(rendered["bootstrap"], "NetworkPolicy", RELEASE)
    assert dh.ingress_admits(default, 8443, namespace=dh.namespace_labels("team-a"), pod=None)
    assert dh.ingress_admits(default, 8080, namespace=dh.MONITORING, pod=prometheus)
    assert not dh.ingress_admits(
        default, 8080, namespace=dh.namespace_labels("team-a"), pod=prometheus
    )

    custom = dh.find(rendered["custom"], "NetworkPolicy", OTHER_FULLNAME)
    assert dh.selector_matches(
        custom["spec"]["podSelector"],
        _server(rendered["custom"])["spec"]["template"]["metadata"]["labels"],
    )
    (metrics,) = [r for r in custom["spec"]["ingress"] if r.get("from")]
    assert metrics["from"] == CUSTOM_VALUES["networkPolicy"]["metricsFrom"]
    # The selector peers, played as the API server would (the ipBlock aside).
    selectors = {
        **custom,
        "spec": {
            **custom["spec"],
            "ingress": [{**metrics, "from": [p for p in metrics["from"] if "ipBlock" not in p]}],
        },
    }
    observability = dh.namespace_labels("observability")
    assert dh.ingress_admits(selectors, 8080, namespace=observability, pod={"app": "vmagent"})
    assert not dh.ingress_admits(selectors, 8080, namespace=observability, pod=prometheus)
    assert not dh.ingress_admits(selectors, 8080, namespace=dh.MONITORING, pod=prometheus)
    assert dh.ingress_admits(custom, 8443, namespace=dh.namespace_labels("team-a"), pod=None)


def test_no_scrapers_closes_the_metrics_port(chart: helm_python.Chart) -> None:
    objects = _render(chart, {"networkPolicy": {"metricsFrom": []}}, RELEASE, NAMESPACE)
    policy = dh.find(objects, "NetworkPolicy", RELEASE)
    assert [r["ports"] for r in policy["spec"]["ingress"]] == [[{"port": 8443, "protocol": "TCP"}]]
    assert not dh.ingress_admits(policy, 8080, namespace=dh.MONITORING, pod={"app": "x"})


# --------------------------------------------------------------------------- client certificates

CLIENT_CA_DIR = "/etc/gpu-share-webhook/client-ca"
# The `serve` options clientAuth sets, by their variables (`GPU_SHARE_WEBHOOK_<OPTION>`).
CLIENT_CA_FILE_ENV = tools.env_name("client-ca-file")
CLIENT_NAMES_ENV = tools.env_name("client-names")
CLIENT_AUTH: dict[str, dict[str, Any]] = {
    "caBundle": {"enabled": True, "caBundle": CA_PEM},
    "existingConfigMap": {
        "enabled": True,
        "existingConfigMap": "site-apiserver-ca",
        "names": ["kube-apiserver", "kube-apiserver-kubelet-client"],
    },
}


def _client_auth_render(chart: helm_python.Chart, way: str) -> list[dict[str, Any]]:
    return _render(chart, {"clientAuth": CLIENT_AUTH[way]}, RELEASE, NAMESPACE)


@pytest.mark.parametrize("way", list(CLIENT_AUTH))
def test_client_auth_mounts_the_ca_as_a_directory_and_names_it_to_the_server(
    chart: helm_python.Chart, way: str
) -> None:
    objects = _client_auth_render(chart, way)
    pod = _pod(objects)
    (c,) = pod["containers"]
    env = _env(c)
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == CLIENT_CA_DIR]
    # A directory, not a file: the kubelet then replaces the file when the ConfigMap changes
    # (a subPath mount keeps the first version), and the server re-reads it.
    assert mount["readOnly"] is True
    assert "subPath" not in mount
    assert "subPathExpr" not in mount
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    (item,) = volume["configMap"]["items"]
    assert item == {"key": "ca.crt", "path": "ca.crt"}
    assert env[CLIENT_CA_FILE_ENV] == f"{CLIENT_CA_DIR}/{item['path']}"
    assert env[CLIENT_NAMES_ENV].split(",") == CLIENT_AUTH[way].get("names", ["kube-apiserver"])
    configmaps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    if way == "caBundle":
        assert volume["configMap"]["name"] == f"{RELEASE}-client-ca"
        assert configmaps[volume["configMap"]["name"]]["data"] == {"ca.crt": CA_PEM}
    else:
        assert volume["configMap"]["name"] == "site-apiserver-ca"
        assert "site-apiserver-ca" not in configmaps
        assert not [n for n in configmaps if n.endswith("-client-ca")]
    for obj in objects:
        if obj["kind"] in ("ConfigMap", "Deployment"):
            kubernetes_validate.validate(obj, dh.VERSIONS[-1], strict=True)


@pytest.mark.slow  # a kustomize build of a copy of deploy/
def test_the_chart_adds_what_the_client_auth_component_adds(
    chart: helm_python.Chart, tmp_path: Path
) -> None:
    """clientAuth with its defaults and a caBundle gives the objects of
    deploy/components/client-auth on deploy/overlays/cert-manager with that CA."""
    values = {
        "namespace": {"create": True},
        "certificates": {"mode": "certManager"},
        "clientAuth": CLIENT_AUTH["caBundle"],
    }
    ours = {
        (o["kind"], o["metadata"]["name"]): o
        for o in map(_as_deploy_writes_it, _render(chart, values, RELEASE, NAMESPACE))
    }
    theirs = {
        (o["kind"], o["metadata"]["name"]): o
        for o in map(
            _as_deploy_writes_it,
            dh.kustomize(dh.site(tmp_path, "cert-manager", dh.CLIENT_AUTH, client_ca=CA_PEM)),
        )
    }
    assert ("ConfigMap", f"{RELEASE}-client-ca") in theirs
    assert sorted(ours) == sorted(theirs)
    for key, want in theirs.items():
        assert ours[key] == want, f"{key[0]} {key[1]} differs from deploy/components/client-auth"


def test_client_auth_is_off_by_default(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for objects in rendered.values():
        (c,) = _pod(objects)["containers"]
        assert not {CLIENT_CA_FILE_ENV, CLIENT_NAMES_ENV} & set(_env(c))
        assert CLIENT_CA_DIR not in {m["mountPath"] for m in c["volumeMounts"]}
        assert not [o for o in objects if o["metadata"]["name"].endswith("-client-ca")]


def test_the_variables_client_auth_sets_are_serves_options(
    chart: helm_python.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chart sets the variables of `serve`'s options --client-ca-file and --client-names,
    and `serve` reads the values from them."""
    objects = _client_auth_render(chart, "existingConfigMap")
    (c,) = _pod(objects)["containers"]
    env = _env(c)
    assert {CLIENT_CA_FILE_ENV, CLIENT_NAMES_ENV} <= set(env)
    assert CLIENT_CA_FILE_ENV == "GPU_SHARE_WEBHOOK_CLIENT_CA_FILE"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    args = vars(cli.build_parser().parse_args(c["args"]))
    assert args["client_ca_file"] == env[CLIENT_CA_FILE_ENV]
    names_read = args["client_names"]
    if isinstance(names_read, str):
        names_read = names_read.split(",")
    assert list(names_read) == CLIENT_AUTH["existingConfigMap"]["names"]


def test_the_names_a_client_certificate_may_have_default_to_the_servers(
    chart: helm_python.Chart,
) -> None:
    assert chart.values["clientAuth"]["names"] == list(certificates.DEFAULT_CLIENT_NAMES)


@pytest.mark.parametrize("way", list(CLIENT_AUTH))
def test_helm_lint_is_clean_with_client_auth(way: str) -> None:
    report = helm_python.lint(
        CHART, {"clientAuth": CLIENT_AUTH[way]}, namespace=NAMESPACE, strict=True
    )
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize(
    ("client_auth", "message"),
    [
        ({"enabled": True}, "clientAuth.enabled is true, but no CA is given"),
        (
            {"enabled": True, "caBundle": CA_PEM, "existingConfigMap": "site-apiserver-ca"},
            "caBundle and existingConfigMap are both set",
        ),
        ({"enabled": True, "caBundle": "client-ca.crt"}, "clientAuth.caBundle: not a PEM"),
        (
            {"enabled": True, "caBundle": CA_PEM, "names": ["kube-apiserver,other"]},
            "/clientAuth/names/0",
        ),
        (
            {"enabled": True, "caBundle": CA_PEM, "names": [" kube-apiserver"]},
            "/clientAuth/names/0",
        ),
        ({"enabled": True, "caBundle": CA_PEM, "names": []}, "/clientAuth/names"),
        ({"enabled": True, "existingConfigMap": "Site_CA"}, "/clientAuth/existingConfigMap"),
        ({"enabled": "yes"}, "/clientAuth/enabled"),
        ({"enable": True}, "/clientAuth"),
    ],
)
def test_client_auth_values_the_chart_refuses(
    chart: helm_python.Chart, client_auth: dict[str, Any], message: str
) -> None:
    assert message in _refused(chart, {"clientAuth": client_auth})


def test_extra_env_cannot_set_the_client_auth_variables(chart: helm_python.Chart) -> None:
    for name in (CLIENT_CA_FILE_ENV, CLIENT_NAMES_ENV):
        message = _refused(chart, {"extraEnv": [{"name": name, "value": "x"}]})
        assert f"extraEnv: {name} is set by the chart" in message


# --------------------------------------------------------------------------- monitoring


def _metric_names() -> set[str]:
    """Every series name the server's /metrics can show (counters with `_total`, histograms
    with `_bucket`, `_sum` and `_count`)."""
    try:
        module = importlib.import_module("webhook.server.metrics")
    except ModuleNotFoundError:  # before the server moved into webhook/server/
        module = importlib.import_module("webhook.metrics")
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    return {
        family.name + suffix
        for family in module.Metrics().registry.collect()
        for suffix in suffixes.get(family.type, ("",))
    }


def test_monitoring_objects_appear_only_when_enabled(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for name in ("bootstrap", "certManager", "existingSecret"):
        assert not [o for o in rendered[name] if o["apiVersion"].startswith(CRD_GROUPS[1])]
    kinds = [o["kind"] for o in rendered["custom"] if o["apiVersion"].startswith(CRD_GROUPS[1])]
    assert sorted(kinds) == ["PrometheusRule", "ServiceMonitor"]


def test_the_service_monitor_scrapes_the_metrics_port_of_the_service(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["custom"]
    monitor = dh.find(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    service = dh.find(objects, "Service")
    assert dh.selector_matches(monitor["spec"]["selector"], service["metadata"]["labels"])
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [OTHER_NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    ports = {p["name"]: p["containerPort"] for p in _pod(objects)["containers"][0]["ports"]}
    assert ports[port["targetPort"]] == 8080
    assert (endpoint["path"], endpoint["scheme"]) == ("/metrics", "http")


def test_the_alerts_ask_for_series_the_server_exports(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["custom"]
    rule = dh.find(objects, "PrometheusRule")
    (group,) = rule["spec"]["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert set(alerts) == {
        "GpuShareWebhookReviewErrors",
        "GpuShareWebhookSlowReviews",
        "GpuShareWebhookCertificateExpiry",
        "GpuShareWebhookPolicyReloadErrors",
        "GpuShareWebhookDown",
    }
    exported = _metric_names()
    for name, alert in alerts.items():
        expr = alert["expr"]
        assert f'namespace="{OTHER_NAMESPACE}"' in expr, name
        used = set(re.findall(r"\bgpu_share_webhook_\w+", expr))
        assert used <= exported, f"{name}: {used - exported} is not a metric of the server"
        for open_, close in ("()", "{}", "[]"):
            assert expr.count(open_) == expr.count(close), name
        assert alert["labels"]["team"] == "gpu-platform"
        assert alert["labels"]["severity"]
    assert 'decision="error"' in alerts["GpuShareWebhookReviewErrors"]["expr"]
    assert "_bucket" in alerts["GpuShareWebhookSlowReviews"]["expr"]
    assert "< 1814400" in alerts["GpuShareWebhookCertificateExpiry"]["expr"]  # 21 days
    service = dh.find(objects, "Service")["metadata"]["name"]
    assert f'job="{service}"' in alerts["GpuShareWebhookDown"]["expr"]


# --------------------------------------------------------------------------- the docs


def _helm_section() -> str:
    text = INSTALL_GUIDE.read_text(encoding="utf-8")
    match = re.search(r"^## With Helm\n(.*?)(?=^## )", text, flags=re.DOTALL | re.MULTILINE)
    assert match, "docs/install.md has no section '## With Helm'"
    return match.group(1)


def _set_keys(text: str) -> list[str]:
    """The value keys of --set, --set-string and --set-file options in the text."""
    keys = re.findall(
        r"--set(?:-string|-file)?[ =]'?((?:[\w-]|\\\.)+(?:\.(?:[\w-]|\\\.)+)*)=", text
    )
    return sorted(set(keys))


def test_the_install_guide_shows_each_certificate_mode(chart: helm_python.Chart) -> None:
    section = _helm_section()
    assert chart.schema is not None
    modes = chart.schema["properties"]["certificates"]["properties"]["mode"]["enum"]
    for mode in modes:
        if mode != chart.values["certificates"]["mode"]:
            assert f"certificates.mode={mode}" in section, mode
    assert "helm install" in section
    assert "helm upgrade" in section


def test_every_value_the_install_guide_sets_exists(chart: helm_python.Chart) -> None:
    """Each key names a value of the schema (or a key of a map value, such as a file name
    in policies.files)."""
    schema = chart.schema
    assert schema is not None
    keys = _set_keys(_helm_section())
    assert keys
    for key in keys:
        node: Any = schema
        for part in (p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", key)):
            if "$ref" in node:
                node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
            if part in node.get("properties", {}):
                node = node["properties"][part]
                continue
            assert node.get("additionalProperties", True) is not False, f"{key}: no such value"
            break


def test_every_chart_path_the_install_guide_names_exists() -> None:
    for path in sorted(set(re.findall(r"\bcharts/[\w./-]*\w", _helm_section()))):
        assert (dh.REPO / Path(path)).exists(), path


# --------------------------------------------------------------------------- the Values example


def _values_example() -> tuple[list[str], dict[str, Any]]:
    """docs/install.md's "Values" example: the words of its `helm upgrade` and the YAML of
    its site-values.yaml."""
    section = _helm_section().split("### Values", 1)[1]
    command = re.search(r"^\s+helm upgrade .*?(?<!\\)$", section, flags=re.DOTALL | re.MULTILINE)
    assert command, "the Values example has no helm upgrade"
    words = shlex.split(command.group(0).replace("\\\n", " "))
    block = re.search(r"with `site-values.yaml`:\n\n```yaml\n(.*?)```", section, flags=re.DOTALL)
    assert block, "the Values example has no site-values.yaml"
    return words, yaml.safe_load(block.group(1))


def _helm_values(
    words: Sequence[str],
    files: Mapping[str, Any],
    texts: Mapping[str, str],
) -> dict[str, Any]:
    """The values of `-f`, `--set` and `--set-file` options, as Helm merges them (in order)."""
    values: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        parts = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", key)]
        node = values
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value

    def merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
        for k, v in extra.items():
            if isinstance(v, Mapping) and isinstance(into.get(k), dict):
                merge(into[k], v)
            else:
                into[k] = copy.deepcopy(v)

    i = 0
    while i < len(words):
        word = words[i]
        if word in ("-f", "--values"):
            merge(values, files[words[i + 1]])
            i += 2
        elif word in ("--set", "--set-file"):
            key, _, value = words[i + 1].partition("=")
            put(key, texts[value] if word == "--set-file" else yaml.safe_load(value))
            i += 2
        else:
            i += 1
    return values


def test_the_values_example_installs_what_its_text_says(
    chart: helm_python.Chart, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rendered with the real chart: the release runs the site's policy alone (the one its
    `policy check --nodes` checked, so no shipped class fails on the site's nodes), and each
    value shown changes the release."""
    words, site_values = _values_example()
    site_file = dh.DEPLOY / "examples" / "site-policies" / "policies" / "default.yaml"
    (path,) = [w.split("=", 1)[1] for w in words if w.startswith("policies.files.")]
    texts = {path: site_file.read_text(encoding="utf-8")}
    values = _helm_values(words, {"site-values.yaml": site_values}, texts)
    objects = _render(chart, values, RELEASE, NAMESPACE)
    installed = _policy_files(objects)
    assert installed == {"default.yaml": texts[path]}
    names = _policy_set(objects).names
    assert names == ["default"]
    for configuration in _configurations(objects):
        policies_of_entries = {
            w["clientConfig"]["service"]["path"].split("/")[2] for w in configuration["webhooks"]
        }
        assert policies_of_entries == {"default", names_mod.UNKNOWN_POLICY_PATH}
    # What the release installs passes the check the text runs first, on nodes of the site.
    directory = tmp_path / "installed"
    directory.mkdir()
    for name, text in installed.items():
        (directory / name).write_text(text, encoding="utf-8")
    dump = nodes.write(
        tmp_path, [nodes.node("gpu-t4-1", nodes.T4_MPS), nodes.node("gpu-a10g-1", nodes.A10G_TS)]
    )
    code = cli.main(["policy", "check", str(directory), "--nodes", str(dump)])
    assert code == tools.EXIT_OK, capsys.readouterr()
    # Monitoring on, with the labels shown; scrapes from the namespace shown.
    assert dh.find(objects, "ServiceMonitor")["metadata"]["labels"]["release"] == (
        "kube-prometheus-stack"
    )
    assert dh.find(objects, "PrometheusRule")["metadata"]["labels"]["release"] == (
        "kube-prometheus-stack"
    )
    assert dh.ingress_admits(
        dh.find(objects, "NetworkPolicy", RELEASE),
        8080,
        namespace=dh.namespace_labels("observability"),
        pod={"app.kubernetes.io/name": "prometheus"},
    )
    # Every value shown has an effect: without it the release differs.
    baseline = _dumped(objects)
    for key in _leaf_keys(site_values):
        fewer = copy.deepcopy(values)
        node = fewer
        for part in key[:-1]:
            node = node[part]
        del node[key[-1]]
        assert _dumped(_render(chart, fewer, RELEASE, NAMESPACE)) != baseline, key


# safe_dump_all's representer with libyaml's emitter where PyYAML has it: the same documents
# make the same text, other documents other text, and the pure-Python emitter took most of a
# render's time on a whole release.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _dumped(objects: Sequence[Mapping[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_DUMPER)


def _leaf_keys(node: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The keys of a values mapping down to its lists and scalars."""
    out = []
    for key, value in node.items():
        if isinstance(value, Mapping):
            out += _leaf_keys(value, (*prefix, key))
        else:
            out.append((*prefix, key))
    return out


# --------------------------------------------------------------------------- dra
#
# charts/gpu-share-webhook and a policy's `dra` section: the claim conditions the chart
# writes for it (the GPU classes of the section, as `gpu-share-webhook render` lists them), held
# to render's, and its check of capacity ceilings (the grammar of quantities, the schema's),
# held to `policy check`'s.
#
# The tables of bad policies above have a case for each kind of problem; here the quantities
# are judged at their bounds and at random, and the conditions for random lists of classes.


def _policy(dra: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-share.io/v1alpha1",
        "kind": "SharingPolicy",
        "metadata": {"name": "site"},
        "spec": {
            "nodeClasses": [
                {"name": "t4", "product": "Tesla-T4", "strategy": "time-slicing", "replicas": 4}
            ],
            "dra": dict(dra),
        },
    }


# --------------------------------------------------------------------------- capacity ceilings

# Quantities at the edges of what quantities.parse takes: the grammar, the sign, the bound of
# 2^63-1 in each form (whole, with a decimal suffix, an exponent, a fraction, each binary
# suffix), the exponent's own bound; and values `policy check` quotes with care.
EDGE_QUANTITIES = [
    # The grammar.
    "8Gi", "500m", "1", "0", "1.", ".5", ".", "+", "-", "-0", "+1", "1e3", "1E3", "1e+3",
    "1e-3", "1E", "1e", "1ki", "1K", "1k", "1Ki", "1 Gi", " 1", "1 ", "0x10", "1_000",
    "1.5.3", "1e3.5", "e3", "Ki", "1Gib", "1.5Gi", "00012", "\uff11", "1e3Gi",
    # The sign: negative unless zero, however small.
    "-1", "-8Gi", "-0.0", "-000", "-1n", "-1e-30", "-0.0000000001", "-1e-2147483647",
    # Whole numbers.
    "9223372036854775807", "9223372036854775808", "09223372036854775807",
    "99999999999999999999", "-9223372036854775807", "-9223372036854775808",
    "9223372036854775807.0", "9223372036854775807.000000001",
    # Decimal suffixes and exponents.
    "9.223372036854775807E", "9.223372036854775808E", "9223372036854775807000m",
    "9223372036854775807001m", "9223372036854.775807M", "9223372036854.775808M",
    "92233720368547758070e-1", "92233720368547758071e-1", "9223372036854775807e0",
    "9.223372036854775807e18", "9.223372036854775808e18", "1e18", "1e19", "10E",
    "1e2147483647", "1e2147483648", "1e-2147483648", "0e2147483648", "1e-2147483647",
    "1e0000000000002147483647", "1e-40", "1e-9n",
    # Binary suffixes: the largest whole part, its largest fraction, and just above.
    "7Ei", "8Ei", "7.999999999999999999132638262011596452794037759304046630859375Ei",
    "7.999999999999999999132638262011596452794037759304046630859376Ei",
    "7.99999999999999999913263826201159645279403775930404663085937Ei",
    "8191Pi", "8191.99999999999999911182158029987476766109466552734375Pi",
    "8191.99999999999999911182158029987476766109466552734376Pi", "8192Pi",
    "8388607Ti", "8388608Ti", "8589934591Gi", "8589934591.9999999991Gi", "8589934592Gi",
    "8796093022207.99999904632568359375Mi", "8796093022207.99999904632568359376Mi",
    "9007199254740991.9990234375Ki", "9007199254740991.9990234376Ki", "9007199254740992Ki",
    "0009007199254740991.99902343750Ki", "99999999999999999999Ki",
    # What `policy check` writes as Python's repr.
    "it's", 'say "hi"', "it's \"quoted\"", "back\\slash", "tab\there",
]  # fmt: skip


def _capacities(values: Sequence[str]) -> dict[str, str]:
    """Capacity ceilings of `values`, named q0, q1, ... and, from the third on, every other one
    with a domain (which `policy check` places at the class when its validator speaks)."""
    return {
        (f"example.com/q{i}" if i > 1 and i % 2 else f"q{i}"): value
        for i, value in enumerate(values)
    }


def _in_grammar(value: str) -> bool:
    """Whether the schema takes `value` as a capacity ceiling: the grammar of quantities, at
    most MAX_LENGTH characters."""
    return 0 < len(value) <= quantities.MAX_LENGTH and bool(quantities.GRAMMAR.fullmatch(value))


def _capacity_lines(chart: helm_python.Chart, values: Sequence[str]) -> tuple[list[str], ...]:
    """(the chart's problems, `policy check`'s) with the ceilings `values` (`_capacities`):
    those outside the grammar in one class, the others in another (a field outside the
    grammar keeps `policy check` from judging the range of the class's others)."""
    capacities = _capacities(values)
    outside = {n: v for n, v in capacities.items() if not _in_grammar(v)}
    inside = {n: v for n, v in capacities.items() if n not in outside}
    doc = _policy(
        {
            "deviceClasses": [
                {"name": "gpu.nvidia.com", "capacity": outside},
                {"name": "mig.nvidia.com", "capacity": inside},
            ]
        }
    )
    # The mapping: Helm takes the strings as they are (in a file's text it reads 1e3 as a
    # number, and leaves the file to the server).
    charted = sorted(_chart_problems(chart, doc))
    checked = sorted(_checked(yaml.safe_dump(doc)))
    return charted, checked


def _outside_grammar(values: Sequence[str]) -> set[tuple[str, str]]:
    """(file, field) of each ceiling the schema refuses."""
    return {
        ("site.yaml", f"spec.dra.deviceClasses[0].capacity.{name}")
        for name, value in _capacities(values).items()
        if not _in_grammar(value)
    }


def test_the_chart_refuses_a_capacity_ceiling_outside_the_grammar_as_policy_check_does(
    chart: helm_python.Chart,
) -> None:
    """The grammar and the length are the schema's: both refuse those values, at the same
    place. Whether a quantity is in range, and not negative, `policy check` alone says."""
    charted, checked = _capacity_lines(chart, EDGE_QUANTITIES)
    outside = _outside_grammar(EDGE_QUANTITIES)
    assert _fields(charted) == outside
    assert outside <= _fields(checked)
    text = "\n".join(checked)
    assert quantities.NOT_A_QUANTITY in text
    # What only `policy check` refuses (a domain's at the class).
    for reason in (quantities.NEGATIVE, quantities.OUT_OF_RANGE, quantities.EXPONENT_OUT_OF_RANGE):
        assert reason in text
        assert reason not in "\n".join(charted)
    assert "spec.dra.deviceClasses[1]: capacity.example.com/q" in text
    # And every value the server takes passes.
    good = [v for v in EDGE_QUANTITIES if _takes(v)]
    assert len(good) > 40
    assert _capacity_lines(chart, good) == ([], [])


def _takes(value: str) -> bool:
    try:
        return quantities.parse(value) >= 0
    except quantities.QuantityError:
        return False


_DIGITS = st.text("0123456789", max_size=24)
_QUANTITY_LIKE = st.builds(
    lambda sign, whole, fraction, tail: f"{sign}{whole}{fraction}{tail}",
    st.sampled_from(["", "", "+", "-"]),
    _DIGITS,
    st.one_of(st.just(""), _DIGITS.map(lambda d: f".{d}")),
    st.one_of(
        st.sampled_from(["", "", "m", "k", "M", "G", "E", "n", "Ki", "Gi", "Pi", "Ei", "e", "K"]),
        st.builds(lambda s, d: f"e{s}{d}", st.sampled_from(["", "+", "-"]), _DIGITS),
    ),
)
_ANY_TEXT = st.text("0123456789+-.eEinumkKMGTP \n", min_size=1, max_size=12)


@pytest.mark.slow  # twenty renders and `policy check`s
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(
        st.one_of(_QUANTITY_LIKE, _ANY_TEXT).filter(lambda v: 0 < len(v) <= 70),
        min_size=1,
        max_size=60,
    )
)
def test_random_capacity_ceilings_outside_the_grammar_are_refused_as_policy_check_does(
    chart: helm_python.Chart, values: list[str]
) -> None:
    charted, checked = _capacity_lines(chart, values)
    outside = _outside_grammar(values)
    assert _fields(charted) == outside
    assert outside <= _fields(checked)


# --------------------------------------------------------------------------- class names


@pytest.mark.parametrize(("plain", "helm_reads"), [("y", "true"), ("1e3", "1000")])
def test_a_class_name_helm_reads_otherwise_must_be_quoted(
    chart: helm_python.Chart, plain: str, helm_reads: str
) -> None:
    """The chart lists the classes in the conditions, so it must read their names as the
    server does; `policy check` takes them as they are."""
    text = yaml.safe_dump(_policy({"deviceClasses": [{"name": "PLAIN", "allowed": True}]}))
    assert _checked(text.replace("PLAIN", plain)) == []
    assert _chart_problems(chart, text.replace("PLAIN", plain)) == [
        f"site.yaml: spec.dra.deviceClasses[0].name: Helm reads this name as {helm_reads},"
        " not as text: put it in quotes"
    ]
    quoted = text.replace("PLAIN", f"'{plain}'")
    objects = _render(chart, {"policies": {"files": {"site.yaml": quoted}}}, RELEASE, NAMESPACE)
    for configuration in _configurations(objects):
        (entry,) = [
            e for e in configuration["webhooks"] if e["name"] == "site.policies.gpu-share.io"
        ]
        listed = ", ".join(f"'{c}'" for c in sorted([plain, *names.DRA_NVIDIA_CLASSES]))
        assert f"deviceClassName in [{listed}]" in entry["matchConditions"][1]["expression"]


# --------------------------------------------------------------------------- the conditions


def _named_policy(name: str, dra: Mapping[str, Any] | None) -> dict[str, Any]:
    """`_policy` named `name`; without a dra section when `dra` is None."""
    doc = _policy(dra or {})
    doc["metadata"]["name"] = name
    if dra is None:
        del doc["spec"]["dra"]
    return doc


def _claims_by_entry(objects: Sequence[Mapping[str, Any]]) -> dict[str, list[str] | None]:
    """The classes each pod entry sends claims of (None: none), the same in both
    configurations (asserted)."""
    mutating, validating = [
        {
            e["name"]: _claim_classes(e["matchConditions"][1]["expression"])
            for e in dh.pod_entries(c)
        }
        for c in _configurations(objects)
    ]
    assert mutating == validating
    return mutating


def _as_render_prints(objects: Sequence[Mapping[str, Any]], values: Mapping[str, Any]) -> None:
    expected = _expected_configurations(objects, values, RELEASE, NAMESPACE)
    for want, have in zip(expected, _configurations(objects), strict=True):
        assert have["webhooks"] == want["webhooks"]


def test_a_class_one_policy_lists_is_a_gpu_class_of_every_policy_with_a_dra_section(
    chart: helm_python.Chart,
) -> None:
    """`DraPolicy.gpu_classes`: team-a lists a100 (allowed), team-b lists nothing but has a
    dra section, so team-b's namespaces may not ask for a100 either: its claims must reach
    the webhook. A policy without a dra section still sends none."""
    values = {
        "policies": {
            "files": {
                "team-a.yaml": _named_policy(
                    "team-a", {"deviceClasses": [{"name": "a100.example.com", "allowed": True}]}
                ),
                "team-b.yaml": _named_policy("team-b", {"deviceClasses": []}),
                "team-c.yaml": _named_policy("team-c", None),
            }
        }
    }
    for doc in values["policies"]["files"].values():
        assert _checked(yaml.safe_dump(doc)) == []
    objects = _render(chart, values, RELEASE, NAMESPACE)
    _as_render_prints(objects, values)
    gpu = sorted(["a100.example.com", *names.DRA_NVIDIA_CLASSES])
    claims = _claims_by_entry(objects)
    for entry in (
        "team-b.policies.gpu-share.io",
        "team-b.baseline.policies.gpu-share.io",
        # The shipped dra policy lists NVIDIA's only.
        "dra.policies.gpu-share.io",
        "team-a.policies.gpu-share.io",
    ):
        assert claims[entry] == gpu, entry
    # (And a policy without a dra section is sent them too, to refuse them.)
    assert claims["team-c.policies.gpu-share.io"] == gpu
    assert claims["team-c.baseline.policies.gpu-share.io"] == gpu


def test_the_entries_of_no_policy_in_force_send_the_claims_of_every_gpu_class(
    chart: helm_python.Chart,
) -> None:
    """`PolicySet.gpu_classes`: a namespace labelled for no policy, or unlabelled where there is
    no default policy, is sent the claims of NVIDIA's classes and of every class any policy
    lists, to refuse them saying why; not only of NVIDIA's, not none."""
    values = {
        "policies": {
            "shipped": False,
            "files": {
                "one.yaml": _named_policy(
                    "one", {"deviceClasses": [{"name": "a100.example.com", "allowed": True}]}
                ),
                "two.yaml": _named_policy("two", {"deviceClasses": [{"name": "z.example.org"}]}),
                "three.yaml": _named_policy("three", None),
            },
        }
    }
    objects = _render(chart, values, RELEASE, NAMESPACE)
    _as_render_prints(objects, values)
    gpu = sorted(["a100.example.com", "z.example.org", *names.DRA_NVIDIA_CLASSES])
    claims = _claims_by_entry(objects)
    for entry in (
        "unknown-policy.gpu-share.io",
        "unknown-policy.baseline.gpu-share.io",
        "default.gpu-share.io",
        "default.baseline.gpu-share.io",
    ):
        assert claims[entry] == gpu, entry
    # With a default policy without a dra section, its entry is sent them too (to refuse
    # them), and with no policy listing any class, every entry NVIDIA's.
    values["policies"]["files"] = {"default.yaml": _named_policy("default", None)}
    objects = _render(chart, values, RELEASE, NAMESPACE)
    _as_render_prints(objects, values)
    claims = _claims_by_entry(objects)
    assert claims["default.gpu-share.io"] == sorted(names.DRA_NVIDIA_CLASSES)
    assert claims["unknown-policy.gpu-share.io"] == sorted(names.DRA_NVIDIA_CLASSES)


_CLASS_NAMES = st.one_of(
    st.sampled_from(
        [
            *names.DRA_NVIDIA_CLASSES,
            "a.example.com",
            "gpu.nvidia.com.example",
            "gpu-nvidia.com",
            "gpu.nvidia.co",
            "z",
            "0gpu",
            "nvidia.com",
            "vfio.gpu.nvidia.com-2",
        ]
    ),
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\.[a-z0-9]{1,6}){0,2}", fullmatch=True),
)


@pytest.mark.slow  # thirty renders
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(classes=st.lists(_CLASS_NAMES, unique=True, max_size=6))
def test_the_claim_conditions_are_renders_for_any_classes(
    chart: helm_python.Chart, classes: list[str]
) -> None:
    """Listed or not, NVIDIA's or not, in any order: the chart's conditions are render's."""
    doc = _policy({"deviceClasses": [{"name": c} for c in classes]})
    assert _checked(yaml.safe_dump(doc)) == []
    values = {"policies": {"files": {"site.yaml": doc}}}
    objects = _render(chart, values, RELEASE, NAMESPACE)
    expected = _expected_configurations(objects, values, RELEASE, NAMESPACE)
    for want, have in zip(expected, _configurations(objects), strict=True):
        assert [e["matchConditions"] for e in dh.pod_entries(have)] == [
            e["matchConditions"] for e in dh.pod_entries(want)
        ]
