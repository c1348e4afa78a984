"""`gpu-share-webhook render` and the webhook configurations it makes (webhook/rendering.py).

What the API server does with them is played with the real semantics: label selectors as
Kubernetes matches them, and the matchConditions evaluated by a CEL implementation
(cel-python) against pods and workloads.
"""

from __future__ import annotations

import base64
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

from tests import deploy_helpers as dh
from webhook import cli, mutating, namespaces, policies, rendering, reviews
from webhook.commands import DEFAULT_NAMESPACE, DEFAULT_SERVICE, DEFAULT_WEBHOOK_NAME

SHARED = "nvidia.com/gpu.shared"
MIRROR = {"kubernetes.io/config.mirror": "0123abcd"}
WORKLOAD_RESOURCES = {
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
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
    return {e["name"]: e for e in config["webhooks"]}


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
        for e in config["webhooks"]
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
    expected = {
        rendering.DEFAULT_ENTRY: "default",
        **{rendering.policy_entry(n): n for n in shipped_policies.names},
        rendering.UNKNOWN_ENTRY: reviews.UNKNOWN_POLICY,
    }
    assert set(shipped_policies.names) == {"default", "not-renamed"}
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
        names = [e["name"] for e in config["webhooks"]]
        assert len(names) == len(set(names))
        for name in names:
            assert _FQDN.fullmatch(name), name
            assert len(name) <= 253


def test_no_policy_name_can_collide_with_the_special_entries() -> None:
    # Policy entries have four labels, the special ones three.
    for name in ("default", "unknown-policy", "gpu-share", "policies", "io"):
        assert rendering.policy_entry(name) not in (
            rendering.DEFAULT_ENTRY,
            rendering.UNKNOWN_ENTRY,
        )


def test_every_entry_has_the_settings_the_spec_asks_for(
    configurations: dict[str, dict[str, Any]],
) -> None:
    for kind, config in configurations.items():
        for e in config["webhooks"]:
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


def test_mutation_sees_pods_on_create_only(mutating_config: dict[str, Any]) -> None:
    for e in mutating_config["webhooks"]:
        assert e["rules"] == [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]


def test_validation_sees_pods_on_create_and_the_six_workloads_on_create_and_update(
    validating_config: dict[str, Any],
) -> None:
    for e in validating_config["webhooks"]:
        seen: dict[tuple[str, str], list[str]] = {}
        for rule in e["rules"]:
            assert rule["apiVersions"] == ["v1"]
            assert rule["scope"] == "Namespaced"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    assert (group, resource) not in seen
                    seen[(group, resource)] = rule["operations"]
        assert seen.pop(("", "pods")) == ["CREATE"]
        assert set(seen) == WORKLOAD_RESOURCES
        # The same kinds whose templates the core reviews.
        assert {r for _, r in seen} == {k.lower() + "s" for k in mutating.TEMPLATE_PATHS}
        assert all(ops == ["CREATE", "UPDATE"] for ops in seen.values())


def test_match_conditions_are_few_and_well_named(
    configurations: dict[str, dict[str, Any]],
) -> None:
    for config in configurations.values():
        for e in config["webhooks"]:
            names = [c["name"] for c in e["matchConditions"]]
            assert 1 <= len(names) <= 64
            assert len(set(names)) == len(names)
            assert all(_QUALIFIED.fullmatch(n) and len(n) <= 63 for n in names)


# --------------------------------------------------------------------------- namespaces

NS = dh.namespace_labels
ENABLED = {"gpu-share.io/enabled": "true"}

POLICY = "gpu-share.io/policy"
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
    ("unknown", NS("team", **ENABLED, **{POLICY: "no-such-policy"}), reviews.UNKNOWN_POLICY),
    ("unknown-case", NS("team", **ENABLED, **{POLICY: "Default"}), reviews.UNKNOWN_POLICY),
    ("kube-system", NS("kube-system", **ENABLED), None),
    ("own-namespace", NS("gpu-share-system", **ENABLED), None),
]
_EXCLUDED = ("kube-system", "own-namespace")


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
            for e in configurations[kind]["webhooks"]
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
    name = namespaces.policy_name(labels)
    if name is not None and shipped_policies.get(name) is None:
        name = reviews.UNKNOWN_POLICY
    assert name == expected


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
    decision = reviews.decide(
        reviews.parse(_review(dh.pod(dh.container(limits={"nvidia.com/gpu": 1})))),
        policies=only,
        policy_name="default",
        endpoint="mutate",
    )
    assert not decision.allowed
    assert 'policy "default" does not exist' in decision.message
    # Any GPU asks reach it: which names were meant as shared is not known.
    conditions = dh.Conditions(by_name[rendering.DEFAULT_ENTRY])
    assert conditions.match(dh.pod(dh.container(limits={"nvidia.com/mig-1g.5gb": 1})))
    assert not conditions.match(dh.pod(dh.container(limits={"cpu": 1})))


