"""The decision cache (reviewing.Cache), keyed by the pod's view: a cached decision equals a
fresh one, for every pod of the corpus and for generated ones; pods with one view (the
pods of one workload, but for their names) share one; pods whose views differ (the service
account volume's own name in each replica included) do not; it is bounded, keeps no
refusal, and a policy reload never finds the old set's decisions."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given

from tests import corpus, kube, strategies
from tests.kube import container, pod, review, shared
from webhook import policies
from webhook.core import pods, reviewing

SHIPPED = kube.shipped()


def _twin(obj: dict[str, Any], n: int) -> dict[str, Any]:
    """Another pod of the same workload, as its view sees it: its own name and uid."""
    other = copy.deepcopy(obj)
    meta = other.setdefault("metadata", {})
    if isinstance(meta, dict):
        meta["name"] = f"{meta.get('name', 'p')}-{n}"
        meta["uid"] = f"uid-{n}"
    return other


def _replica(obj: dict[str, Any], n: int) -> dict[str, Any]:
    """Another pod of the same workload as the API server sends it: also its own name for
    every volume that is not a hostPath (the service account volume `kube-api-access-...`)."""
    other = _twin(obj, n)
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


CORPUS = corpus.pods()


@pytest.mark.parametrize("policy_name", ["default", "not-renamed"])
def test_a_cached_decision_equals_a_fresh_one_for_every_pod_of_the_corpus(
    policy_name: str,
) -> None:
    policy = SHIPPED.policies[policy_name]
    cache = reviewing.Cache(10_000)
    cacheable = 0
    for n, obj in enumerate(CORPUS):
        for mutate, require in ((True, False), (False, True)):
            first = review(obj, policy, mutate=mutate, require=require, cache=cache)
            fresh = review(obj, policy, mutate=mutate, require=require)
            kube.same_decision(first, fresh)
            cacheable += fresh.allowed and not fresh.would_refuse
            hits = cache.hits
            twin = _twin(obj, 7)
            kube.same_decision(review(twin, policy, mutate=mutate, require=require, cache=cache),
                  review(twin, policy, mutate=mutate, require=require))
            # A twin of a pod with a cacheable decision is answered from the cache.
            assert cache.hits == hits + (fresh.allowed and not fresh.would_refuse)
            hits = cache.hits
            replica = _replica(obj, n)
            kube.same_decision(review(replica, policy, mutate=mutate, require=require, cache=cache),
                  review(replica, policy, mutate=mutate, require=require))
            # A replica's service account volume has a name of its own: another view.
            assert cache.hits == hits
    assert cacheable > 10


@pytest.mark.slow  # 150 hypothesis examples (strategies.PROPERTY_SETTINGS)
@strategies.PROPERTY_SETTINGS
@given(case=strategies.policy_and_pod)
def test_a_cached_decision_equals_a_fresh_one_for_generated_pods(
    case: tuple[policies.Policy, dict[str, Any]],
) -> None:
    policy, obj = case
    obj = corpus.with_service_account(obj)
    cache = reviewing.Cache(16)
    review(obj, policy, cache=cache)
    for n in range(2):
        for other in (_twin(obj, n), _replica(obj, n)):
            kube.same_decision(review(other, policy, cache=cache), review(other, policy))


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
        kube.same_decision(review(v, policy, cache=cache), fresh)
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
