"""deploy/, the Dockerfile and docs/install.md: what an admin installs, checked with the tools
an admin would use (kubectl kustomize, kubernetes-validate, checkov, hadolint).

Every build is made once per module with `kubectl kustomize`; checkov's run over them and
the Dockerfile is tests/deploy/test_checkov.py's.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support import deploy_helpers as dh
from tests.support import nodes
from tests.support import server_helpers as sh
from tests.support.certs_helpers import (
    MUTATING_PATH,
    VALIDATING_PATH,
    FakeKubernetes,
    webhook,
    write_kubeconfig,
)
from webhook import __version__, cli, tools
from webhook.policy import policies
from webhook.server import certificates, serving
from webhook.tools import DEFAULT_NAMESPACE, DEFAULT_SERVICE, DEFAULT_WEBHOOK_NAME, rendering

NAMESPACE = DEFAULT_NAMESPACE
TLS_SECRET = "gpu-share-webhook-tls"
CERTS_ACCOUNT = "gpu-share-webhook-certs"
SERVER_ACCOUNT = "gpu-share-webhook"
CERT_MANAGER_GROUP = "cert-manager.io"


@pytest.fixture(scope="module")
def built() -> dict[str, list[dict[str, Any]]]:
    return {name: dh.kustomize(path) for name, path in dh.BUILDS.items()}


def install_params() -> list[Any]:
    return [pytest.param(name, id=name) for name in dh.INSTALLS]


def _render(shipped: policies.PolicySet, **options: Any) -> list[dict[str, Any]]:
    return rendering.render(
        shipped,
        service=DEFAULT_SERVICE,
        namespace=NAMESPACE,
        name=DEFAULT_WEBHOOK_NAME,
        **options,
    )


def _server_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = dh.find(objects, "Deployment", "gpu-share-webhook")
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(c)


# --------------------------------------------------------------------------- building


def test_each_install_holds_the_parts_the_spec_lists(
    built: dict[str, list[dict[str, Any]]],
) -> None:
    base = {
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
    assert set(dh.kinds(built["cert-manager"])) == base | {"Issuer", "Certificate"}
    assert set(dh.kinds(built["bootstrap"])) == (
        base | dh.RBAC_KINDS | dh.SECRET_POLICY_KINDS | {"Job"})
    assert dh.kinds(built["runtimeclass-nvidia"]) == ["RuntimeClass"]


def test_the_policies_kustomization_lists_every_policy_file() -> None:
    # deploy/base takes the ConfigMap from policies/kustomization.yaml, so that plain
    # `kubectl apply -k` works and policies/ stays the one copy; kustomize has no globs.
    (kustomization,) = dh.load_yaml(dh.POLICIES / "kustomization.yaml")
    (generator,) = kustomization["configMapGenerator"]
    assert sorted(generator["files"]) == [p.name for p in policies.policy_files(dh.POLICIES)]


@pytest.mark.slow  # every object against two versions' schemas
@pytest.mark.parametrize("version", dh.VERSIONS)
@pytest.mark.parametrize("build", list(dh.BUILDS))
def test_every_rendered_object_validates_strictly(
    built: dict[str, list[dict[str, Any]]], build: str, version: str
) -> None:
    checked = 0
    for obj in built[build]:
        if obj["apiVersion"].startswith(CERT_MANAGER_GROUP + "/"):
            continue  # a CRD kubernetes-validate has no schema for: see the cert-manager test
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked > 0


def test_namespaced_objects_live_in_the_webhooks_namespace(
    built: dict[str, list[dict[str, Any]]],
) -> None:
    for objects in built.values():
        for obj in objects:
            if obj["kind"] in dh.CLUSTER_SCOPED:
                assert "namespace" not in obj["metadata"], obj["kind"]
            else:
                assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]


# --------------------------------------------------------------------------- webhook configurations


def test_committed_configurations_are_what_render_gives_now(
    shipped_policies: policies.PolicySet,
) -> None:
    committed = dh.load_yaml(dh.COMMITTED_CONFIGURATIONS)
    assert committed == _render(shipped_policies), (
        "deploy/base/webhook-configurations.yaml is stale: run"
        " `gpu-share-webhook render > deploy/base/webhook-configurations.yaml`"
    )


def test_the_bootstrap_install_carries_the_rendered_configurations(
    built: dict[str, list[dict[str, Any]]], shipped_policies: policies.PolicySet
) -> None:
    got = [o for o in built["bootstrap"] if o["kind"].endswith("WebhookConfiguration")]
    assert got == _render(shipped_policies)


def test_the_cert_manager_install_carries_them_with_the_injection_annotation(
    built: dict[str, list[dict[str, Any]]], shipped_policies: policies.PolicySet
) -> None:
    objects = built["cert-manager"]
    serving = [
        c for c in objects if c["kind"] == "Certificate" and c["spec"]["secretName"] == TLS_SECRET
    ]
    assert len(serving) == 1
    source = f"{NAMESPACE}/{serving[0]['metadata']['name']}"
    got = [o for o in objects if o["kind"].endswith("WebhookConfiguration")]
    assert got == _render(shipped_policies, cert_manager_certificate=source)


def test_the_configurations_call_the_service_the_install_makes(
    built: dict[str, list[dict[str, Any]]],
) -> None:
    for name in dh.INSTALLS:
        objects = built[name]
        service = dh.find(objects, "Service", DEFAULT_SERVICE)
        https = [p for p in service["spec"]["ports"] if p["port"] == 443]
        assert len(https) == 1
        ports = {p["name"]: p["containerPort"] for p in _server_container(objects)["ports"]}
        assert ports[https[0]["targetPort"]] == 8443
        for config in objects:
            if config["kind"].endswith("WebhookConfiguration"):
                for e in config["webhooks"]:
                    ref = e["clientConfig"]["service"]
                    assert (ref["name"], ref["namespace"], ref["port"]) == (
                        DEFAULT_SERVICE,
                        NAMESPACE,
                        443,
                    )


# --------------------------------------------------------------------------- policies


def test_the_policies_configmap_holds_exactly_the_files_of_policies(
    built: dict[str, list[dict[str, Any]]],
) -> None:
    files = {p.name: p.read_text(encoding="utf-8") for p in policies.policy_files(dh.POLICIES)}
    assert files
    for name in dh.INSTALLS:
        objects = built[name]
        (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
        assert configmap["metadata"]["name"].startswith("gpu-share-webhook-policies-")
        assert configmap["data"] == files, (
            "policies/kustomization.yaml must list every policy file"
        )
        volumes = dh.find(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
        mounted = [v["configMap"]["name"] for v in volumes if "configMap" in v]
        assert mounted == [configmap["metadata"]["name"]]


def test_the_configmaps_policies_pass_policy_check(
    built: dict[str, list[dict[str, Any]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    shipped_policies: policies.PolicySet,
) -> None:
    (configmap,) = [o for o in built["bootstrap"] if o["kind"] == "ConfigMap"]
    for name, text in configmap["data"].items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert cli.main(["policy", "check", str(tmp_path)]) == 0, capsys.readouterr().err
    assert policies.load_directory(tmp_path).names == shipped_policies.names


# --------------------------------------------------------------------------- the server


@pytest.fixture(scope="module")
def server(built: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return dict(dh.find(built["bootstrap"], "Deployment", "gpu-share-webhook"))


def test_the_server_runs_at_least_two_replicas_spread_over_nodes(server: dict[str, Any]) -> None:
    spec = server["spec"]
    assert spec["replicas"] >= 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod_labels = spec["template"]["metadata"]["labels"]
    spread = spec["template"]["spec"]["topologySpreadConstraints"]
    by_node = [s for s in spread if s["topologyKey"] == "kubernetes.io/hostname"]
    assert len(by_node) == 1
    assert by_node[0]["whenUnsatisfiable"] == "DoNotSchedule"
    assert by_node[0]["maxSkew"] == 1
    assert dh.selector_matches(by_node[0]["labelSelector"], pod_labels)


def test_a_disruption_budget_keeps_one_replica(
    built: dict[str, list[dict[str, Any]]], server: dict[str, Any]
) -> None:
    pdb = dh.find(built["bootstrap"], "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == server["spec"]["selector"]


def test_the_server_is_hardened(server: dict[str, Any]) -> None:
    pod = server["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = pod["containers"][0]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    for key in ("cpu", "memory"):
        assert key in c["resources"]["requests"]
        assert key in c["resources"]["limits"]


def test_probes_ask_the_plain_http_port(server: dict[str, Any]) -> None:
    c = server["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe"):
        assert ports[c[probe]["httpGet"]["port"]] == 8080


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def test_serve_reads_what_the_deployment_mounts(
    server: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = server["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = _env(c)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = cli.build_parser().parse_args(c["args"])
    assert args.command == "serve"
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "configMap" in volumes[mounts[args.policies]]
    assert volumes[mounts[args.cert_dir]]["secret"]["secretName"] == TLS_SECRET
    assert "emptyDir" in volumes[mounts["/tmp"]]
    # The last good policies: in an emptyDir, which a restarted container finds again.
    assert "emptyDir" in volumes[mounts[args.state_dir]]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert (args.port, args.metrics_port) == (ports["https"], ports["metrics"])
    # The server alone listens on 127.0.0.1, which neither the Service nor the kubelet's
    # probes reach: the Deployment sets every address.
    assert env["GPU_SHARE_WEBHOOK_HOST"] == "0.0.0.0"
    assert args.host == "0.0.0.0"
    # Only /tmp and the state directory are written; the others are read-only mounts.
    written = {"/tmp", args.state_dir}
    assert all(m.get("readOnly") for m in c["volumeMounts"] if m["mountPath"] not in written)


def test_images_are_the_packages_release(built: dict[str, list[dict[str, Any]]]) -> None:
    images = {
        c["image"]
        for objects in built.values()
        for o in objects
        if o["kind"] in ("Deployment", "Job")
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"gpu-share-webhook:{__version__}"}


def test_a_site_kustomization_sets_the_image_as_the_install_guide_shows(tmp_path: Path) -> None:
    overlay = os.path.relpath(dh.BUILDS["bootstrap"], tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"resources: [{overlay}]\n"
        "images:\n"
        "  - name: gpu-share-webhook\n"
        "    newName: registry.example.com/gpu-share-webhook\n"
        '    newTag: "9.9.9"\n',
        encoding="utf-8",
    )
    objects = dh.kustomize(tmp_path)
    images = {
        c["image"]
        for o in objects
        if o["kind"] in ("Deployment", "Job")
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example.com/gpu-share-webhook:9.9.9"}


PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}


def test_the_network_policy_admits_anyone_to_admission_and_prometheus_to_metrics(
    built: dict[str, list[dict[str, Any]]], server: dict[str, Any]
) -> None:
    policy = dh.find(built["bootstrap"], "NetworkPolicy", "gpu-share-webhook")
    assert dh.selector_matches(
        policy["spec"]["podSelector"], server["spec"]["template"]["metadata"]["labels"]
    )
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"] == []
    anyone = dh.namespace_labels("team-a")
    # 8443: the API server, whose address is not known, so any source at all.
    assert dh.ingress_admits(policy, 8443, namespace=anyone, pod=None)
    assert dh.ingress_admits(policy, 8443, namespace=anyone, pod={"app": "x"})
    # 8080: Prometheus in `monitoring`, and nothing else that policy can govern.
    assert dh.ingress_admits(policy, 8080, namespace=dh.MONITORING, pod=PROMETHEUS)
    assert not dh.ingress_admits(policy, 8080, namespace=dh.MONITORING, pod={"app": "grafana"})
    assert not dh.ingress_admits(policy, 8080, namespace=anyone, pod=PROMETHEUS)
    assert not dh.ingress_admits(policy, 8080, namespace=anyone, pod=None)
    own = dh.namespace_labels(NAMESPACE)
    assert not dh.ingress_admits(policy, 8080, namespace=own, pod={"app": "x"})
    # No selector in the 8080 rule may be empty (an empty one matches everything).
    (metrics,) = [r for r in policy["spec"]["ingress"] if r.get("from")]
    for peer in metrics["from"]:
        assert all(selector.get("matchLabels") or selector.get("matchExpressions")
                   for selector in peer.values())
    # No other port, from anyone.
    assert not dh.ingress_admits(policy, 9999, namespace=dh.MONITORING, pod=PROMETHEUS)


def test_the_probes_and_scrapes_go_to_the_port_the_network_policy_narrows(
    built: dict[str, list[dict[str, Any]]], server: dict[str, Any]
) -> None:
    policy = dh.find(built["bootstrap"], "NetworkPolicy", "gpu-share-webhook")
    c = server["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    narrowed = {p["port"] for r in policy["spec"]["ingress"] if r.get("from") for p in r["ports"]}
    open_ = {p["port"] for r in policy["spec"]["ingress"] if not r.get("from") for p in r["ports"]}
    assert (narrowed, open_) == ({ports["metrics"]}, {ports["https"]})


def _doc_yaml_blocks() -> list[str]:
    text = (dh.REPO / "docs" / "install.md").read_text(encoding="utf-8")
    return re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)


def test_a_site_overlay_changes_who_may_scrape_as_the_install_guide_shows(
    tmp_path: Path,
) -> None:
    (block,) = [b for b in _doc_yaml_blocks() if "kind: NetworkPolicy" in b]
    site = yaml.safe_load(block)
    site["resources"] = [os.path.relpath(dh.BUILDS["bootstrap"], tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(site), encoding="utf-8")
    objects = dh.kustomize(tmp_path)
    policy = dh.find(objects, "NetworkPolicy", "gpu-share-webhook")
    for version in dh.VERSIONS:
        kubernetes_validate.validate(policy, version, strict=True)
    (patch,) = [p for p in site["patches"] if p["target"]["kind"] == "NetworkPolicy"]
    (replace,) = [op for op in yaml.safe_load(patch["patch"]) if op["op"] == "replace"]
    (metrics,) = [r for r in policy["spec"]["ingress"] if r.get("from")]
    assert metrics["from"] == replace["value"]
    assert {p["port"] for p in metrics["ports"]} == {8080}
    # The admission rule is untouched, and the scrapers the guide names get in.
    anyone = dh.namespace_labels("team-a")
    assert dh.ingress_admits(policy, 8443, namespace=anyone, pod=None)
    assert dh.ingress_admits(policy, 8080, namespace=dh.namespace_labels("observability"),
                             pod=PROMETHEUS)
    assert not dh.ingress_admits(policy, 8080, namespace=dh.MONITORING, pod=PROMETHEUS)


def test_the_server_has_no_api_access(built: dict[str, list[dict[str, Any]]]) -> None:
    for name in dh.INSTALLS:
        objects = built[name]
        account = dh.find(objects, "ServiceAccount", SERVER_ACCOUNT)
        assert account["automountServiceAccountToken"] is False
        for binding in objects:
            if binding["kind"] in ("RoleBinding", "ClusterRoleBinding"):
                names = {s["name"] for s in binding["subjects"]}
                assert SERVER_ACCOUNT not in names
    assert not dh.RBAC_KINDS & set(dh.kinds(built["cert-manager"]))


# --------------------------------------------------------------------------- certificates


def test_the_bootstrap_job_runs_the_agreed_certs_command(
    built: dict[str, list[dict[str, Any]]],
) -> None:
    job = dh.find(built["bootstrap"], "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == CERTS_ACCOUNT
    (c,) = pod["containers"]
    args = cli.build_parser().parse_args(c["args"])
    assert args.command == "certs"
    assert (args.service, args.namespace, args.secret) == (DEFAULT_SERVICE, NAMESPACE, TLS_SECRET)
    assert args.inject_ca is True
    assert args.mutating_webhook == args.validating_webhook == DEFAULT_WEBHOOK_NAME
    assert args.dir.startswith("/tmp/")
    assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"])
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def _rules(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return list(dh.find(objects, kind, CERTS_ACCOUNT)["rules"])


def test_the_bootstrap_job_has_the_least_rbac_it_needs(
    built: dict[str, list[dict[str, Any]]],
) -> None:
    objects = built["bootstrap"]
    assert _rules(objects, "Role") == [
        # Read and replace (PUT) the serving Secret, by name; the command never patches it.
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [TLS_SECRET],
            "verbs": ["get", "update"],
        },
        # create cannot be limited by name (a POST is authorized before its body is read):
        # the admission policy below limits it.
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    assert _rules(objects, "ClusterRole") == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
            "resourceNames": [DEFAULT_WEBHOOK_NAME],
            "verbs": ["get", "patch"],
        }
    ]
    for kind in ("Role", "ClusterRole"):
        for rule in _rules(objects, kind):
            assert "*" not in str(rule)
            # Every rule is limited by name, except create, which cannot be.
            assert rule.get("resourceNames") or rule["verbs"] == ["create"], rule
    for kind, role in (("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")):
        binding = dh.find(objects, kind, CERTS_ACCOUNT)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role,
            "name": CERTS_ACCOUNT,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": CERTS_ACCOUNT, "namespace": NAMESPACE}
        ]


def _certs_username(objects: list[dict[str, Any]]) -> str:
    job = dh.find(objects, "Job")
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    return f"system:serviceaccount:{job['metadata']['namespace']}:{account}"


def _secret(name: str, type_: str = "kubernetes.io/tls") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": type_,
        "data": {"tls.crt": "", "tls.key": ""},
    }


def test_the_jobs_account_may_create_the_serving_secret_and_no_other(
    built: dict[str, list[dict[str, Any]]],
) -> None:
    objects = built["bootstrap"]
    job = _certs_username(objects)

    def refused(secret: dict[str, Any], username: str = job, namespace: str = NAMESPACE) -> bool:
        return dh.secret_policy_refuses(objects, secret, username=username, namespace=namespace)

    assert not refused(_secret(TLS_SECRET))
    assert refused(_secret("anything-else"))
    assert refused(_secret(TLS_SECRET + "-2"))
    # A Secret that the server would mount but that is no TLS pair.
    assert refused(_secret(TLS_SECRET, "Opaque"))
    # Nobody else is affected: an admin, the server's account, another namespace.
    assert not refused(_secret("anything-else"), "kubernetes-admin")
    assert not refused(
        _secret("anything-else"), f"system:serviceaccount:{NAMESPACE}:{SERVER_ACCOUNT}"
    )
    assert not refused(_secret("anything-else"), namespace="team-a")
    # The cert-manager install needs none of it: cert-manager creates its Secrets itself.
    assert not dh.SECRET_POLICY_KINDS & set(dh.kinds(built["cert-manager"]))


async def test_the_bootstrap_job_runs_on_exactly_the_rights_it_is_granted(
    built: dict[str, list[dict[str, Any]]], aiohttp_server: Any, tmp_path: Path
) -> None:
    """The Job's command, against a stand-in API server: every request it makes in a first
    run, a second one and a renewal is granted by the rendered Role and ClusterRole and
    passes the admission policy, and every right they grant is used."""
    objects = built["bootstrap"]
    kube = FakeKubernetes()
    server = await aiohttp_server(kube.app())
    kube.url = f"http://{server.host}:{server.port}"
    for collection in (MUTATING_PATH, VALIDATING_PATH):
        kube.add_webhook_configuration(
            collection, DEFAULT_WEBHOOK_NAME, [webhook("default.gpu-share.io")]
        )
    (c,) = dh.find(objects, "Job")["spec"]["template"]["spec"]["containers"]
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube.url)

    def run(directory: str, *extra: str) -> int:
        args = [a for a in c["args"] if not a.startswith("--dir=")]
        return cli.main([*args, f"--dir={tmp_path / directory}",
                         f"--kubeconfig={kubeconfig}", *extra])

    # A first run, a new pod with the Secret in place, and a forced renewal.
    for directory, extra in (("first", ()), ("second", ()), ("renewal", ("--force",))):
        assert await asyncio.to_thread(run, directory, *extra) == 0, directory

    roles = [(NAMESPACE, _rules(objects, "Role")), (None, _rules(objects, "ClusterRole"))]
    used: set[tuple[int, int, str]] = set()
    for request in kube.requests:
        attributes = dh.api_request(request.method, request.path)
        granted = dh.granting_rules(roles, attributes)
        assert granted, f"the Job would be refused {request.method} {request.path}"
        used |= {(role, rule, attributes["verb"]) for role, rule in granted}
        if attributes["verb"] == "create":
            assert not dh.secret_policy_refuses(
                objects, request.body, username=_certs_username(objects), namespace=NAMESPACE
            )
    offered = {
        (role, index, verb)
        for role, (_, rules) in enumerate(roles)
        for index, rule in enumerate(rules)
        for verb in rule["verbs"]
    }
    assert offered == used, f"granted and never used: {offered - used}"


def test_the_cert_manager_chain_signs_the_secret_the_server_mounts(
    built: dict[str, list[dict[str, Any]]],
) -> None:
    # kubernetes-validate has no schema for cert-manager's CRDs: their shape is checked here.
    objects = built["cert-manager"]
    for obj in objects:
        if obj["apiVersion"].startswith(CERT_MANAGER_GROUP + "/"):
            assert obj["apiVersion"] == "cert-manager.io/v1"
            assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
    issuers = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Issuer"}
    certs = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Certificate"}
    assert len(issuers) == 2
    assert len(certs) == 2
    (serving_name,) = [n for n, c in certs.items() if c["secretName"] == TLS_SECRET]
    serving = certs.pop(serving_name)
    (ca_name, ca), *_ = certs.items()
    assert ca["isCA"] is True
    # The root is self-signed; the CA issuer signs with the root's Secret.
    root_issuer = issuers[ca["issuerRef"]["name"]]
    assert root_issuer == {"selfSigned": {}}
    ca_issuer = issuers[serving["issuerRef"]["name"]]
    assert ca_issuer == {"ca": {"secretName": ca["secretName"]}}
    for ref in (ca["issuerRef"], serving["issuerRef"]):
        assert ref["kind"] == "Issuer"
        assert ref["group"] == CERT_MANAGER_GROUP
    assert f"{DEFAULT_SERVICE}.{NAMESPACE}.svc" in serving["dnsNames"]
    assert "server auth" in serving["usages"]
    assert serving.get("isCA", False) is False
    assert ca_name != serving_name
    for spec in (ca, serving):
        assert spec["privateKey"]["rotationPolicy"] == "Always"
    for config in objects:
        if config["kind"].endswith("WebhookConfiguration"):
            assert config["metadata"]["annotations"] == {
                "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{serving_name}"
            }


def test_the_runtimeclass_is_optional(built: dict[str, list[dict[str, Any]]]) -> None:
    (runtime_class,) = built["runtimeclass-nvidia"]
    assert runtime_class["metadata"]["name"] == "nvidia"
    assert runtime_class["handler"] == "nvidia"
    for name in dh.INSTALLS:
        assert "RuntimeClass" not in dh.kinds(built[name])


# --------------------------------------------------------------------------- the image


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return (dh.REPO / "Dockerfile").read_text(encoding="utf-8")


def test_hadolint_passes_on_the_dockerfile() -> None:
    done = dh.run([dh.tool("hadolint"), "--no-color", "--failure-threshold", "style", "Dockerfile"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == ""


def test_the_image_is_multi_stage_slim_and_runs_serve_as_a_numeric_non_root_user(
    dockerfile: str,
) -> None:
    steps = _instructions(dockerfile)
    froms = [i for i, (word, _) in enumerate(steps) if word == "FROM"]
    assert len(froms) == 2
    assert steps[froms[0]][1].endswith(" AS builder")
    final = steps[froms[-1] :]
    assert re.fullmatch(r"python:3\.1[1-9](\.\d+)?-slim(-\w+)?(@sha256:[0-9a-f]{64})?", final[0][1])
    # Nothing of the builder but the virtualenv; no package manager runs in the final stage.
    copies = [args for word, args in final if word == "COPY"]
    assert copies == ["--from=builder /opt/gpu-share-webhook /opt/gpu-share-webhook"]
    runs = " ".join(args for word, args in final if word == "RUN")
    assert not re.search(r"\b(apt-get|apt|pip|gcc|make)\b", runs)
    users = [args for word, args in final if word == "USER"]
    assert users
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit()
    assert int(uid) > 0
    assert gid.isdigit()
    assert ("ENTRYPOINT", '["gpu-share-webhook"]') in final
    assert ("CMD", '["serve"]') in final
    # HEALTHCHECK NONE, with the reason written above it.
    assert ("HEALTHCHECK", "NONE") in final
    above = dockerfile[: dockerfile.index("HEALTHCHECK NONE")].rstrip().splitlines()[-1]
    assert above.startswith("#")


def test_the_build_context_holds_what_the_dockerfile_copies_and_no_secrets(
    dockerfile: str,
) -> None:
    patterns = [
        line.strip()
        for line in (dh.REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*"
    included = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    assert included == {
        "pyproject.toml", "README.md", "hatch_build.py", "webhook", "policies",
        "requirements/image.txt",
    }
    for word, args in _instructions(dockerfile):
        if word == "COPY" and not args.startswith("--from"):
            for source in shlex.split(args)[:-1]:
                assert source.rstrip("/") in included
                assert (dh.REPO / source).exists(), source


def _stages(dockerfile: str) -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for word, args in _instructions(dockerfile):
        if word == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((word, args))
    return stages


def test_the_builder_has_a_compiler_and_the_final_image_the_same_python_without_one(
    dockerfile: str,
) -> None:
    builder, final = _stages(dockerfile)
    builder_image = builder[0][1].removesuffix(" AS builder")
    final_image = final[0][1]
    # The full python image ships gcc, libc6-dev and Python's headers (mypyc needs all
    # three); a slim builder would have to install them.
    installs = " ".join(args for word, args in builder if word == "RUN")
    digest = r"(?:@sha256:[0-9a-f]{64})?"
    full = re.fullmatch(rf"python:(3\.1[1-9](?:\.\d+)?)-(\w+){digest}", builder_image)
    assert full or re.search(r"apt-get install .*\bgcc\b.*\blibc6-dev\b", installs)
    slim = re.fullmatch(rf"python:(3\.1[1-9](?:\.\d+)?)-slim-(\w+){digest}", final_image)
    assert slim, final_image
    if full:
        # One Python ABI and one C library: what was compiled runs in the final image.
        assert full.groups() == slim.groups()
    # A compile that fell back to pure Python stops the build.
    assert "-none-any.whl" in installs
    assert "--only-binary=:all:" in installs


@pytest.mark.slow  # pip builds a wheel
def test_a_wheel_builds_from_what_the_docker_build_copies(
    dockerfile: str, tmp_path: Path
) -> None:
    """The builder's COPY lines, from the repository, then its `pip wheel` (pure Python and
    without build isolation here, to stay offline and fast: the compile itself is
    tests/server/test_compiled_core.py's)."""
    source = tmp_path / "src"
    source.mkdir()
    builder = _stages(dockerfile)[0]
    for word, args in builder:
        if word != "COPY" or args.startswith("--from"):
            continue
        *sources, destination = shlex.split(args)
        for name in sources:
            origin = dh.REPO / name
            if origin.is_dir():
                # What .dockerignore leaves out of the context is left out here too.
                ignored = shutil.ignore_patterns("__pycache__", "*.py[cod]", "*.so")
                shutil.copytree(origin, source / destination, ignore=ignored)
            else:
                (source / destination).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(origin, source / destination / origin.name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-cache-dir", "--wheel-dir", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "GPU_SHARE_WEBHOOK_PURE_PYTHON": "1",
             "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("gpu_share_webhook-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "webhook/cli.py" in names
    assert any(n.startswith("webhook/_embedded/policies/") for n in names)


# --------------------------------------------------------------------------- client certificates


CLIENT_AUTH_VARIABLES = (tools.env_name("client-ca-file"), tools.env_name("client-names"))


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(dh.find(objects, "Deployment", "gpu-share-webhook")["spec"]["template"]["spec"])


@pytest.mark.slow  # two kustomize builds per install
@pytest.mark.parametrize("install", install_params())
def test_the_client_auth_component_adds_the_ca_and_the_servers_settings(
    built: dict[str, list[dict[str, Any]]], install: str, tmp_path: Path
) -> None:
    """deploy/components/client-auth on an install: a ConfigMap of client-ca.crt, mounted as
    a directory, and the two variables of `serve`; everything else as the install has it."""
    ca = certificates.make_ca().cert_pem.decode("ascii")
    objects = dh.kustomize(dh.site(tmp_path, install, dh.CLIENT_AUTH, client_ca=ca))
    plain = {_key(o): o for o in built[install]}
    added = {_key(o): o for o in objects}
    (configmap_key,) = set(added) - set(plain)
    assert configmap_key == ("ConfigMap", "gpu-share-webhook-client-ca")
    configmap = added.pop(configmap_key)
    assert configmap["data"] == {"ca.crt": ca}
    assert configmap["metadata"]["namespace"] == NAMESPACE
    deployment = ("Deployment", "gpu-share-webhook")
    assert {k: v for k, v in added.items() if k != deployment} == {
        k: v for k, v in plain.items() if k != deployment
    }
    pod = _pod_spec(objects)
    (c,) = pod["containers"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "client-ca"]
    assert mount["readOnly"] is True
    assert "subPath" not in mount
    (volume,) = [v for v in pod["volumes"] if v["name"] == "client-ca"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    (item,) = volume["configMap"]["items"]
    assert item["key"] in configmap["data"]
    env = _env(c)
    ca_file, client_names = CLIENT_AUTH_VARIABLES
    assert env[ca_file] == f"{mount['mountPath']}/{item['path']}"
    assert env[client_names] == ",".join(certificates.DEFAULT_CLIENT_NAMES)
    # The rest of the Deployment is the install's.
    (before,) = _pod_spec(built[install])["containers"]
    assert [e for e in c["env"] if e["name"] not in CLIENT_AUTH_VARIABLES] == before["env"]
    assert [m for m in c["volumeMounts"] if m is not mount] == before["volumeMounts"]
    assert [v for v in pod["volumes"] if v is not volume] == _pod_spec(built[install])["volumes"]
    for obj in (configmap, dh.find(objects, "Deployment", "gpu-share-webhook")):
        kubernetes_validate.validate(obj, dh.VERSIONS[-1], strict=True)


def test_the_client_auth_component_stops_without_the_ca_file(tmp_path: Path) -> None:
    """The component ships no stand-in for the site's CA: the build names the file to add."""
    directory = dh.site(tmp_path, "cert-manager", dh.CLIENT_AUTH)
    done = dh.run([dh.tool("kubectl"), *dh.KUSTOMIZE, str(directory)])
    assert done.returncode != 0, (
        f"{dh.CLIENT_AUTH.relative_to(dh.REPO)} holds a {dh.CLIENT_CA_FILE} (yours, left in"
        " this checkout?): the build no longer stops without the site's CA"
    )
    assert f"client-auth/{dh.CLIENT_CA_FILE}: no such file" in done.stderr


# --------------------------------------------------------------------------- the docs


def _paths_in_docs() -> Iterator[str]:
    text = (dh.REPO / "docs" / "install.md").read_text(encoding="utf-8")
    yield from sorted(set(re.findall(r"(?<![\w/])((?:deploy|examples|policies)/[\w./-]*\w)", text)))


@pytest.mark.parametrize("path", list(_paths_in_docs()))
def test_every_path_the_install_guide_names_exists(path: str) -> None:
    assert (dh.REPO / path).exists()


CLIENT_CERTIFICATES_SECTION = "## Authenticate the API server (client certificates)"


def _client_certificates_section() -> str:
    text = (dh.REPO / "docs" / "install.md").read_text(encoding="utf-8")
    start = text.index(CLIENT_CERTIFICATES_SECTION + "\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def _yaml_blocks(text: str) -> dict[str, dict[str, Any]]:
    """The section's YAML blocks: a file's by the path of its first comment line, the others
    by their kind."""
    blocks = {}
    for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL):
        first = block.splitlines()[0]
        doc = yaml.safe_load(block)
        blocks[first[2:] if first.startswith("# /") else doc["kind"]] = doc
    return blocks


def test_the_client_certificate_guide_points_the_api_server_at_the_installs_service(
    built: dict[str, list[dict[str, Any]]],
) -> None:
    """The admission configuration, its kubeconfig and the kubeadm configuration of the
    guide fit together, and the kubeconfig's user is the name under which the API server
    looks up the Service the webhook configurations call."""
    blocks = _yaml_blocks(_client_certificates_section())
    (admission_path,) = [p for p in blocks if p.endswith("admission.yaml")]
    (kubeconfig_path,) = [p for p in blocks if p.endswith("kubeconfig.yaml")]
    admission = blocks[admission_path]
    assert admission["kind"] == "AdmissionConfiguration"
    plugins = {p["name"]: p["configuration"] for p in admission["plugins"]}
    assert set(plugins) == {"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"}
    for configuration in plugins.values():
        assert configuration["kind"] == "WebhookAdmissionConfiguration"
        assert configuration["kubeConfigFile"] == kubeconfig_path
    (user,) = blocks[kubeconfig_path]["users"]
    service = dh.find(built["cert-manager"], "Service", DEFAULT_SERVICE)
    (https,) = [p for p in service["spec"]["ports"] if p["name"] == "https"]
    # A Service port other than 443 is looked up with ":<port>".
    assert https["port"] == 443
    assert user["name"] == f"{DEFAULT_SERVICE}.{NAMESPACE}.svc"
    for config in (o for o in built["cert-manager"] if o["kind"].endswith("Configuration")):
        for entry in config["webhooks"]:
            called = entry["clientConfig"]["service"]
            assert (called["name"], called["namespace"]) == (DEFAULT_SERVICE, NAMESPACE)
            assert called.get("port", 443) == https["port"]
    kubeadm = blocks["ClusterConfiguration"]["apiServer"]
    (flag,) = kubeadm["extraArgs"]
    assert flag == {"name": "admission-control-config-file", "value": admission_path}
    (volume,) = kubeadm["extraVolumes"]
    assert volume["hostPath"] == volume["mountPath"]
    assert volume["readOnly"] is True
    for path in (admission_path, kubeconfig_path, *user["user"].values()):
        assert path.startswith(volume["mountPath"] + "/"), path


@pytest.mark.slow  # two RSA keys and a server
async def test_the_client_certificate_the_guide_makes_is_accepted_by_the_server(
    tmp_path: Path,
) -> None:
    """The guide's openssl commands make a CA and a client certificate for kube-apiserver;
    the server, with that CA as --client-ca-file and the default --client-names, serves a
    client that presents the certificate and refuses one that presents none."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    section = _client_certificates_section()
    (block,) = re.findall(r"\n((?:    openssl .*\n(?:      .*\n)*|    printf .*\n)+)", section)
    made = tmp_path / "made"
    made.mkdir()
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", textwrap.dedent(block)], cwd=made,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "apiserver-webhook-client.crt: OK" in done.stdout
    cert = x509.load_pem_x509_certificate((made / "apiserver-webhook-client.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((made / "client-ca.crt").read_bytes())
    names_ = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert [n.value for n in names_] == ["kube-apiserver"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.issuer == ca.subject
    settings = sh.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0,
                           client_ca_file=made / "client-ca.crt",
                           client_names=certificates.DEFAULT_CLIENT_NAMES)
    client = (made / "apiserver-webhook-client.crt", made / "apiserver-webhook-client.key")
    async with serving.running(settings) as running:
        server_ca = running.state.settings.cert_dir / certificates.CA_FILE
        async with sh.connect(running.port, server_ca, client=client) as connection:
            status, _, _ = await asyncio.wait_for(
                connection.post("/mutate", sh.review_body(sh.shared_pod(), "uid-1")), 10
            )
        assert status == 200
        with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError,
                            EOFError, IndexError)):
            async with sh.connect(running.port, server_ca) as connection:
                await asyncio.wait_for(
                    connection.post("/mutate", sh.review_body(sh.shared_pod(), "uid-2")), 10
                )


# --------------------------------------------------------------------------- monitoring (kustomize)

MONITORING = dh.DEPLOY / "optional" / "monitoring"

# The Prometheus Operator's CRDs (monitoring.coreos.com/v1), as its API reference gives them:
# ServiceMonitor.spec requires `selector` (a label selector); `namespaceSelector` has
# `matchNames` (a list) or `any`; an endpoint names the Service's port by `port` (its name),
# with `path`, `scheme` (http or https), `interval` and `scrapeTimeout` (Prometheus
# durations). PrometheusRule.spec.groups[] requires `name` and holds `rules`; a rule has
# `expr` and either `alert` or `record`, with `for`, `labels` and `annotations` (strings)
# for an alert. An endpoint's `honorLabels` is a boolean and its `metricRelabelings` a list
# of RelabelConfig: `sourceLabels` (label names), `separator`, `targetLabel`, `regex`,
# `modulus`, `replacement`, and `action` from an enum that has each action in lowercase and
# in CamelCase (pkg/apis/monitoring/v1/types.go, RelabelConfig).
SERVICE_MONITOR_SPEC = {"selector", "namespaceSelector", "endpoints", "jobLabel"}
ENDPOINT_FIELDS = {
    "port", "path", "scheme", "interval", "scrapeTimeout", "honorLabels", "metricRelabelings"
}  # fmt: skip
RELABEL_FIELDS = {
    "sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"
}  # fmt: skip
RELABEL_ACTIONS = {
    "replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep", "lowercase",
    "uppercase", "keepequal", "dropequal",
}  # fmt: skip
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
GROUP_FIELDS = {"name", "rules", "interval"}
ALERT_FIELDS = {"alert", "expr", "for", "labels", "annotations"}
PROMETHEUS_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def _monitoring_and_base() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return dh.kustomize(MONITORING), dh.kustomize(dh.DEPLOY / "base")


def test_the_monitoring_overlay_scrapes_the_metrics_port_of_the_service() -> None:
    monitoring, base = _monitoring_and_base()
    # And the Grafana dashboard's ConfigMap (tests/deploy/test_dashboard.py).
    assert sorted(dh.kinds(monitoring)) == ["ConfigMap", "PrometheusRule", "ServiceMonitor"]
    monitor = dh.find(monitoring, "ServiceMonitor")
    service = dh.find(base, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert dh.selector_matches(monitor["spec"]["selector"], service["metadata"]["labels"])
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    container = dh.find(base, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[port["targetPort"]] == 8080
    assert (endpoint["path"], endpoint["scheme"]) == ("/metrics", "http")
    # The job label is the Service's name: what GpuShareWebhookDown looks for.
    rule = dh.find(monitoring, "PrometheusRule")
    (down,) = [r for g in rule["spec"]["groups"] for r in g["rules"]
               if r.get("alert") == "GpuShareWebhookDown"]
    assert f'job="{service["metadata"]["name"]}"' in down["expr"]
    assert "jobLabel" not in monitor["spec"]


def test_the_monitoring_objects_have_the_operators_shape() -> None:
    monitoring, _ = _monitoring_and_base()
    monitor = dh.find(monitoring, "ServiceMonitor")
    assert set(monitor["spec"]) <= SERVICE_MONITOR_SPEC
    assert "selector" in monitor["spec"]
    assert set(monitor["spec"]["selector"]) <= {"matchLabels", "matchExpressions"}
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) <= ENDPOINT_FIELDS
        assert isinstance(endpoint["port"], str)
        assert endpoint["scheme"] in ("http", "https")
        for key in ("interval", "scrapeTimeout"):
            assert PROMETHEUS_DURATION.match(endpoint[key]), endpoint[key]
        assert isinstance(endpoint.get("honorLabels", False), bool)
        # What each does to the labels: tests/deploy/test_dashboard.py.
        for relabeling in endpoint.get("metricRelabelings", []):
            assert set(relabeling) <= RELABEL_FIELDS, relabeling
            assert relabeling.get("action", "replace").lower() in RELABEL_ACTIONS
            assert all(LABEL_NAME.match(n) for n in relabeling.get("sourceLabels", []))
            assert all(isinstance(relabeling.get(k, ""), str) for k in RELABEL_FIELDS - {
                "sourceLabels", "modulus"})  # fmt: skip
    rule = dh.find(monitoring, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    for group in rule["spec"]["groups"]:
        assert set(group) <= GROUP_FIELDS
        assert group["name"]
        assert group["rules"]
        for entry in group["rules"]:
            assert set(entry) <= ALERT_FIELDS, entry
            assert entry["alert"]
            assert entry["expr"]
            assert PROMETHEUS_DURATION.match(entry["for"]), entry["for"]
            for key in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in entry[key].values()), entry
    for obj in monitoring:
        assert obj["metadata"]["namespace"] == NAMESPACE
        # The dashboard's ConfigMap has the Grafana sidecar's label besides.
        labels = dict(obj["metadata"]["labels"])
        if obj["kind"] == "ConfigMap":
            assert labels.pop("grafana_dashboard") == "1"
        assert labels == dh.find(_monitoring_and_base()[1], "Service")["metadata"]["labels"]


def test_the_network_policy_admits_the_prometheus_the_monitoring_docs_name() -> None:
    """docs/install.md: the metrics port is open to Prometheus pods in `monitoring`; the
    ServiceMonitor is useless to any other."""
    _, base = _monitoring_and_base()
    policy = dh.find(base, "NetworkPolicy")
    prometheus_pod = {"app.kubernetes.io/name": "prometheus"}
    assert dh.ingress_admits(policy, port=8080, namespace=dh.namespace_labels("monitoring"),
                             pod=prometheus_pod)


# --------------------------------------------------------------------------- a site's policies

SITE_EXAMPLE = dh.DEPLOY / "examples" / "site-policies"


def _site_copy(tmp_path: Path) -> Path:
    """The example as a site copies it: deploy/ and policies/ of a clone, the example where
    the repository has it (its install/ names ../../../overlays/cert-manager)."""
    for part in (dh.DEPLOY, dh.POLICIES):
        shutil.copytree(part, tmp_path / part.name)
    return tmp_path / SITE_EXAMPLE.relative_to(dh.REPO)


def _site_policy_names(directory: Path) -> list[str]:
    return policies.load_directory(directory / "policies").names


def test_the_site_example_installs_only_the_sites_policies(tmp_path: Path) -> None:
    site = _site_copy(tmp_path)
    objects = dh.kustomize(site)
    shipped = dh.kustomize(tmp_path / "deploy" / "overlays" / "cert-manager")
    mine = sorted(p.name for p in (site / "policies").glob("*.yaml"))
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert sorted(configmap["data"]) == mine
    for name in mine:
        assert configmap["data"][name] == (site / "policies" / name).read_text(encoding="utf-8")
    # The Deployment mounts the replaced ConfigMap, by its new hashed name.
    volumes = dh.find(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "policies", "configMap": {"name": configmap["metadata"]["name"]}} in volumes
    # One copy of each configuration, with entries of the site's policies only.
    names = _site_policy_names(site)
    assert names == ["default", "training"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (configuration,) = [o for o in objects if o["kind"] == kind]
        entries = [w["name"] for w in configuration["webhooks"]]
        paths = {w["clientConfig"]["service"]["path"].split("/")[2]
                 for w in configuration["webhooks"]}
        assert paths == {*names, "_unknown"}, paths
        assert not [e for e in entries if e.startswith("not-renamed.")], entries
        assert "training.policies.gpu-share.io" in entries
        assert configuration["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{NAMESPACE}/gpu-share-webhook"}
    # Everything else is the shipped install's.
    others = sorted((o["kind"], o["metadata"]["name"]) for o in objects
                    if o["kind"] != "ConfigMap" and not o["kind"].endswith("Configuration"))
    assert others == sorted((o["kind"], o["metadata"]["name"]) for o in shipped
                            if o["kind"] != "ConfigMap"
                            and not o["kind"].endswith("Configuration"))


def test_the_site_examples_entries_are_what_render_prints_for_its_policies(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(SITE_EXAMPLE)  # as its kustomization.yaml says to run it
    code = cli.main(["render", "--policies", "policies/",
                     "--cert-manager-certificate", f"{NAMESPACE}/gpu-share-webhook"])
    assert code == tools.EXIT_OK
    printed = capsys.readouterr().out
    committed = (SITE_EXAMPLE / "webhook-configurations.yaml").read_text(encoding="utf-8")
    assert printed == committed, (
        "deploy/examples/site-policies/webhook-configurations.yaml is stale: render it again"
        " (the command is in its kustomization.yaml)"
    )


def test_the_site_examples_policies_and_its_file_list_agree() -> None:
    (kustomization,) = dh.load_yaml(SITE_EXAMPLE / "kustomization.yaml")
    (generator,) = kustomization["configMapGenerator"]
    assert generator["behavior"] == "replace"
    assert sorted(generator["files"]) == sorted(
        f"policies/{p.name}" for p in (SITE_EXAMPLE / "policies").glob("*.yaml"))


def test_the_site_examples_policies_pass_their_own_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h100 = nodes.Gpu("NVIDIA-H100-80GB-HBM3", "time-slicing", 2, memory=81559, count=8)
    dump = nodes.write(tmp_path, [
        nodes.node("gpu-t4-1", nodes.T4_MPS), nodes.node("gpu-a10g-1", nodes.A10G_TS),
        nodes.node("gpu-h100-1", h100),
    ])
    code = cli.main(["policy", "check", str(SITE_EXAMPLE / "policies"), "--nodes", str(dump)])
    assert code == tools.EXIT_OK, capsys.readouterr()


def test_the_install_guides_monitoring_kustomization_labels_both_objects(tmp_path: Path) -> None:
    """docs/install.md ("Metrics"): the kustomization it shows builds, next to a clone, and
    gives the ServiceMonitor and the PrometheusRule the label it says."""
    guide = (dh.REPO / "docs" / "install.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", guide, flags=re.DOTALL)
                if "deploy/optional/monitoring" in b]
    clone = tmp_path / "gpu-share-webhook"
    for part in (dh.DEPLOY, dh.POLICIES):
        shutil.copytree(part, clone / part.name)
    site = tmp_path / "site"
    site.mkdir()
    (site / "kustomization.yaml").write_text(block, encoding="utf-8")
    objects = dh.kustomize(site)
    monitoring = [o for o in objects if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert sorted(dh.kinds(monitoring)) == ["PrometheusRule", "ServiceMonitor"]
    for obj in monitoring:
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert "Deployment" in dh.kinds(objects)