def _review(obj: dict[str, Any], operation: str = "CREATE") -> bytes:
    group, _, version = obj["apiVersion"].rpartition("/")
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": group, "version": version, "kind": obj["kind"]},
                "operation": operation,
                "namespace": "team",
                "object": obj,
            },
        }
    ).encode()


def _admit(
    configurations: dict[str, dict[str, Any]],
    shipped: policies.PolicySet,
    labels: dict[str, str],
    obj: dict[str, Any],
    operation: str = "CREATE",
) -> list[tuple[str, str, Any]]:
    """What the API server would do: (configuration kind, entry, decision) of each call.

    An entry is called when the namespace matches its selector, one of its rules the
    object's resource and operation, and all its matchConditions hold; the server then
    answers from the path's policy segment.
    """
    group, _, _ = obj["apiVersion"].rpartition("/")
    resource = obj["kind"].lower() + "s"
    calls = []
    for kind in (rendering.MUTATING_KIND, rendering.VALIDATING_KIND):
        for e in configurations[kind]["webhooks"]:
            if not dh.selector_matches(e["namespaceSelector"], labels):
                continue
            if not any(
                group in r["apiGroups"]
                and resource in r["resources"]
                and operation in r["operations"]
                for r in e["rules"]
            ):
                continue
            if not dh.Conditions(e).match(obj):
                continue
            endpoint, policy_name = entry_path(e).strip("/").split("/")
            decision = reviews.decide(
                reviews.parse(_review(obj, operation)),
                policies=shipped,
                policy_name=policy_name,
                endpoint="mutate" if endpoint == "mutate" else "validate",
            )
            calls.append((kind, e["name"], decision))
    return calls


def test_in_a_cluster_a_shared_gpu_pod_is_mutated_by_its_namespaces_policy_only(
    configurations: dict[str, dict[str, Any]], shipped_policies: policies.PolicySet
) -> None:
    pod = dh.pod(dh.container(limits={SHARED: 1}))
    calls = _admit(configurations, shipped_policies, NS("team", **ENABLED), pod)
    assert [(k, n) for k, n, _ in calls] == [
        (rendering.MUTATING_KIND, rendering.DEFAULT_ENTRY),
        (rendering.VALIDATING_KIND, rendering.DEFAULT_ENTRY),
    ]
    mutated, validated = (d for _, _, d in calls)
    assert mutated.allowed
    assert mutated.patch
    assert validated.allowed
    assert not validated.patch
    # Not opted in, or nothing GPU-related: the webhook is never called.
    assert _admit(configurations, shipped_policies, NS("team"), pod) == []
    plain = dh.pod(dh.container())
    assert _admit(configurations, shipped_policies, NS("team", **ENABLED), plain) == []


