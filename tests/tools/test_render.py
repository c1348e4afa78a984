"""`gpu-share-webhook render` and the webhook configurations it makes (webhook/tools/rendering.py).

What the API server does with them is played with the real semantics: label selectors as
Kubernetes matches them, and the matchConditions evaluated by a CEL implementation
(cel-python) against pods and workloads.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import apiserver, kube
from tests.support import deploy_helpers as dh
from tests.support import dra_objects as dra
from tests.support.kube import WORKLOAD_KINDS
from webhook import cli
from webhook.engine import namespaces, reviewing
from webhook.policy import kinds, names, policies
from webhook.server import codec
from webhook.tools import DEFAULT_NAMESPACE, DEFAULT_SERVICE, DEFAULT_WEBHOOK_NAME, rendering

SHARED = "nvidia.com/gpu.shared"
MIRROR = {"kubernetes.io/config.mirror": "0123abcd"}
WORKLOAD_RESOURCES = {
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("", "replicationcontrollers"),
}
# A qualified name as Kubernetes validates matchCondition names (no prefix used here).
_QUALIFIED = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_FQDN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?){2,}")


def render(shipped: policies.PolicySet, **options: Any) -> list[dict[str, Any]]:
    """`rendering.render` with the names deploy/ uses, unless `options` say otherwise."""
    names = {
        "service": DEFAULT_SERVICE,
        "namespace": DEFAULT_NAMESPACE,
        "name": DEFAULT_WEBHOOK_NAME,
    }
    return rendering.render(shipped, **{**names, **options})


@pytest.fixture(scope="module")
def configurations(shipped_policies: policies.PolicySet) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in render(shipped_policies)}


@pytest.fixture(scope="module")
def mutating_config(configurations: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return configurations[rendering.MUTATING_KIND]


@pytest.fixture(scope="module")
def validating_config(configurations: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return configurations[rendering.VALIDATING_KIND]


def entries(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in dh.pod_entries(config)}


def entry_path(entry: dict[str, Any]) -> str:
    return str(entry["clientConfig"]["service"]["path"])


@pytest.fixture(scope="module")
def conditions(
    mutating_config: dict[str, Any], validating_config: dict[str, Any]
) -> dict[tuple[str, str], dh.Conditions]:
    """Every entry's compiled matchConditions, by (configuration kind, entry name)."""
    return {
        (config["kind"], e["name"]): dh.Conditions(e)
        for config in (mutating_config, validating_config)
        for e in dh.pod_entries(config)
    }


# --------------------------------------------------------------------------- shape


def test_render_gives_one_mutating_and_one_validating_configuration(
    shipped_policies: policies.PolicySet,
) -> None:
    objects = render(shipped_policies)
    assert [o["kind"] for o in objects] == [rendering.MUTATING_KIND, rendering.VALIDATING_KIND]
    for o in objects:
        assert o["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert o["metadata"]["name"] == DEFAULT_WEBHOOK_NAME
        assert "annotations" not in o["metadata"]


def test_each_policy_has_an_entry_plus_the_unlabelled_and_the_unknown_entry(
    shipped_policies: policies.PolicySet, configurations: dict[str, dict[str, Any]]
) -> None:
    # Each twice: for namespaces that enforce Pod Security baseline or restricted (the path
    # ends in /baseline), and for the others.
    expected = {
        rendering.DEFAULT_ENTRY: "default",
        rendering.DEFAULT_BASELINE_ENTRY: "default/baseline",
        **{rendering.policy_entry(n): n for n in shipped_policies.names},
        **{
            rendering.policy_entry(n, pod_security=True): f"{n}/baseline"
            for n in shipped_policies.names
        },
        rendering.UNKNOWN_ENTRY: names.UNKNOWN_POLICY_PATH,
        rendering.UNKNOWN_BASELINE_ENTRY: f"{names.UNKNOWN_POLICY_PATH}/baseline",
    }
    assert set(shipped_policies.names) == {"default", "dra", "not-renamed"}
    for kind, endpoint in (
        (rendering.MUTATING_KIND, "mutate"),
        (rendering.VALIDATING_KIND, "validate"),
    ):
        got = {name: entry_path(e) for name, e in entries(configurations[kind]).items()}
        assert got == {name: f"/{endpoint}/{path}" for name, path in expected.items()}


def test_entry_names_are_fully_qualified_and_unique(
    configurations: dict[str, dict[str, Any]],
) -> None:
    for config in configurations.values():
        names = [e["name"] for e in dh.pod_entries(config)]
        assert len(names) == len(set(names))
        for name in names:
            assert _FQDN.fullmatch(name), name
            assert len(name) <= 253


def test_no_policy_name_can_collide_with_the_special_entries() -> None:
    # Special entries have three labels, or four with "baseline" second; policy entries four
    # with "policies" third, or five with "baseline.policies".
    special = (
        rendering.DEFAULT_ENTRY,
        rendering.UNKNOWN_ENTRY,
        rendering.DEFAULT_BASELINE_ENTRY,
        rendering.UNKNOWN_BASELINE_ENTRY,
    )
    assert len(set(special)) == 4
    tricky = ("default", "unknown-policy", "gpu-share", "policies", "io", "baseline", "x")
    made = [rendering.policy_entry(n, pod_security=ps) for n in tricky for ps in (False, True)]
    assert len(set(made)) == len(made)
    assert not set(made) & set(special)
    # A policy name is one DNS label: the labels of an entry name tell which entry it is.
    for name in made:
        labels = name.split(".")
        assert labels[-3:] == ["policies", "gpu-share", "io"]
        assert len(labels) == (5 if labels[1] == "baseline" else 4), name


def test_every_entry_has_the_settings_the_spec_asks_for(
    configurations: dict[str, dict[str, Any]],
) -> None:
    for kind, config in configurations.items():
        for e in dh.pod_entries(config):
            assert e["admissionReviewVersions"] == ["v1"]
            assert e["sideEffects"] == "None"
            assert e["failurePolicy"] == "Fail"
            assert e["timeoutSeconds"] == 5
            assert e["matchPolicy"] == "Equivalent"
            assert e["clientConfig"]["service"] == {
                "name": "gpu-share-webhook",
                "namespace": "gpu-share-system",
                "path": e["clientConfig"]["service"]["path"],
                "port": 443,
            }
            assert "caBundle" not in e["clientConfig"]
            if kind == rendering.MUTATING_KIND:
                assert e["reinvocationPolicy"] == "IfNeeded"
            else:
                assert "reinvocationPolicy" not in e


POD_RULES = [
    # UPDATE for route 8 only: the matchConditions let through no other Pod update.
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
     "resources": ["pods"], "scope": "Namespaced"},
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
     "resources": ["pods/ephemeralcontainers"], "scope": "Namespaced"},
    # Route 8 too: a status update keeps the annotations it is sent with; a Binding's are
    # copied onto the pod.
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
     "resources": ["pods/status"], "scope": "Namespaced"},
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
     "resources": ["pods/binding", "bindings"], "scope": "Namespaced"},
]
# Claims and claim templates on CREATE only (their spec is immutable), in v1 only: with
# matchPolicy Equivalent a write through v1beta1 or v1beta2 arrives converted to v1.
CLAIM_RULES = [
    {"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
     "resources": ["resourceclaims", "resourceclaimtemplates"], "scope": "Namespaced"},
]


def test_mutation_sees_pods_on_create_and_update_and_their_ephemeral_containers_on_update(
    mutating_config: dict[str, Any],
) -> None:
    for e in dh.pod_entries(mutating_config):
        assert e["rules"] == POD_RULES + CLAIM_RULES


def test_validation_also_sees_the_workloads_on_create_and_update(
    validating_config: dict[str, Any],
) -> None:
    expected = {(k.group, k.resource): list(k.versions) for k in kinds.all_kinds()}
    for e in dh.pod_entries(validating_config):
        head = len(POD_RULES) + len(CLAIM_RULES)
        assert e["rules"][:head] == POD_RULES + CLAIM_RULES
        seen: dict[tuple[str, str], list[str]] = {}
        for rule in e["rules"][head:]:
            assert rule["scope"] == "Namespaced"
            assert rule["operations"] == ["CREATE", "UPDATE"]
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    assert (group, resource) not in seen
                    seen[(group, resource)] = rule["apiVersions"]
        assert seen == expected
        # The built-in kinds are there, and the same kinds whose templates the core codec.
        assert set(seen) >= WORKLOAD_RESOURCES
        assert {r for g, r in WORKLOAD_RESOURCES} == {k.lower() + "s" for k in WORKLOAD_KINDS}


