"""The decision cache (reviewing.Cache): a cached decision equals a fresh one, for every pod
of the corpus and for generated ones, including the replicas of a workload (whose service
account volumes have names of their own); it is bounded, keeps no refusal, and a policy
reload never finds the old set's decisions."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given

from tests import kube, test_escape_routes, test_properties, test_rules
from tests.kube import container, pod, review, shared
from webhook import policies
from webhook.core import pods, reviewing

SHIPPED = kube.shipped()


def _replica(obj: dict[str, Any], n: int) -> dict[str, Any]:
    """Another pod of the same workload: its own name, and its own name for every volume
    that is not a hostPath (the service account volume `kube-api-access-<random>`)."""
    other = copy.deepcopy(obj)
    meta = other.setdefault("metadata", {})
    if isinstance(meta, dict):
        meta["name"] = f"{meta.get('name', 'p')}-{n}"
        meta["uid"] = f"uid-{n}"
    spec = other.get("spec")
    if not isinstance(spec, dict):
        return other
    renamed = {}
    for v in spec.get("volumes") or []:
        if isinstance(v, dict) and "hostPath" not in v and isinstance(v.get("name"), str):
            renamed[v["name"]] = v["name"] = f"{v['name']}-x{n}z"
    for group in pods.CONTAINER_GROUPS:
        for c in spec.get(group) or []:
            for m in c.get("volumeMounts") or [] if isinstance(c, dict) else []:
                if isinstance(m, dict) and m.get("name") in renamed:
                    m["name"] = renamed[m["name"]]
    return other


def _with_service_account(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    spec = out.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
        spec.setdefault("volumes", []).append(
            {"name": "kube-api-access-abcde", "projected": {"sources": []}})
        for c in spec["containers"]:
            if isinstance(c, dict):
                c.setdefault("volumeMounts", []).append(
                    {"name": "kube-api-access-abcde",
                     "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    return out


def _corpus() -> list[dict[str, Any]]:
    found = [d for path in kube.real_world_manifests()
             for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    found += [d for path in sorted((kube.REPO / "examples").rglob("*.yaml"))
              for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    found += [case.values[0] for case in test_rules.CASES]
    found += [case.obj for case in test_escape_routes.CASES.values()]
    out = []
    for obj in found:
        for template in kube.templates_of(obj):
            p = {"apiVersion": "v1", "kind": "Pod", "metadata": copy.deepcopy(
                template.get("metadata") or {"name": "p"}), "spec": copy.deepcopy(template["spec"])}
            out.append(_with_service_account(kube.as_served(p)))
    return out


CORPUS = _corpus()


def _same(a: Any, b: Any) -> None:
    assert (a.allowed, a.patch, a.warnings, a.audit, a.mutations, a.message) == (
        b.allowed, b.patch, b.warnings, b.audit, b.mutations, b.message)
    assert [(m, v.text) for m, v in a.would_refuse] == [(m, v.text) for m, v in b.would_refuse]


@pytest.mark.parametrize("policy_name", ["default", "not-renamed"])
def test_a_cached_decision_equals_a_fresh_one_for_every_pod_of_the_corpus(
    policy_name: str,
) -> None:
    policy = SHIPPED.policies[policy_name]
    cache = reviewing.Cache(10_000)
    cacheable = 0
    for obj in CORPUS:
        for mutate, require in ((True, False), (False, True)):
            first = review(obj, policy, mutate=mutate, require=require, cache=cache)
            fresh = review(obj, policy, mutate=mutate, require=require)
            _same(first, fresh)
            cacheable += fresh.allowed and not fresh.would_refuse
            replica = _replica(obj, 7)
            _same(review(replica, policy, mutate=mutate, require=require, cache=cache),
                  review(replica, policy, mutate=mutate, require=require))
    # Every replica of a pod with a cacheable decision was answered from the cache.
    assert cache.hits >= cacheable > 10


@test_properties.PROPERTY_SETTINGS
@given(case=test_properties.policy_and_pod)
def test_a_cached_decision_equals_a_fresh_one_for_generated_pods(
    case: tuple[policies.Policy, dict[str, Any]],
) -> None:
    policy, obj = case
    obj = _with_service_account(obj)
    cache = reviewing.Cache(16)
    review(obj, policy, cache=cache)
    for n in range(2):
        replica = _replica(obj, n)
        _same(review(replica, policy, cache=cache), review(replica, policy))


def test_pods_that_differ_in_what_a_rule_reads_do_not_share_a_decision() -> None:
    policy = SHIPPED.policies["default"]
    cache = reviewing.Cache(16)
    base = pod(shared(), container("log"))
    variants = [
        base,
        pod(shared(), container("log"), tolerations=[]),
        pod(shared(), container("log"), nodeSelector={}),
        pod(shared(), container("log"), affinity={}),
        pod(shared(), container("log", env=[])),
        pod(shared(), container("log"), annotations={"gpu-share.io/profile": "small"}),
        pod(shared(2), container("log")),
        pod(container("log"), shared()),
    ]
    allowed = 0
    for v in variants:
        fresh = review(v, policy)
        _same(review(v, policy, cache=cache), fresh)
        allowed += fresh.allowed
    assert cache.hits == 0
    assert len(cache) == allowed == len(variants) - 1  # two replicas of a shared GPU: refused


def test_a_refusal_is_never_cached_and_names_its_own_volumes() -> None:
    policy = SHIPPED.policies["default"]
    cache = reviewing.Cache(16)
    bad = pod(container(volumeMounts=[{"name": "null-a", "mountPath":
                                       "/var/run/nvidia-container-devices/all"}]),
              volumes=[{"name": "null-a", "emptyDir": {}}])
    assert 'volume "null-a"' in review(bad, policy, cache=cache).message
    other = _replica(bad, 1)
    assert 'volume "null-a-x1z"' in review(other, policy, cache=cache).message
    assert len(cache) == 0


def test_the_cache_is_bounded_and_a_reload_never_finds_the_old_sets_decisions() -> None:
    cache = reviewing.Cache(3)
    policy = SHIPPED.policies["default"]
    for n in range(10):
        review(pod(shared(), container(f"c{n}")), policy, cache=cache)
    assert len(cache) == 3
    reloaded = kube.shipped().policies["default"]
    hits = cache.hits
    review(pod(shared(), container("c9")), reloaded, cache=cache)
    assert cache.hits == hits
    review(pod(shared(), container("c9")), reloaded, cache=cache)
    assert cache.hits == hits + 1