def test_in_a_cluster_a_labelled_namespace_gets_its_policy_and_a_typo_gets_a_reason(
    configurations: dict[str, dict[str, Any]], shipped_policies: policies.PolicySet
) -> None:
    pod = dh.pod(dh.container(limits={"nvidia.com/gpu": 1}))
    labels = NS("team", **ENABLED, **{POLICY: "not-renamed"})
    calls = _admit(configurations, shipped_policies, labels, pod)
    assert {n for _, n, _ in calls} == {rendering.policy_entry("not-renamed")}
    assert all(d.allowed for _, _, d in calls)
    typo = NS("team", **ENABLED, **{POLICY: "not-renamd"})
    calls = _admit(configurations, shipped_policies, typo, pod)
    assert {n for _, n, _ in calls} == {rendering.UNKNOWN_ENTRY}
    assert all("does not exist" in d.message for _, _, d in calls)


def test_in_a_cluster_a_workload_that_breaks_a_rule_is_refused_when_applied(
    configurations: dict[str, dict[str, Any]], shipped_policies: policies.PolicySet
) -> None:
    deployment = dh.workload("Deployment", dh.pod_spec(dh.container(limits={SHARED: 2})))
    for operation in ("CREATE", "UPDATE"):
        calls = _admit(
            configurations, shipped_policies, NS("team", **ENABLED), deployment, operation
        )
        assert [(k, n) for k, n, _ in calls] == [
            (rendering.VALIDATING_KIND, rendering.DEFAULT_ENTRY)
        ]
        assert "invalid multi-replica request" in calls[0][2].message


# --------------------------------------------------------------------------- matchConditions


def _shared_pod() -> dict[str, Any]:
    return dh.pod(dh.container(limits={SHARED: 1}))