def test_match_conditions_are_few_and_well_named(
    configurations: dict[str, dict[str, Any]],
) -> None:
    for config in configurations.values():
        for e in dh.pod_entries(config):
            names = [c["name"] for c in e["matchConditions"]]
            assert 1 <= len(names) <= 64
            assert len(set(names)) == len(names)
            assert all(_QUALIFIED.fullmatch(n) and len(n) <= 63 for n in names)


# --------------------------------------------------------------------------- namespaces

NS = dh.namespace_labels
ENABLED = {"gpu-share.io/enabled": "true"}

POLICY = "gpu-share.io/policy"
PSA = "pod-security.kubernetes.io/enforce"
# (name, labels, the policy path the namespace's objects reach; None: no entry).
_NAMESPACES: list[tuple[str, dict[str, str], str | None]] = [
    ("not-opted-in", NS("team"), None),
    ("enabled-false", NS("team", **{"gpu-share.io/enabled": "false"}), None),
    ("enabled-True", NS("team", **{"gpu-share.io/enabled": "True"}), None),
    ("policy-without-opt-in", NS("team", **{POLICY: "not-renamed"}), None),
    ("no-policy-label", NS("team", **ENABLED), "default"),
    ("default", NS("team", **ENABLED, **{POLICY: "default"}), "default"),
    ("empty-label", NS("team", **ENABLED, **{POLICY: ""}), "default"),
    ("not-renamed", NS("team", **ENABLED, **{POLICY: "not-renamed"}), "not-renamed"),
    ("unknown", NS("team", **ENABLED, **{POLICY: "no-such-policy"}), names.UNKNOWN_POLICY_PATH),
    ("unknown-case", NS("team", **ENABLED, **{POLICY: "Default"}), names.UNKNOWN_POLICY_PATH),
    ("kube-system", NS("kube-system", **ENABLED), None),
    ("own-namespace", NS("gpu-share-system", **ENABLED), None),
    # Pod Security's enforce label: baseline and restricted get the .../baseline path.
    ("baseline", NS("team", **ENABLED, **{PSA: "baseline"}), "default/baseline"),
    ("restricted", NS("team", **ENABLED, **{PSA: "restricted"}), "default/baseline"),
    ("privileged", NS("team", **ENABLED, **{PSA: "privileged"}), "default"),
    ("level-case", NS("team", **ENABLED, **{PSA: "Baseline"}), "default"),
    ("level-empty", NS("team", **ENABLED, **{PSA: ""}), "default"),
    ("baseline-default", NS("team", **ENABLED, **{POLICY: "default", PSA: "baseline"}),
     "default/baseline"),
    ("baseline-empty-label", NS("team", **ENABLED, **{POLICY: "", PSA: "restricted"}),
     "default/baseline"),
    ("baseline-not-renamed", NS("team", **ENABLED, **{POLICY: "not-renamed", PSA: "baseline"}),
     "not-renamed/baseline"),
    ("privileged-not-renamed",
     NS("team", **ENABLED, **{POLICY: "not-renamed", PSA: "privileged"}), "not-renamed"),
    ("baseline-unknown", NS("team", **ENABLED, **{POLICY: "nope", PSA: "baseline"}),
     f"{names.UNKNOWN_POLICY_PATH}/baseline"),
    ("baseline-not-opted-in", NS("team", **{PSA: "baseline"}), None),
    ("baseline-kube-system", NS("kube-system", **ENABLED, **{PSA: "baseline"}), None),
]
_EXCLUDED = ("kube-system", "own-namespace", "baseline-kube-system")


@pytest.mark.parametrize(
    ("labels", "expected"), [pytest.param(la, ex, id=i) for i, la, ex in _NAMESPACES]
)
def test_a_namespace_reaches_exactly_the_entry_of_its_policy(
    configurations: dict[str, dict[str, Any]], labels: dict[str, str], expected: str | None
) -> None:
    for kind, endpoint in (
        (rendering.MUTATING_KIND, "mutate"),
        (rendering.VALIDATING_KIND, "validate"),
    ):
        matched = [
            entry_path(e)
            for e in dh.pod_entries(configurations[kind])
            if dh.selector_matches(e["namespaceSelector"], labels)
        ]
        assert matched == ([] if expected is None else [f"/{endpoint}/{expected}"])


# The excluded namespaces are the configurations' business: namespaces.policy_name knows
# nothing of them.
@pytest.mark.parametrize(
    ("labels", "expected"),
    [pytest.param(la, ex, id=i) for i, la, ex in _NAMESPACES if i not in _EXCLUDED],
)
def test_the_cluster_picks_the_policy_the_offline_mutate_picks(
    shipped_policies: policies.PolicySet, labels: dict[str, str], expected: str | None
) -> None:
    path = namespaces.labelled_path(labels)
    if path is not None and shipped_policies.get(path) is None:
        _, pod_security = policies.split_path(path)
        path = policies.join_path(names.UNKNOWN_POLICY_PATH, pod_security=pod_security)
    assert path == expected
    # ...and the routes `mutate --namespace-label` and `audit` read give the same path.
    where = rendering.routes(shipped_policies, webhook_namespace=DEFAULT_NAMESPACE)
    assert where.selected_path(labels) == expected