SELECTED = [
    pytest.param(_shared_pod(), id="pod-limits"),
    pytest.param(dh.pod(dh.container(requests={SHARED: 1})), id="pod-requests-only"),
    pytest.param(
        dh.pod(dh.container(), init=[dh.container("init", limits={SHARED: 1})]),
        id="pod-init-container",
    ),
    pytest.param(
        dh.pod(dh.container("a"), dh.container("b", limits={SHARED: 2})), id="second-container"
    ),
    pytest.param(dh.pod(dh.container(env={"NVIDIA_VISIBLE_DEVICES": "all"})), id="visible-devices"),
    pytest.param(
        dh.pod(dh.container(env={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"})), id="cuda-mps-env"
    ),
    pytest.param(
        dh.pod(dh.container(), init=[dh.container("i", env={"CUDA_MPS_PIPE_DIRECTORY": "/x"})]),
        id="cuda-mps-env-init",
    ),
    *(
        pytest.param(
            dh.workload(kind, dh.pod_spec(dh.container(limits={SHARED: 1}))),
            id=f"{kind}-template",
        )
        for kind in dh.WORKLOAD_KINDS
    ),
    pytest.param(
        dh.workload("CronJob", dh.pod_spec(dh.container(env={"NVIDIA_VISIBLE_DEVICES": "0"}))),
        id="CronJob-visible-devices",
    ),
    pytest.param(
        dh.workload(
            "Deployment",
            dh.pod_spec(dh.container(), init=[dh.container("i", requests={SHARED: 1})]),
        ),
        id="Deployment-init-requests",
    ),
]

LEFT_OUT = [
    pytest.param(dh.pod(dh.container()), id="plain-pod"),
    pytest.param(dh.pod(dh.container(limits={"cpu": "1", "memory": "1Gi"})), id="cpu-pod"),
    pytest.param(
        dh.pod(dh.container(env={"CUDA_VISIBLE_DEVICES": "0", "PATH": "/bin"})), id="other-env"
    ),
    pytest.param(dh.pod(dh.container(limits={"nvidia.com/gpu": 1})), id="exclusive-gpu"),
    pytest.param(
        dh.pod(dh.container(limits={"nvidia.com/mig-1g.5gb.shared": 1})),
        id="another-policys-resource",
    ),
    pytest.param(
        {**_shared_pod(), "metadata": {"name": "p", "annotations": MIRROR}}, id="mirror-pod"
    ),
    pytest.param(
        {
            **dh.pod(dh.container(env={"NVIDIA_VISIBLE_DEVICES": "all"})),
            "metadata": {"name": "p", "annotations": MIRROR},
        },
        id="mirror-pod-env",
    ),
    *(
        pytest.param(dh.workload(kind, dh.pod_spec(dh.container())), id=f"{kind}-no-gpu")
        for kind in dh.WORKLOAD_KINDS
    ),
]


def _default_entries(
    conditions: dict[tuple[str, str], dh.Conditions],
) -> list[dh.Conditions]:
    """The entries that serve the default policy (unlabelled and labelled), in both kinds."""
    names = (rendering.DEFAULT_ENTRY, rendering.policy_entry("default"))
    return [c for (_, name), c in conditions.items() if name in names]


@pytest.mark.parametrize("obj", SELECTED)
def test_objects_that_ask_for_a_shared_gpu_or_set_gpu_env_reach_the_webhook(
    conditions: dict[tuple[str, str], dh.Conditions], obj: dict[str, Any]
) -> None:
    for c in _default_entries(conditions):
        assert c.match(obj), c.entry


@pytest.mark.parametrize("obj", LEFT_OUT)
def test_plain_mirror_and_non_gpu_objects_never_reach_the_webhook(
    conditions: dict[tuple[str, str], dh.Conditions], obj: dict[str, Any]
) -> None:
    for c in _default_entries(conditions):
        assert not c.match(obj), c.entry


def test_each_policy_entry_asks_for_that_policys_shared_resources(
    shipped_policies: policies.PolicySet, validating_config: dict[str, Any]
) -> None:
    by_name = entries(validating_config)
    renamed = dh.Conditions(by_name[rendering.policy_entry("default")])
    not_renamed = dh.Conditions(by_name[rendering.policy_entry("not-renamed")])
    assert shipped_policies.policies["not-renamed"].shared_resources == {"nvidia.com/gpu"}
    exclusive = dh.pod(dh.container(limits={"nvidia.com/gpu": 1}))
    assert not renamed.match(exclusive)
    assert not_renamed.match(exclusive)
    assert renamed.match(_shared_pod())
    assert not not_renamed.match(_shared_pod())


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(dh.pod(dh.container(limits={"nvidia.com/gpu": 1})), id="exclusive-gpu"),
        pytest.param(dh.pod(dh.container(limits={"nvidia.com/mig-3g.20gb": 1})), id="mig"),
        pytest.param(_shared_pod(), id="shared"),
        pytest.param(
            dh.workload("StatefulSet", dh.pod_spec(dh.container(requests={"nvidia.com/gpu": 1}))),
            id="workload",
        ),
        pytest.param(dh.pod(dh.container(env={"NVIDIA_VISIBLE_DEVICES": "all"})), id="env"),
    ],
)
def test_the_unknown_policy_entry_catches_every_gpu_ask(
    conditions: dict[tuple[str, str], dh.Conditions], obj: dict[str, Any]
) -> None:
    for kind in (rendering.MUTATING_KIND, rendering.VALIDATING_KIND):
        assert conditions[(kind, rendering.UNKNOWN_ENTRY)].match(obj)


def test_the_unknown_policy_entry_leaves_non_gpu_and_mirror_pods_alone(
    conditions: dict[tuple[str, str], dh.Conditions],
) -> None:
    c = conditions[(rendering.VALIDATING_KIND, rendering.UNKNOWN_ENTRY)]
    assert not c.match(dh.pod(dh.container(limits={"cpu": 2})))
    assert not c.match(dh.workload("Job", dh.pod_spec(dh.container())))
    assert not c.match({**_shared_pod(), "metadata": {"name": "m", "annotations": MIRROR}})


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
            {"kind": "Pod", "spec": {"containers": [{"name": "a", "env": [{"value": "x"}]}]}},
            id="env-without-name",
        ),
        pytest.param({"kind": "Deployment", "spec": {"replicas": 1}}, id="workload-no-template"),
        pytest.param(
            {"kind": "Deployment", "spec": {"template": {"metadata": {}}}},
            id="template-no-spec",
        ),
        pytest.param(
            {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {}}}}, id="cronjob-no-template"
        ),
        pytest.param(
            {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {}}}}},
            id="cronjob-no-spec",
        ),
    ],
)
def test_conditions_evaluate_without_error_on_sparse_objects(
    conditions: dict[tuple[str, str], dh.Conditions], obj: dict[str, Any]
) -> None:
    # With failurePolicy Fail a CEL error refuses the request: every field is guarded.
    for c in conditions.values():
        assert not c.match(obj), c.entry


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
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_VISIBLE_DEVICES",
    "PATH",
]
_quantities = st.sampled_from(["1", "2", 1, 2, "500m"])
_resource_maps = st.dictionaries(st.sampled_from(_RESOURCE_NAMES), _quantities, max_size=3)