def test_offline_mutate_takes_the_pod_security_level_from_the_namespace_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mutate --namespace-label` reviews at the path the cluster would call: under Pod
    Security baseline, rule host-access is left to Pod Security."""
    pod = _as("Pod", {**dh.pod_spec(dh.container()), "hostNetwork": True})
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod))
    base = ["mutate", "-f", str(manifest), "-l", "gpu-share.io/enabled=true", "-o", "json"]
    assert cli.main(base) == 1
    assert "(rule host-access)" in capsys.readouterr().err
    assert cli.main([*base, "-l", f"{PSA}=restricted"]) == 0
    stored = json.loads(capsys.readouterr().out)
    assert stored["spec"]["containers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]


_LABEL_VALUES = {
    names.ENABLED_LABEL: ["true", "false", "True", ""],
    POLICY: ["default", "not-renamed", "", "Default", "nope", "baseline"],
    PSA: ["baseline", "restricted", "privileged", "Baseline", ""],
    names.NAME_LABEL: ["team", "kube-system", DEFAULT_NAMESPACE],
}


@given(
    labels=st.fixed_dictionaries(
        {},
        optional={key: st.sampled_from(values) for key, values in _LABEL_VALUES.items()},
    )
)
def test_the_selectors_are_disjoint_and_cover_every_opted_in_namespace(
    configurations: dict[str, dict[str, Any]], labels: dict[str, str]
) -> None:
    """Whatever a namespace's labels, at most one entry of each configuration selects it,
    and exactly one when it opted in and is not excluded; its path carries the level."""
    excluded = labels.get(names.NAME_LABEL) in ("kube-system", DEFAULT_NAMESPACE)
    wanted = namespaces.opted_in(labels) and not excluded
    for config in configurations.values():
        matched = [
            e for e in dh.pod_entries(config) if dh.selector_matches(e["namespaceSelector"], labels)
        ]
        assert len(matched) == (1 if wanted else 0), [e["name"] for e in matched]
        if matched:
            path = entry_path(matched[0]).split("/", 2)[2]
            assert path.endswith("/baseline") is namespaces.enforces_pod_security(labels)


def test_without_a_default_policy_unlabelled_namespaces_are_sent_to_be_refused(
    tmp_path: Path,
) -> None:
    shutil.copy(dh.POLICIES / "not-renamed.yaml", tmp_path)
    only = policies.load_directory(tmp_path)
    mutating_config = render(only)[0]
    by_name = entries(mutating_config)
    assert entry_path(by_name[rendering.DEFAULT_ENTRY]) == "/mutate/default"
    assert rendering.policy_entry("default") not in by_name
    unknown = by_name[rendering.UNKNOWN_ENTRY]["namespaceSelector"]
    # The empty label is default only when there is a default policy.
    assert dh.selector_matches(unknown, NS("t", **ENABLED, **{POLICY: ""}))
    # The server answers that path with the denial that names the missing policy.
    decision = codec.decide(
        codec.parse(_review(dh.pod(dh.container(limits={"nvidia.com/gpu": 1})))),
        policies=only,
        policy_name="default",
        endpoint="mutate",
    )
    assert not decision.allowed
    assert 'policy "default" does not exist' in decision.message
    # Every pod reaches it: the rules that need no policy still guard them.
    conditions = dh.Conditions(by_name[rendering.DEFAULT_ENTRY])
    assert conditions.match(dh.pod(dh.container(limits={"nvidia.com/mig-1g.5gb": 1})))
    assert conditions.match(dh.pod(dh.container(limits={"cpu": 1})))


def _review(obj: dict[str, Any], operation: str = "CREATE") -> bytes:
    return json.dumps(kube.admission_review(obj, operation=operation, uid="u")).encode()


def _admit(
    configurations: dict[str, dict[str, Any]],
    shipped: policies.PolicySet,
    labels: dict[str, str],
    obj: dict[str, Any],
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
) -> apiserver.Outcome:
    """What the API server would do with `obj` in a namespace with `labels`."""
    cluster = apiserver.ApiServer(list(configurations.values()), apiserver.in_process(shipped))
    return asyncio.run(cluster.admit(obj, labels=labels, operation=operation, old=old))


def test_in_a_cluster_a_shared_gpu_pod_is_mutated_by_its_namespaces_policy_only(
    configurations: dict[str, dict[str, Any]], shipped_policies: policies.PolicySet
) -> None:
    pod = dh.pod(dh.container(limits={SHARED: 1}))
    outcome = _admit(configurations, shipped_policies, NS("team", **ENABLED), pod)
    assert outcome.entries == [
        (rendering.MUTATING_KIND, rendering.DEFAULT_ENTRY),
        (rendering.VALIDATING_KIND, rendering.DEFAULT_ENTRY),
    ]
    assert outcome.allowed
    assert outcome.stored is not None
    assert outcome.stored["spec"]["runtimeClassName"] == "nvidia"
    # Not opted in: the webhook is never called.
    assert _admit(configurations, shipped_policies, NS("team"), pod).calls == []


def test_in_a_cluster_every_pod_of_an_opted_in_namespace_hides_the_gpus_it_did_not_ask_for(
    configurations: dict[str, dict[str, Any]], shipped_policies: policies.PolicySet
) -> None:
    plain = dh.pod(dh.container())
    outcome = _admit(configurations, shipped_policies, NS("team", **ENABLED), plain)
    assert len(outcome.calls) == 2
    assert outcome.stored is not None
    assert outcome.stored["spec"]["containers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    # A workload without GPUs is not reviewed: its pods are, when created.
    job = dh.workload("Job", dh.pod_spec(dh.container()))
    assert _admit(configurations, shipped_policies, NS("team", **ENABLED), job).calls == []


def test_in_a_cluster_a_labelled_namespace_gets_its_policy_and_a_typo_gets_a_reason(
    configurations: dict[str, dict[str, Any]], shipped_policies: policies.PolicySet
) -> None:
    pod = dh.pod(dh.container(limits={"nvidia.com/gpu": 1}))
    labels = NS("team", **ENABLED, **{POLICY: "not-renamed"})
    outcome = _admit(configurations, shipped_policies, labels, pod)
    assert {n for _, n in outcome.entries} == {rendering.policy_entry("not-renamed")}
    assert outcome.allowed
    typo = NS("team", **ENABLED, **{POLICY: "not-renamd"})
    outcome = _admit(configurations, shipped_policies, typo, pod)
    assert {n for _, n in outcome.entries} == {rendering.UNKNOWN_ENTRY}
    assert not outcome.allowed
    assert "does not exist" in outcome.message


def test_in_a_cluster_a_workload_that_breaks_a_rule_is_refused_when_applied(
    configurations: dict[str, dict[str, Any]], shipped_policies: policies.PolicySet
) -> None:
    deployment = dh.workload("Deployment", dh.pod_spec(dh.container(limits={SHARED: 2})))
    before = dh.workload("Deployment", dh.pod_spec(dh.container(limits={SHARED: 1})))
    for operation, old in (("CREATE", None), ("UPDATE", before)):
        outcome = _admit(
            configurations,
            shipped_policies,
            NS("team", **ENABLED),
            deployment,
            operation=operation,
            old=old,
        )
        assert outcome.entries == [(rendering.VALIDATING_KIND, rendering.DEFAULT_ENTRY)]
        assert "invalid multi-replica request" in outcome.message


# --------------------------------------------------------------------------- matchConditions


def _shared_pod() -> dict[str, Any]:
    return dh.pod(dh.container(limits={SHARED: 1}))


def _with(c: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**c, **extra}


# What one of the rules can refuse or change: these reach the webhook in any pod spec.
REFUSABLE = [
    pytest.param(dh.pod_spec(dh.container(limits={SHARED: 1})), id="limits"),
    pytest.param(dh.pod_spec(dh.container(requests={SHARED: 1})), id="requests-only"),
    pytest.param(dh.pod_spec(dh.container(), init=[dh.container("i", limits={SHARED: 1})]),
                 id="init-container"),
    pytest.param(dh.pod_spec(dh.container("a"), dh.container("b", limits={SHARED: 2})),
                 id="second-container"),
    pytest.param(dh.pod_spec(dh.container(limits={"nvidia.com/gpu": 1})), id="exclusive-gpu"),
    pytest.param(dh.pod_spec(dh.container(limits={"nvidia.com/mig-1g.5gb.shared": 1})),
                 id="another-policys-resource"),
    pytest.param(dh.pod_spec(dh.container(env={"NVIDIA_VISIBLE_DEVICES": "all"})),
                 id="visible-devices"),
    pytest.param(dh.pod_spec(dh.container(env={"NVIDIA_MIG_CONFIG_DEVICES": "all"})),
                 id="other-device-variable"),
    pytest.param(dh.pod_spec(dh.container(env={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"})),
                 id="cuda-mps-env"),
    pytest.param(dh.pod_spec(dh.container(), init=[
        dh.container("i", env={"CUDA_MPS_PIPE_DIRECTORY": "/x"})]), id="cuda-mps-env-init"),
    pytest.param(dh.pod_spec(_with(dh.container(), securityContext={"privileged": True})),
                 id="privileged"),
    pytest.param(dh.pod_spec(_with(dh.container(), volumeMounts=[
        {"name": "n", "mountPath": "/var/run/nvidia-container-devices/all"}])),
                 id="device-list-mount"),
    pytest.param({**dh.pod_spec(dh.container()), "resourceClaims": [{"name": "c"}]},
                 id="resource-claims"),
]

# Nothing a rule refuses: only a policy with route 2 on wants such pods (to hide GPUs).
PLAIN = [
    pytest.param(dh.pod_spec(dh.container()), id="plain"),
    pytest.param(dh.pod_spec(dh.container(limits={"cpu": "1", "memory": "1Gi"})), id="cpu"),
    pytest.param(dh.pod_spec(dh.container(env={"CUDA_VISIBLE_DEVICES": "0", "PATH": "/bin"})),
                 id="other-env"),
    pytest.param(dh.pod_spec(_with(dh.container(), volumeMounts=[
        {"name": "d", "mountPath": "/data"}])), id="ordinary-mount"),
]


def _as(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    if kind == "Pod":
        return {**dh.pod(), "spec": spec}
    return dh.workload(kind, spec)


_UNKNOWN_ENTRIES = (rendering.UNKNOWN_ENTRY, rendering.UNKNOWN_BASELINE_ENTRY)


def _entries_of(conditions: dict[tuple[str, str], dh.Conditions], kind: str) -> list[Any]:
    """The entries that serve the default policy (unlabelled and labelled) and the catch-all,
    whatever the namespace's Pod Security level, of the configurations that review `kind`."""
    names = (
        rendering.DEFAULT_ENTRY,
        rendering.DEFAULT_BASELINE_ENTRY,
        rendering.policy_entry("default"),
        rendering.policy_entry("default", pod_security=True),
        *_UNKNOWN_ENTRIES,
    )
    return [
        c for (config, name), c in conditions.items()
        if name in names and (kind == "Pod" or config == rendering.VALIDATING_KIND)
    ]


def _switched(
    factory: pytest.TempPathFactory, rules: dict[str, bool], host_access: str = ""
) -> policies.PolicySet:
    """The shipped default policy alone, with these `spec.rules` switches (and this
    `spec.hostAccess`, YAML)."""
    directory = factory.mktemp("policies")
    doc = yaml.safe_load((dh.POLICIES / "default.yaml").read_text())
    doc["spec"].setdefault("rules", {}).update(rules)
    if host_access:
        doc["spec"]["hostAccess"] = yaml.safe_load(host_access)
    (directory / "default.yaml").write_text(yaml.safe_dump(doc))
    return policies.load_directory(directory)


def _conditions_of(configs: list[dict[str, Any]]) -> dict[tuple[str, str], dh.Conditions]:
    return {(c["kind"], e["name"]): dh.Conditions(e) for c in configs for e in dh.pod_entries(c)}


@pytest.fixture(scope="module")
def filtered_policies(tmp_path_factory: pytest.TempPathFactory) -> policies.PolicySet:
    """A default policy with route 2 switched off (GPU pods only get void)."""
    return _switched(tmp_path_factory, {"voidVisibleDevicesWithoutGpu": False})


@pytest.fixture(scope="module")
def filtered(filtered_policies: policies.PolicySet) -> dict[tuple[str, str], dh.Conditions]:
    """The entries of `filtered_policies`."""
    return _conditions_of(render(filtered_policies))


@pytest.mark.slow  # every refusable spec in every kind, through CEL
@pytest.mark.parametrize("kind", ["Pod", *dh.WORKLOAD_KINDS])
@pytest.mark.parametrize("spec", REFUSABLE)
def test_what_a_rule_can_refuse_reaches_the_webhook_in_any_pod_spec(
    conditions: dict[tuple[str, str], dh.Conditions],
    filtered: dict[tuple[str, str], dh.Conditions],
    kind: str,
    spec: dict[str, Any],
) -> None:
    obj = _as(kind, spec)
    for c in _entries_of(conditions, kind) + _entries_of(filtered, kind):
        assert c.match(obj), c.entry


@pytest.mark.parametrize("spec", PLAIN)
def test_every_pod_reaches_the_webhook_where_route_2_is_on_and_only_there(
    conditions: dict[tuple[str, str], dh.Conditions],
    filtered: dict[tuple[str, str], dh.Conditions],
    spec: dict[str, Any],
) -> None:
    for c in _entries_of(conditions, "Pod"):
        assert c.match(_as("Pod", spec)), c.entry
    for (_, name), c in filtered.items():
        # The catch-all guards a namespace whose policy is unknown as if route 2 were on.
        assert c.match(_as("Pod", spec)) is (name in _UNKNOWN_ENTRIES), name


@pytest.mark.parametrize("kind", dh.WORKLOAD_KINDS)
@pytest.mark.parametrize("spec", PLAIN)
def test_a_workload_nothing_can_refuse_never_reaches_the_webhook(
    conditions: dict[tuple[str, str], dh.Conditions], kind: str, spec: dict[str, Any]
) -> None:
    for c in _entries_of(conditions, kind):
        assert not c.match(_as(kind, spec)), c.entry


def test_an_ephemeral_container_update_always_reaches_the_webhook(
    conditions: dict[tuple[str, str], dh.Conditions],
    filtered: dict[tuple[str, str], dh.Conditions],
) -> None:
    debugged = dh.pod(dh.container())
    debugged["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox"}]
    for c in [*conditions.values(), *filtered.values()]:
        assert c.match(debugged, operation="UPDATE", sub_resource="ephemeralcontainers"), c.entry


def test_mirror_pods_never_reach_the_webhook(
    conditions: dict[tuple[str, str], dh.Conditions],
) -> None:
    mirror = {**_shared_pod(), "metadata": {"name": "m", "annotations": MIRROR}}
    env = dh.pod(dh.container(env={"NVIDIA_VISIBLE_DEVICES": "all"}))
    env["metadata"]["annotations"] = MIRROR
    for c in conditions.values():
        assert not c.match(mirror), c.entry
        assert not c.match(env), c.entry


def test_a_cdi_annotation_on_a_template_reaches_the_webhook(
    conditions: dict[tuple[str, str], dh.Conditions],
) -> None:
    job = dh.workload("Job", dh.pod_spec(dh.container()))
    job["spec"]["template"]["metadata"]["annotations"] = {"cdi.k8s.io/x": "nvidia.com/gpu=all"}
    for c in _entries_of(conditions, "Job"):
        assert c.match(job), c.entry


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, id="no-spec"),
        pytest.param({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}}, id="no-meta"),
        pytest.param(
            {"kind": "Pod", "metadata": {"annotations": {}}, "spec": {"containers": [{}]}},
            id="bare-container",
        ),
        pytest.param(
            {"kind": "Pod", "spec": {"containers": [{"name": "a", "resources": {}, "env": []}]}},
            id="empty-resources-and-env",
        ),
        pytest.param(
            {"kind": "Pod", "spec": {"containers": [{"name": "a", "env": [{"value": "x"}],
                                                     "volumeMounts": [{"name": "v"}],
                                                     "securityContext": {}}]}},
            id="fields-without-their-names",
        ),
        pytest.param({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 1}},
                     id="workload-no-template"),
        pytest.param(
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "spec": {"template": {"metadata": {}}}},
            id="template-no-spec",
        ),
        pytest.param(
            {"apiVersion": "batch/v1", "kind": "CronJob", "spec": {"jobTemplate": {"spec": {}}}},
            id="cronjob-no-template",
        ),
        pytest.param(
            {"apiVersion": "batch/v1", "kind": "CronJob",
             "spec": {"jobTemplate": {"spec": {"template": {}}}}},
            id="cronjob-no-spec",
        ),
    ],
)
def test_conditions_evaluate_without_error_on_sparse_objects(
    conditions: dict[tuple[str, str], dh.Conditions],
    filtered: dict[tuple[str, str], dh.Conditions],
    obj: dict[str, Any],
) -> None:
    # With failurePolicy Fail a CEL error refuses the request: every field is guarded.
    for route_2_on, entries_of in ((True, conditions), (False, filtered)):
        for (_, name), c in entries_of.items():
            every_pod = route_2_on or name in _UNKNOWN_ENTRIES
            assert c.match(obj) is (obj["kind"] == "Pod" and every_pod), c.entry


# An object the conditions leave out must be one the webhook would not touch: else Fail
# would be safe but the rules would be bypassed. Checked on generated pods and workloads.

_RESOURCE_NAMES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/mig-1g.5gb.shared",
    "cpu",
    "memory",
    "example.com/fpga",
]
_ENV_NAMES = [
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_VISIBLE_DEVICES",
    "PATH",
]
_MOUNT_PATHS = ["/data", "/var/run/nvidia-container-devices/all", "/dev/shm", "/run/nvidia"]
_quantities = st.sampled_from(["1", "2", 1, 2, "500m", "0"])
_resource_maps = st.dictionaries(st.sampled_from(_RESOURCE_NAMES), _quantities, max_size=3)


_ENV_VALUES = st.sampled_from(["all", "void", "10", "0=1024M", "/x"])
_CAPABILITIES = st.sampled_from([[], ["SYS_ADMIN"], ["NET_ADMIN"], ["CHOWN"], ["NET_RAW"]])
# The parts of a pod spec the rules read: of a container, and of the spec and its metadata.
_CONTAINER_PARTS = ("limits", "requests", "env", "securityContext", "volumeMounts")
_SPEC_PARTS = ("runtimeClassName", "volumes", "hostNamespace", "annotations")


def _put(draw: st.DrawFn, c: dict[str, Any], part: str) -> None:
    """One part of a container, drawn (it replaces the part if the container has it)."""
    if part in ("limits", "requests"):
        values = draw(_resource_maps)
        if values:
            c.setdefault("resources", {})[part] = values
    elif part == "env":
        env = draw(st.dictionaries(st.sampled_from(_ENV_NAMES), _ENV_VALUES, min_size=1,
                                   max_size=2))
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    elif part == "securityContext":
        c["securityContext"] = {"privileged": draw(st.booleans()),
                                "capabilities": {"add": draw(_CAPABILITIES)}}
    else:
        mounts = draw(st.lists(st.sampled_from(_MOUNT_PATHS), min_size=1, max_size=2,
                               unique=True))
        c["volumeMounts"] = [{"name": f"v{i}", "mountPath": m} for i, m in enumerate(mounts)]


@st.composite
def _objects(draw: st.DrawFn) -> dict[str, Any]:
    """A pod or a workload of plain containers with up to three of the parts the rules read
    put in: an object whose only part a rule acts on is one the conditions miss is what finds
    the miss. (With every part of every container drawn, nearly every object has some part
    the conditions send, and no entry leaves it out to be tried.)"""
    main = [dh.container(f"c{i}") for i in range(draw(st.integers(1, 3)))]
    init = [dh.container(f"i{i}") for i in range(draw(st.integers(0, 1)))]
    spec = dh.pod_spec(*main, init=init)
    annotations = None
    for _ in range(draw(st.integers(0, 3))):
        part = draw(st.sampled_from(_CONTAINER_PARTS + _SPEC_PARTS))
        if part in _CONTAINER_PARTS:
            _put(draw, draw(st.sampled_from(main + init)), part)
        elif part == "runtimeClassName":
            spec["runtimeClassName"] = draw(st.sampled_from(["nvidia", "runc"]))
        elif part == "volumes":
            spec["volumes"] = [{"name": "v0", "hostPath": {"path": draw(st.sampled_from(
                ["/dev", "/data", "/run/nvidia/mps"]))}}]
        elif part == "hostNamespace":
            spec[draw(st.sampled_from(["hostPID", "hostIPC", "hostNetwork"]))] = draw(
                st.booleans())
        else:
            annotations = draw(st.sampled_from([{"gpu-share.io/profile": "no-such-profile"},
                                                {"cdi.k8s.io/x": "nvidia.com/gpu=all"}]))
    kind = draw(st.sampled_from(["Pod", *dh.WORKLOAD_KINDS]))
    obj = _as(kind, spec)
    if annotations is not None:
        meta = obj["metadata"] if kind == "Pod" else (
            obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"] if kind == "CronJob"
            else obj["spec"]["template"]["metadata"])
        meta["annotations"] = annotations
    return obj


@pytest.fixture(scope="module")
def distrusting_policies(tmp_path_factory: pytest.TempPathFactory) -> policies.PolicySet:
    """A default policy with route 2 off that does not trust Pod Security labels."""
    return _switched(
        tmp_path_factory, {"voidVisibleDevicesWithoutGpu": False}, "trustPodSecurity: false"
    )


@pytest.fixture(scope="module")
def cdi_off_policies(tmp_path_factory: pytest.TempPathFactory) -> policies.PolicySet:
    """A default policy with rule cdi-annotations switched off."""
    return _switched(tmp_path_factory, {"denyCdiAnnotations": False})


@dataclasses.dataclass(frozen=True)
class Judged:
    """An entry, and the policy the server applies at its path."""

    kind: str  # of its configuration
    entry: dict[str, Any]
    policy: policies.Policy
    conditions: dh.Conditions


Judgeds = list[Judged]


@pytest.fixture(scope="module")
def judged(
    shipped_policies: policies.PolicySet,
    filtered_policies: policies.PolicySet,
    distrusting_policies: policies.PolicySet,
    cdi_off_policies: policies.PolicySet,
) -> Judgeds:
    """Every entry of the shipped policies and of the policies with other switches, each
    with the policy its path names (`<name>/baseline`: without rule host-access, unless the
    policy does not trust Pod Security)."""
    return [
        Judged(config["kind"], e, loaded.governing(entry_path(e).split("/", 2)[2]),
               dh.Conditions(e))
        for loaded in (shipped_policies, filtered_policies, distrusting_policies,
                       cdi_off_policies)
        for config in render(loaded)
        for e in dh.pod_entries(config)
    ]


@pytest.mark.slow  # 100 hypothesis objects through every entry's CEL conditions
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(obj=_objects())
def test_what_the_conditions_leave_out_the_webhook_would_not_touch(
    judged: Judgeds, obj: dict[str, Any]
) -> None:
    for j in judged:
        if j.conditions.match(obj):
            continue
        endpoint = "mutate" if j.kind == rendering.MUTATING_KIND else "validate"
        group = str(obj["apiVersion"]).rpartition("/")[0]
        decision = reviewing.admit(obj, policy=j.policy, endpoint=endpoint, group=group,
                                   kind=obj["kind"], operation="CREATE")
        why = f"{j.entry['name']} leaves out an object its policy acts on: {decision}"
        assert decision.allowed, why
        assert not decision.patch, why
        assert not decision.warnings, why


# What Pod Security baseline refuses: where the webhook applies rule host-access in its
# stead, these reach it in any pod spec (route 9).
HOST_ACCESS = [
    pytest.param({**dh.pod_spec(dh.container()), "hostNetwork": True}, id="hostNetwork"),
    pytest.param({**dh.pod_spec(dh.container()), "hostPID": True}, id="hostPID"),
    pytest.param({**dh.pod_spec(dh.container()), "hostIPC": True}, id="hostIPC"),
    pytest.param(dh.pod_spec(_with(dh.container(), securityContext={
        "capabilities": {"add": ["NET_RAW"]}})), id="capabilities"),
    pytest.param(dh.pod_spec(dh.container(), init=[_with(dh.container("i"), securityContext={
        "capabilities": {"add": ["CHOWN"]}})]), id="capabilities-init"),
    pytest.param({**dh.pod_spec(dh.container()), "volumes": [
        {"name": "m", "hostPath": {"path": "/models"}}]}, id="hostPath"),
    pytest.param(dh.pod_spec(_with(dh.container(), securityContext={"privileged": True})),
                 id="privileged"),
]


@pytest.mark.slow  # every host-access spec in three kinds, through every entry's CEL
@pytest.mark.parametrize("kind", ["Pod", "Deployment", "CronJob"])
@pytest.mark.parametrize("spec", HOST_ACCESS)
def test_what_pod_security_baseline_refuses_reaches_the_entries_that_stand_in_for_it(
    judged: Judgeds,
    kind: str,
    spec: dict[str, Any],
) -> None:
    """Where the namespace does not enforce baseline (or the policy does not trust it), rule
    host-access applies and its pods are sent, route 2 on or off."""
    obj = _as(kind, spec)
    applies = 0
    for j in judged:
        if kind != "Pod" and j.kind == rendering.MUTATING_KIND:
            continue
        if j.policy.rules.deny_host_access and not j.policy.pod_security:
            applies += 1
            assert j.conditions.match(obj), j.entry["name"]
    # Not only the entries that take every pod: the distrusting policy's baseline ones too.
    assert any(
        ".baseline." in j.entry["name"] and j.policy.rules.void_visible_devices_without_gpu
        is False and not j.policy.pod_security for j in judged)
    assert applies


def test_entries_under_pod_security_are_not_sent_what_only_host_access_would_refuse(
    filtered: dict[tuple[str, str], dh.Conditions],
) -> None:
    """With route 2 off, a pod whose only problem is host access reaches the entry of a
    namespace without Pod Security, not that of one whose baseline refuses it anyway."""
    pod = _as("Pod", {**dh.pod_spec(dh.container()), "hostNetwork": True})
    for (_, name), c in filtered.items():
        if name in _UNKNOWN_ENTRIES:
            continue
        assert c.match(pod) is (".baseline." not in name), name


# --------------------------------------------------------------------------- Pod updates


def _cdi_pod(annotations: dict[str, str] | None) -> dict[str, Any]:
    pod = dh.pod(dh.container(limits={SHARED: 1}))
    if annotations is not None:
        pod["metadata"]["annotations"] = annotations
    return pod


CDI = "cdi.k8s.io/devices"
NVIDIA_CDI = "nvidia.cdi.k8s.io/gpu"
# (old annotations, new annotations, whether the update reaches the webhook).
POD_UPDATES = [
    pytest.param(None, {CDI: "nvidia.com/gpu=all"}, True, id="adds-cdi"),
    pytest.param({}, {NVIDIA_CDI: "nvidia.com/gpu=all"}, True, id="adds-nvidia-cdi"),
    pytest.param({CDI: "nvidia.com/gpu=0"}, {CDI: "nvidia.com/gpu=all"}, True, id="changes-cdi"),
    pytest.param({"a": "1"}, {"a": "1", CDI: "x", "b": "2"}, True, id="adds-among-others"),
    pytest.param({CDI: "x", NVIDIA_CDI: "y"}, {CDI: "x", NVIDIA_CDI: "z"}, True,
                 id="changes-the-second"),
    pytest.param({CDI: "x"}, {CDI: "x"}, False, id="keeps-cdi"),
    pytest.param({CDI: "x"}, {CDI: "x", "team": "a"}, False, id="keeps-cdi-adds-other"),
    pytest.param({CDI: "x"}, None, False, id="removes-cdi"),
    pytest.param(None, {"team": "a"}, False, id="adds-other"),
    pytest.param(None, None, False, id="labels-or-status"),
    pytest.param(None, {"cdi.k8s.io": "x", "example.com/cdi.k8s.io": "y"}, False,
                 id="not-a-cdi-prefix"),
]


@pytest.mark.parametrize(("before", "after", "sent"), POD_UPDATES)
def test_a_pod_update_reaches_the_webhook_only_when_it_adds_or_changes_a_cdi_annotation(
    judged: Judgeds,
    before: dict[str, str] | None,
    after: dict[str, str] | None,
    sent: bool,
) -> None:
    # A pod that uses a GPU, is privileged and mounts a host path: every other Pod update
    # stays away all the same (route 8; the pod was judged when it was created).
    old, new = _cdi_pod(before), _cdi_pod(after)
    for pod in (old, new):
        pod["spec"]["hostNetwork"] = True
        pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        pod["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": "/dev"}}]
    for j in judged:
        # Never where the policy lets CDI annotations be (the catch-all applies the rule
        # whatever the switch of a policy it does not know).
        expected = sent and j.policy.rules.deny_cdi_annotations
        assert j.conditions.match(new, operation="UPDATE", old=old) is expected, j.entry["name"]


def test_no_pod_update_reaches_a_policy_that_lets_cdi_annotations_be(
    cdi_off_policies: policies.PolicySet,
) -> None:
    old, new = _cdi_pod(None), _cdi_pod({CDI: "nvidia.com/gpu=all"})
    for (_, name), c in _conditions_of(render(cdi_off_policies)).items():
        assert c.match(new, operation="UPDATE", old=old) is (name in _UNKNOWN_ENTRIES), name
        # Pods are still sent when created.
        assert c.match(new), name


def test_pod_updates_are_routed_by_the_rules_and_the_conditions_together(
    configurations: dict[str, dict[str, Any]], shipped_policies: policies.PolicySet
) -> None:
    """Through the chain: a Pod update that adds a CDI annotation reaches both entries of its
    namespace, with `oldObject`; a label change reaches none."""
    old = _cdi_pod(None)
    labels = NS("team", **ENABLED, **{PSA: "baseline"})
    adds = _admit(configurations, shipped_policies, labels, _cdi_pod({CDI: "x"}),
                  operation="UPDATE", old=old)
    assert [(c.entry, c.path) for c in adds.calls][:1] == [
        (rendering.DEFAULT_BASELINE_ENTRY, "/mutate/default/baseline")]
    relabelled = _cdi_pod(None)
    relabelled["metadata"]["labels"] = {"app": "new"}
    outcome = _admit(configurations, shipped_policies, labels, relabelled, operation="UPDATE",
                     old=old)
    assert outcome.calls == []
    assert outcome.allowed


# --------------------------------------------------------------------------- request


def test_request_is_bound_as_the_api_server_binds_it() -> None:
    """No subresource: `subResource` is left out (omitempty), not an empty string; `oldObject`
    is null on CREATE and the object before an UPDATE."""
    pod = dh.pod()
    assert "subResource" not in dh.request_of(pod, operation="CREATE", sub_resource="")
    assert "requestSubResource" not in dh.request_of(pod, operation="CREATE", sub_resource="")
    debug = dh.request_of(pod, operation="UPDATE", sub_resource="ephemeralcontainers")
    assert debug["subResource"] == debug["requestSubResource"] == "ephemeralcontainers"
    assert dh.cel("oldObject == null", oldObject=None)


@pytest.mark.parametrize(
    ("expression", "errs"),
    [
        ("request.subResource == 'ephemeralcontainers'", True),
        ("has(request.subResource) && request.subResource == 'ephemeralcontainers'", False),
        ("has(oldObject.metadata)", False),
    ],
)
def test_reading_an_absent_sub_resource_is_an_error_as_in_the_api_server(
    expression: str, errs: bool
) -> None:
    """The unguarded form would fail every Pod create: with Fail, refuse it."""
    conditions = dh.Conditions({"name": "e", "matchConditions": [
        {"name": "c", "expression": expression}]})
    if errs:
        with pytest.raises(Exception, match="subResource"):
            conditions.match(dh.pod())
    else:
        assert conditions.match(dh.pod()) is False


def test_the_rendered_conditions_never_read_request_fields_that_may_be_absent(
    judged: Judgeds,
) -> None:
    """Every read of request.subResource (omitempty) is behind its has(); the other fields
    read (kind, operation) are always there. Every variant of the conditions is looked at."""
    texts = [m["expression"] for j in judged for m in j.entry["matchConditions"]]
    assert len({t for t in texts if "request" in t}) >= 6
    guarded = (
        "(!has(request.subResource) || request.subResource == '')",
        "(has(request.subResource) && request.subResource ==",
    )
    for text in texts:
        reads = re.findall(r"request\.(\w+)", text)
        assert set(reads) <= {"kind", "operation", "subResource"}, reads
        rest = text
        for form in guarded:
            rest = rest.replace(form, "")
        assert "request.subResource" not in rest, text


# --------------------------------------------------------------------------- PodSecurity


def test_in_a_cluster_pod_security_refuses_host_access_before_the_validating_webhook(
    configurations: dict[str, dict[str, Any]], shipped_policies: policies.PolicySet
) -> None:
    pod = _as("Pod", {**dh.pod_spec(dh.container()), "hostNetwork": True})
    enforced = _admit(configurations, shipped_policies,
                      NS("team", **ENABLED, **{PSA: "baseline"}), pod)
    assert not enforced.allowed
    assert 'violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)' in (
        enforced.message)
    # The mutating entry was called, the validating one never was.
    assert enforced.entries == [(rendering.MUTATING_KIND, rendering.DEFAULT_BASELINE_ENTRY)]
    assert [c.path for c in enforced.calls] == ["/mutate/default/baseline"]
    # Without the label, the webhook's own rule host-access refuses it at the mutating entry.
    unenforced = _admit(configurations, shipped_policies, NS("team", **ENABLED), pod)
    assert not unenforced.allowed
    assert "violates PodSecurity" not in unenforced.message
    assert unenforced.entries == [(rendering.MUTATING_KIND, rendering.DEFAULT_ENTRY)]


@pytest.mark.parametrize(
    ("spec", "refused"),
    [
        ({"hostPID": True}, "host namespaces (hostPID=true)"),
        ({"volumes": [{"name": "v", "hostPath": {"path": "/models"}}]},
         'hostPath volumes (volume "v")'),
        ({"containers": [_with(dh.container(), securityContext={"privileged": True})]},
         'privileged (container "main" must not set securityContext.privileged=true)'),
        ({"containers": [_with(dh.container(), securityContext={
            "capabilities": {"add": ["CHOWN", "NET_RAW"]}})]},
         'non-default capabilities (container "main" must not include "NET_RAW"'),
        ({"containers": [_with(dh.container(), securityContext={
            "capabilities": {"add": ["CAP_CHOWN"]}})]}, '"CAP_CHOWN"'),
        ({"containers": [_with(dh.container(), securityContext={
            "capabilities": {"add": ["CHOWN", "NET_BIND_SERVICE", "SYS_CHROOT"]}})]}, None),
        ({"ephemeralContainers": [_with(dh.container("debug"), securityContext={
            "privileged": True})]}, 'container "debug"'),
        ({}, None),
    ],
)
def test_the_pod_security_stand_in_applies_baselines_host_access_checks(
    spec: dict[str, Any], refused: str | None
) -> None:
    pod = _as("Pod", {**dh.pod_spec(dh.container()), **spec})
    for level in ("baseline", "restricted"):
        message = apiserver.pod_security_refusal(pod, NS("team", **{PSA: level}))
        if refused is None:
            assert message is None
        else:
            assert message is not None
            assert refused in message, message
            assert f'violates PodSecurity "{level}:latest"' in message
    for labels in (NS("team"), NS("team", **{PSA: "privileged"})):
        assert apiserver.pod_security_refusal(pod, labels) is None
    # Judged again on an update of its ephemeral containers, not on a metadata update.
    labels = NS("team", **{PSA: "baseline"})
    debug = apiserver.pod_security_refusal(
        pod, labels, operation="UPDATE", sub_resource="ephemeralcontainers", old=pod)
    assert (debug is None) is (refused is None)
    assert apiserver.pod_security_refusal(pod, labels, operation="UPDATE", old=pod) is None


# --------------------------------------------------------------------------- options


def _ca_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def test_a_ca_bundle_goes_base64_into_every_entry(shipped_policies: policies.PolicySet) -> None:
    pem = _ca_pem()
    for config in render(shipped_policies, ca_bundle=pem):
        for e in dh.pod_entries(config):
            assert base64.b64decode(e["clientConfig"]["caBundle"]) == pem


def test_a_cert_manager_certificate_becomes_the_ca_injection_annotation(
    shipped_policies: policies.PolicySet,
) -> None:
    for config in render(shipped_policies, cert_manager_certificate="gpu-share-system/cert"):
        assert config["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": "gpu-share-system/cert"
        }


def test_failure_policy_timeout_service_and_namespace_are_options(
    shipped_policies: policies.PolicySet,
) -> None:
    objects = rendering.render(
        shipped_policies,
        service="svc",
        namespace="ops",
        name="other",
        failure_policy="Ignore",
        timeout_seconds=12,
    )
    for config in objects:
        assert config["metadata"]["name"] == "other"
        for e in dh.pod_entries(config):
            assert e["failurePolicy"] == "Ignore"
            assert e["timeoutSeconds"] == 12
            assert e["clientConfig"]["service"]["name"] == "svc"
            assert e["clientConfig"]["service"]["namespace"] == "ops"
            excluded = e["namespaceSelector"]["matchExpressions"][1]
            assert excluded == {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", "ops"],
            }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout_seconds": 0}, "1..30"),
        ({"timeout_seconds": 31}, "1..30"),
        ({"failure_policy": "Retry"}, "Fail, Ignore"),
        ({"service": "Bad_Name"}, "Service name"),
        ({"namespace": "a.b"}, "namespace"),
        ({"cert_manager_certificate": "no-slash"}, "NAMESPACE/NAME"),
        ({"cert_manager_certificate": "ns/c", "ca_bundle": b"pem"}, "not both"),
    ],
)
def test_options_kubernetes_would_refuse_are_refused(
    shipped_policies: policies.PolicySet, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        render(shipped_policies, **options)


# --------------------------------------------------------------------------- the command


def test_render_prints_yaml_that_parses_back_to_the_rendered_objects(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    shipped_policies: policies.PolicySet,
) -> None:
    monkeypatch.chdir(dh.REPO)
    assert cli.main(["render"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Generated by `gpu-share-webhook render`")
    assert [d for d in dh.load_all(out) if d] == render(shipped_policies)


@pytest.mark.parametrize("name", ["n", "y", "0", "1e3", "0x1f"])
def test_a_policy_name_yaml_1_1_reads_as_no_string_is_quoted(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kubectl reads YAML with go-yaml v2 (YAML 1.1: `n` is false, `1e3` a number), where
    PyYAML writes these DNS labels plain: the namespace selector's value would reach the API
    server as no string."""
    text = (dh.POLICIES / "default.yaml").read_text()
    (tmp_path / "p.yaml").write_text(text.replace("name: default", f"name: '{name}'"))
    assert cli.main(["render", "--policies", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"      - '{name}'\n" in out
    assert f"      - {name}\n" not in out


def test_render_json_is_a_list(
    capsys: pytest.CaptureFixture[str], shipped_policies: policies.PolicySet
) -> None:
    assert cli.main(["render", "--policies", str(dh.POLICIES), "-o", "json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["kind"] == "List"
    assert listing["items"] == render(shipped_policies)


def test_render_takes_every_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pem = tmp_path / "ca.crt"
    pem.write_bytes(_ca_pem())
    argv = [
        "render",
        "--policies",
        str(dh.POLICIES),
        "--service",
        "svc",
        "--namespace",
        "ops",
        "--ca-bundle-file",
        str(pem),
        "--failure-policy",
        "Ignore",
        "--timeout-seconds",
        "3",
        "-o",
        "json",
    ]
    assert cli.main(argv) == 0
    for config in json.loads(capsys.readouterr().out)["items"]:
        for e in dh.pod_entries(config):
            assert base64.b64decode(e["clientConfig"]["caBundle"]) == pem.read_bytes()
            assert e["failurePolicy"] == "Ignore"
            assert e["timeoutSeconds"] == 3
            assert e["clientConfig"]["service"]["name"] == "svc"


def test_render_reads_options_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_POLICIES", str(dh.POLICIES))
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_FAILURE_POLICY", "Ignore")
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_CERT_MANAGER_CERTIFICATE", "ns/cert")
    assert cli.main(["render", "-o", "json"]) == 0
    for config in json.loads(capsys.readouterr().out)["items"]:
        assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "ns/cert"}
        assert {e["failurePolicy"] for e in dh.pod_entries(config)} == {"Ignore"}


def test_render_outside_a_checkout_uses_the_shipped_policies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["render", "-o", "json"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    names = {e["name"] for e in items[0]["webhooks"]}
    assert rendering.policy_entry("default") in names


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ca-bundle-file", "{tmp}/missing.pem"], "cannot be read"),
        (["--ca-bundle-file", "{tmp}/not.pem"], "holds no PEM certificate"),
        (
            ["--ca-bundle-file", "{tmp}/ca.pem", "--cert-manager-certificate", "a/b"],
            "not both",
        ),
        (["--policies", "{tmp}/bad"], "bad.yaml"),
        (["--policies", "{tmp}/missing"], "not a directory"),
    ],
)
def test_render_refuses_bad_input_with_exit_2_and_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    (tmp_path / "not.pem").write_text("hello\n")
    (tmp_path / "ca.pem").write_bytes(_ca_pem())
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "bad.yaml").write_text("apiVersion: gpu-share.io/v1alpha1\nkind: X\n")
    argv = ["render", "--policies", str(dh.POLICIES)] + [
        a.replace("{tmp}", str(tmp_path)) for a in extra
    ]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err


def test_render_refuses_an_unknown_failure_policy_as_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["render", "--failure-policy", "Retry"])
    assert exc.value.code == 2
    assert "Retry" in capsys.readouterr().err


def _binding(annotations: dict[str, str] | None) -> dict[str, Any]:
    """A Binding as `pods/binding` takes it (the scheduler's, or anyone's with that right):
    the API server copies its annotations onto the pod it binds."""
    meta: dict[str, Any] = {"name": "p", "namespace": "team"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-1"}}


@pytest.mark.slow  # every Pod update case again, as a status update, through every entry
@pytest.mark.parametrize(("before", "after", "sent"), POD_UPDATES)
def test_a_status_update_reaches_the_webhook_only_when_it_adds_or_changes_a_cdi_annotation(
    judged: Judgeds,
    before: dict[str, str] | None,
    after: dict[str, str] | None,
    sent: bool,
) -> None:
    """`pods/status` keeps the metadata it is sent with: the kubelet's status updates never
    reach the webhook, one that adds a CDI annotation does."""
    old, new = _cdi_pod(before), _cdi_pod(after)
    for j in judged:
        expected = sent and j.policy.rules.deny_cdi_annotations
        assert j.conditions.match(new, operation="UPDATE", sub_resource="status", old=old) is (
            expected), j.entry["name"]


@pytest.mark.slow  # four Bindings, two resources, through every entry's CEL
@pytest.mark.parametrize(
    ("annotations", "sent"),
    [
        pytest.param(None, False, id="the-scheduler's"),
        pytest.param({"note": "x"}, False, id="other-annotations"),
        pytest.param({CDI: "nvidia.com/gpu=all"}, True, id="cdi"),
        pytest.param({"nvidia.cdi.k8s.io/x": "nvidia.com/gpu=0"}, True, id="nvidia-cdi"),
    ],
)
def test_a_binding_reaches_the_webhook_only_with_a_cdi_annotation(
    judged: Judgeds, annotations: dict[str, str] | None, sent: bool
) -> None:
    for j in judged:
        expected = sent and j.policy.rules.deny_cdi_annotations
        # `pods/binding`, and the older `bindings` resource (no subresource).
        for sub_resource in ("binding", ""):
            assert j.conditions.match(_binding(annotations), sub_resource=sub_resource) is (
                expected), j.entry["name"]


# --------------------------------------------------------------------------- describe


def _sends(entry: dict[str, Any], conditions: dh.Conditions, obj: dict[str, Any], *,
           operation: str = "CREATE", sub_resource: str = "",
           old: dict[str, Any] | None = None) -> bool:
    """Whether the API server calls `entry` (whose compiled matchConditions are
    `conditions`) for `obj`, its namespace aside: a rule matches the resource and operation,
    and every matchCondition holds."""
    group = str(obj["apiVersion"]).rpartition("/")[0]
    resource = kube.plural(str(obj["kind"])) + (f"/{sub_resource}" if sub_resource else "")
    if not any(
        group in r["apiGroups"] and resource in r["resources"] and operation in r["operations"]
        for r in entry["rules"]
    ):
        return False
    return conditions.match(obj, operation=operation, sub_resource=sub_resource, old=old)


def _host_pid(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec, "hostPID": True}


# (what the entry is sent by `describe`'s account, a request of it): the request reaches an
# entry exactly when the entry's `sent` says so.
_SAMPLES: list[tuple[str, Any, dict[str, Any]]] = [
    ("plain pod", lambda s: "every-pod" in s, {"obj": dh.pod()}),
    ("gpu pod", lambda s: bool({"every-pod", "gpu-pods"} & set(s)), {"obj": _shared_pod()}),
    ("host pid pod", lambda s: "every-pod" in s or {"gpu-pods", "host-access"} <= set(s),
     {"obj": {**dh.pod(), "spec": _host_pid(dh.pod_spec())}}),
    ("gpu deployment", lambda s: "workloads" in s,
     {"obj": dh.workload("Deployment", dh.pod_spec(dh.container(limits={SHARED: 1})))}),
    ("host pid deployment", lambda s: {"workloads", "host-access"} <= set(s),
     {"obj": dh.workload("ReplicationController", _host_pid(dh.pod_spec()))}),
    ("plain job", lambda s: False, {"obj": dh.workload("Job", dh.pod_spec())}),
    ("kubectl debug", lambda s: "ephemeral-containers" in s,
     {"obj": dh.pod(), "operation": "UPDATE", "sub_resource": "ephemeralcontainers"}),
    ("cdi update", lambda s: "cdi-updates" in s,
     {"obj": _cdi_pod({CDI: "x"}), "operation": "UPDATE", "old": _cdi_pod(None)}),
    ("label update", lambda s: False,
     {"obj": {**dh.pod(), "metadata": {"name": "p", "labels": {"a": "b"}}},
      "operation": "UPDATE", "old": dh.pod()}),
    ("cdi status update", lambda s: "cdi-updates" in s,
     {"obj": _cdi_pod({CDI: "x"}), "operation": "UPDATE", "sub_resource": "status",
      "old": _cdi_pod(None)}),
    ("gpu claim", lambda s: "claims" in s, {"obj": dra.obj("single-gpu-claim")}),
    ("namespace near miss", lambda s: "namespace-labels" in s,
     {"obj": {"apiVersion": "v1", "kind": "Namespace",
              "metadata": {"name": "team", "labels": {"gpu-share.io/enabled": "True"}}}}),
]


@pytest.fixture(scope="module")
def variants(
    configurations: dict[str, dict[str, Any]],
    filtered_policies: policies.PolicySet,
    distrusting_policies: policies.PolicySet,
    cdi_off_policies: policies.PolicySet,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, list[dict[str, Any]]]:
    """The rendered configurations of the shipped policies and of policies whose switches
    change what the entries are sent."""
    host_access_off = _switched(tmp_path_factory, {"voidVisibleDevicesWithoutGpu": False,
                                                   "denyHostAccess": False})
    return {
        "shipped": list(configurations.values()),
        "route-2-off": render(filtered_policies),
        "distrusting": render(distrusting_policies),
        "cdi-off": render(cdi_off_policies),
        "host-access-off": render(host_access_off),
    }


@pytest.mark.slow  # every sample through every entry's CEL, five configurations
def test_describe_says_what_each_entry_is_sent_as_its_conditions_send_it(
    variants: dict[str, list[dict[str, Any]]],
) -> None:
    for variant, configs in variants.items():
        reaches = {(r.configuration, r.entry): r for r in rendering.describe(configs)}
        for config in configs:
            for entry in config["webhooks"]:
                sent = reaches[(config["kind"], entry["name"])].sent
                conditions = dh.Conditions(entry)
                for what, expected, request in _SAMPLES:
                    assert _sends(entry, conditions, **request) is expected(sent), (
                        variant, entry["name"], what, sent)


def test_describe_follows_the_switches_that_change_what_is_sent(
    variants: dict[str, list[dict[str, Any]]],
) -> None:
    """Each switch that `match_condition` reads shows in `describe` (the catch-all is
    described as a policy with the default switches, whatever the others say)."""
    def sent(variant: str, entry: str) -> tuple[str, ...]:
        (found,) = [r.sent for r in rendering.describe(variants[variant])
                    if r.configuration == rendering.VALIDATING_KIND and r.entry == entry]
        return found

    default, baseline = rendering.DEFAULT_ENTRY, rendering.DEFAULT_BASELINE_ENTRY
    assert "every-pod" in sent("shipped", default)
    assert "every-pod" not in sent("route-2-off", default)
    assert "gpu-pods" in sent("route-2-off", default)
    assert "every-pod" in sent("route-2-off", rendering.UNKNOWN_ENTRY)
    assert "host-access" in sent("route-2-off", default)
    assert "host-access" not in sent("route-2-off", baseline)
    assert "host-access" in sent("distrusting", baseline)
    assert "host-access" not in sent("host-access-off", default)
    assert "cdi-updates" in sent("shipped", default)
    assert "cdi-updates" not in sent("cdi-off", default)
    assert "cdi-updates" in sent("cdi-off", rendering.UNKNOWN_ENTRY)
    for configs in variants.values():
        for r in rendering.describe(configs):
            if r.entry == rendering.NAMESPACE_ENTRY:
                assert (r.sent, r.failure_policy) == (("namespace-labels",), "Ignore")
            else:
                assert {"ephemeral-containers", "claims"} <= set(r.sent), r
                assert ("workloads" in r.sent) is (r.configuration == rendering.VALIDATING_KIND)


def test_describe_names_every_workload_kind_the_validating_entries_are_sent(
    validating_config: dict[str, Any],
) -> None:
    (reach, *_) = rendering.describe([validating_config])
    expected = [f"{k.group}/{k.resource}" for k in kinds.all_kinds()]
    assert sorted(reach.workloads) == sorted(expected)


def test_describe_refuses_a_rule_it_cannot_describe(
    configurations: dict[str, dict[str, Any]],
) -> None:
    """A rule added to the configurations must be described (and so documented), not left
    out of the description."""
    changed = json.loads(json.dumps(list(configurations.values())))
    changed[0]["webhooks"][0]["rules"].append(
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
         "resources": ["pods/resize"], "scope": "Namespaced"})
    with pytest.raises(ValueError, match="pods/resize"):
        rendering.describe(changed)
    changed = json.loads(json.dumps(list(configurations.values())))
    changed[1]["webhooks"][0]["rules"].append(
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
         "resources": ["services"], "scope": "Namespaced"})
    with pytest.raises(ValueError, match="services"):
        rendering.describe(changed)