@st.composite
def _containers(draw: st.DrawFn, name: str) -> dict[str, Any]:
    return dh.container(
        name,
        limits=draw(_resource_maps),
        requests=draw(_resource_maps),
        env=draw(
            st.dictionaries(
                st.sampled_from(_ENV_NAMES),
                st.sampled_from(["all", "void", "10", "0=1024M"]),
                max_size=2,
            )
        ),
    )


@st.composite
def _objects(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 3))
    main = [draw(_containers(f"c{i}")) for i in range(count)]
    init = [draw(_containers(f"i{i}")) for i in range(draw(st.integers(0, 1)))]
    spec = dh.pod_spec(*main, init=init)
    if draw(st.booleans()):
        spec["runtimeClassName"] = draw(st.sampled_from(["nvidia", "runc"]))
    kind = draw(st.sampled_from(["Pod", *dh.WORKLOAD_KINDS]))
    obj = dh.pod(*main, init=init) if kind == "Pod" else dh.workload(kind, spec)
    if kind == "Pod":
        obj["spec"] = spec
    if draw(st.booleans()):
        obj["metadata"]["annotations"] = {"gpu-share.io/profile": "no-such-profile"}
    return obj


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(obj=_objects())
def test_what_the_conditions_leave_out_the_webhook_would_not_touch(
    shipped_policies: policies.PolicySet,
    conditions: dict[tuple[str, str], dh.Conditions],
    obj: dict[str, Any],
) -> None:
    for (kind, entry_name), c in conditions.items():
        if entry_name == rendering.UNKNOWN_ENTRY:
            continue  # refuses whatever reaches it; tested above
        name = "default" if entry_name == rendering.DEFAULT_ENTRY else entry_name.split(".")[0]
        policy = shipped_policies.policies[name]
        mutate = kind == rendering.MUTATING_KIND
        if mutate and obj["kind"] != "Pod":
            continue  # the mutating rules never send workloads
        if c.match(obj):
            continue
        decision = mutating.review(obj, policy=policy, mutate=mutate)
        why = f"{entry_name} leaves out an object that policy {name} acts on: {decision}"
        assert decision.allowed, why
        assert not decision.patch, why
        assert not decision.warnings, why


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
        for e in config["webhooks"]:
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
        for e in config["webhooks"]:
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
    assert [d for d in yaml.safe_load_all(out) if d] == render(shipped_policies)


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
        for e in config["webhooks"]:
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
        assert {e["failurePolicy"] for e in config["webhooks"]} == {"Ignore"}


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
        (["--timeout-seconds", "31"], "1..30"),
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


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("GPU_SHARE_WEBHOOK_OUTPUT", "patch", "not one of yaml, json"),
        ("GPU_SHARE_WEBHOOK_FAILURE_POLICY", "Retry", "not one of Fail, Ignore"),
        ("GPU_SHARE_WEBHOOK_TIMEOUT_SECONDS", "0", "1..30"),
    ],
)
def test_bad_values_from_the_environment_are_refused_too(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    message: str,
) -> None:
    monkeypatch.setenv(variable, value)
    assert cli.main(["render", "--policies", str(dh.POLICIES)]) == 2
    assert message in capsys.readouterr().err


def test_render_refuses_an_unknown_failure_policy_as_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["render", "--failure-policy", "Retry"])
    assert exc.value.code == 2
    assert "Retry" in capsys.readouterr().err
