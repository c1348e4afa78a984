"""The answer cache (codec.Answers): the reviews of a workload's pods, which the API server
sends alike but for their uid and the name of the service account volume, get the answer a
fresh review gives them, byte for byte; no other difference shares an answer; bodies whose
shape cannot be made safely are reviewed in full; it is bounded, keeps no refusal, and a
reload never finds the old set's answers."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import corpus, kube, strategies
from tests.support import server_helpers as h
from tests.support.kube import container, pod, shared
from webhook.policy import policies
from webhook.server import app as server
from webhook.server import codec, states

SHIPPED = kube.shipped()
TOKEN = "kube-api-access-abcde"  # the corpus' service account volume (corpus.pods)
Encode = Callable[[dict[str, Any]], bytes]
# The API server writes compact JSON (Go's encoding/json); anything else may be spaced.
ENCODINGS: dict[str, Encode] = {
    "compact": orjson.dumps,
    "spaced": lambda doc: json.dumps(doc, indent=1).encode(),
}


def replica(obj: dict[str, Any], suffix: str) -> dict[str, Any]:
    """Another pod of the same ReplicaSet as mutating admission sees it: the service account
    volume (and every mount of it) has its own random suffix."""
    text = json.dumps(obj).replace(TOKEN, f"kube-api-access-{suffix}")
    return json.loads(text)  # type: ignore[no-any-return]


def body(obj: dict[str, Any], uid: str, encode: Encode = orjson.dumps, **options: Any) -> bytes:
    return encode(kube.admission_review(obj, uid=uid, **options))


def review(
    data: bytes,
    loaded: policies.PolicySet = SHIPPED,
    *,
    endpoint: codec.Endpoint = "mutate",
    policy_name: str = "default",
    answers: codec.Answers | None = None,
) -> codec.Outcome:
    return codec.review(
        data, policies=loaded, policy_name=policy_name, endpoint=endpoint, answers=answers
    )


def _stored(obj: dict[str, Any], policy_name: str) -> dict[str, Any] | None:
    """`obj` as the mutating webhook of `policy_name` leaves it (None: refused)."""
    decision = kube.review(obj, SHIPPED.policies[policy_name])
    return kube.apply(obj, decision.patch) if decision.allowed else None


def same(answered: codec.Outcome, fresh: codec.Outcome) -> None:
    """The answer and everything the server records of it (log line, metrics) are a fresh
    review's."""
    assert answered.body == fresh.body
    a, f = answered.request, fresh.request
    assert (a.uid, a.namespace, a.name, a.kind, a.operation) == (
        f.uid, f.namespace, f.name, f.kind, f.operation)
    assert answered.summary == fresh.summary == codec.summary(fresh.decision)
    kube.same_decision(answered.decision, fresh.decision)


@pytest.mark.slow  # every pod of the corpus, in eight ways
@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
@pytest.mark.parametrize("policy_name", ["default", "not-renamed"])
def test_every_replica_of_the_corpus_gets_a_fresh_reviews_answer(
    encoding: str, endpoint: codec.Endpoint, policy_name: str
) -> None:
    encode = ENCODINGS[encoding]
    answers = codec.Answers(10_000)
    kept = cacheable = 0
    for n, sent in enumerate(corpus.pods()):
        # The validating webhook is sent what the mutating one stored.
        obj = _stored(sent, policy_name) if endpoint == "validate" else sent
        if obj is None:
            continue
        first = body(obj, f"uid-{n}-a", encode)
        fresh = review(first, endpoint=endpoint, policy_name=policy_name)
        same(review(first, endpoint=endpoint, policy_name=policy_name, answers=answers), fresh)
        cacheable += fresh.decision.allowed and not fresh.decision.would_refuse
        before = answers.hits
        for suffix in ("x9z2q", "abcde"):
            other = body(replica(obj, suffix), f"uid-{n}-{suffix}", encode)
            same(review(other, endpoint=endpoint, policy_name=policy_name, answers=answers),
                 review(other, endpoint=endpoint, policy_name=policy_name))
        kept += answers.hits == before + 2
    # One cache over the whole corpus: no pod was given another's answer (above), and both
    # replicas of every pod whose answer may be kept (allowed, no rule relaxed; none of the
    # corpus' answers names its token) were answered from it.
    assert kept == cacheable > 0


@pytest.mark.slow  # 150 hypothesis examples (strategies.PROPERTY_SETTINGS)
@strategies.PROPERTY_SETTINGS
@given(case=strategies.policy_and_pod, endpoint=st.sampled_from(["mutate", "validate"]),
       encoding=st.sampled_from(sorted(ENCODINGS)))
def test_a_kept_answer_equals_a_fresh_one_for_generated_pods(
    case: tuple[policies.Policy, dict[str, Any]], endpoint: codec.Endpoint, encoding: str
) -> None:
    policy, obj = case
    loaded = policies.PolicySet({policy.name: policy})
    obj = corpus.with_service_account(obj)
    answers = codec.Answers(16)
    encode = ENCODINGS[encoding]
    review(body(obj, "u-0", encode), loaded, endpoint=endpoint, policy_name=policy.name,
           answers=answers)
    for n, suffix in enumerate(("bcdfg", "abcde")):
        other = body(replica(obj, suffix), f"u-{n + 1}", encode)
        same(review(other, loaded, endpoint=endpoint, policy_name=policy.name, answers=answers),
             review(other, loaded, endpoint=endpoint, policy_name=policy.name))


def sa_pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A pod as mutating admission sees a ReplicaSet's: no name yet, the token volume."""
    obj = corpus.with_service_account(pod(*containers, **spec))
    obj["metadata"] = {"generateName": "triton-7d9f8c-", "namespace": "team-a"}
    return kube.as_served(obj)


def test_the_shape_leaves_out_the_uid_and_the_token_and_nothing_else() -> None:
    obj = sa_pod(shared(), container("log"))
    base = codec.shape(body(obj, "705ab4f5-6393-11e8-b7cc-42010a800002"))
    assert base is not None
    assert base.uid == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert codec.shape(body(replica(obj, "q2w9z"), "u-2")) == (base.key, "u-2")
    different = [
        sa_pod(shared(), container("logs")),
        sa_pod(shared(2), container("log")),
        sa_pod(shared(), container("log"), runtimeClassName="nvidia"),
    ]
    renamed_pod = copy.deepcopy(obj)
    renamed_pod["metadata"]["generateName"] = "triton-7d9f8d-"
    different.append(renamed_pod)
    keys = {base.key}
    for other in different:
        found = codec.shape(body(other, "u-3"))
        assert found is not None
        keys.add(found.key)
    assert len(keys) == len(different) + 1
    # The operation and the endpoint's policy are the review's too.
    update = codec.shape(body(obj, "u-4", operation="UPDATE", old=obj))
    assert update is not None
    assert update.key != base.key


def test_two_tokens_are_told_apart_by_where_they_stand() -> None:
    """Volume a is a device hostPath, b an emptyDir; one pod mounts a, the other b, at the
    same path. Renaming the tokens in the order they appear keeps the two apart."""
    def two(mounted: str) -> bytes:
        obj = sa_pod(
            shared(volumeMounts=[{"name": f"kube-api-access-{mounted}", "mountPath": "/data"}]),
            volumes=[{"name": "kube-api-access-aaaaa", "hostPath": {"path": "/dev"}},
                     {"name": "kube-api-access-bbbbb", "emptyDir": {}}])
        return body(obj, f"u-{mounted}")

    a, b = codec.shape(two("aaaaa")), codec.shape(two("bbbbb"))
    assert a is not None
    assert b is not None
    assert a.key != b.key


@pytest.mark.parametrize(
    "where",
    ["env-value", "annotation", "label", "container-name-and-argument", "target-container",
     "escaped", "short-suffix", "uid-not-simple", "uid-holding-a-token"],
)
def test_a_body_whose_shape_could_hide_a_difference_has_none(where: str) -> None:
    obj = sa_pod(shared(), container("log"))
    uid = "u-1"
    if where == "env-value":
        obj["spec"]["containers"][0]["env"] = [{"name": "X", "value": TOKEN}]
    elif where == "annotation":
        obj["metadata"]["annotations"] = {"note": TOKEN}
    elif where == "label":
        obj["metadata"]["labels"] = {"app": TOKEN}
    elif where == "container-name-and-argument":
        # A name, but also a value elsewhere: the count tells.
        obj["spec"]["containers"][1]["name"] = TOKEN
        obj["spec"]["containers"][1]["args"] = [TOKEN]
    elif where == "target-container":
        obj["spec"]["ephemeralContainers"] = [
            {"name": "debug", "image": "busybox", "targetContainerName": TOKEN}]
    elif where == "escaped":
        # As Go writes "<" in a string; a \u escape could as well spell a token.
        obj["metadata"]["annotations"] = {"note": "<b>"}
        data = body(obj, uid).replace(b"<b>", b"\\u003cb>")
        assert codec.shape(data) is None
        return
    elif where == "short-suffix":
        obj = json.loads(json.dumps(obj).replace(TOKEN, "kube-api-access-abcd"))
    elif where == "uid-not-simple":
        uid = "u 1"
    elif where == "uid-holding-a-token":
        uid = "kube-api-access-x9z2q"
    assert codec.shape(body(obj, uid)) is None


def test_a_refusal_a_warning_naming_a_token_and_other_operations_are_never_kept() -> None:
    answers = codec.Answers(16)
    refused = sa_pod(shared(2))
    assert not review(body(refused, "u-1"), answers=answers).decision.allowed
    # Its container is named like the token: the warning of an envFrom names it.
    named = sa_pod(shared(envFrom=[{"configMapRef": {"name": "c"}}]))
    named["spec"]["containers"][0]["name"] = "kube-api-access-zzzzz"
    outcome = review(body(named, "u-2"), answers=answers)
    assert outcome.decision.allowed
    assert "kube-api-access-zzzzz" in outcome.body.decode()
    # An update of a pod is answered as it is, never kept.
    review(body(sa_pod(shared()), "u-3", operation="UPDATE", old=sa_pod(shared())),
           answers=answers)
    # A policy not in force: the stand-in refuses GPU pods; a CPU pod passes, not kept.
    review(body(sa_pod(container()), "u-4"), policy_name="nope", answers=answers)
    assert len(answers) == 0
    assert answers.bytes == 0
    kept = sa_pod(shared())
    review(body(kept, "u-5"), answers=answers)
    assert len(answers) == 1


def test_it_is_bounded_in_entries_and_bytes_and_a_reload_never_finds_the_old_answers() -> None:
    answers = codec.Answers(3)
    for n in range(10):
        review(body(sa_pod(shared(), container(f"c{n}")), f"u-{n}"), answers=answers)
    assert len(answers) == 3
    small = codec.Answers(1000, max_bytes=20_000)
    for n in range(20):
        review(body(sa_pod(shared(), container(f"c{n}")), f"u-{n}"), answers=small)
        assert small.bytes <= 20_000
    assert 1 < len(small) < 20
    last = body(sa_pod(shared(), container("c19")), "u-new")
    hits = small.hits
    review(last, answers=small)
    assert small.hits == hits + 1
    reloaded = kube.shipped()
    review(last, reloaded, answers=small)
    assert small.hits == hits + 1
    same(review(last, reloaded, answers=small), review(last, reloaded))
    assert small.hits == hits + 2


def test_a_changed_policy_under_the_same_name_is_never_answered_from_the_old_one() -> None:
    answers = codec.Answers(16)
    data = body(sa_pod(shared()), "u-1")
    before = policies.PolicySet({"default": kube.make_policy([kube.T4_MPS], name="default")})
    review(data, before, answers=answers)
    assert len(answers) == 1
    changed = kube.make_policy([kube.T4_MPS], name="default", runtimeClassName="nvidia-cdi")
    after = policies.PolicySet({"default": changed})
    answered = review(data, after, answers=answers)
    same(answered, review(data, after))
    assert answers.hits == 0
    assert b"nvidia-cdi" in orjson.dumps(answered.decision.patch)


def test_a_large_body_is_reviewed_in_full_every_time() -> None:
    answers = codec.Answers(16)
    obj = sa_pod(shared())
    obj["metadata"]["annotations"] = {"note": "x" * codec.ANSWERS_MAX_BODY_BYTES}
    review(body(obj, "u-1"), answers=answers)
    review(body(obj, "u-2"), answers=answers)
    assert answers.hits == 0
    assert len(answers) == 0


def test_an_answer_is_kept_only_when_the_first_uid_of_the_body_is_the_requests() -> None:
    """Any JSON key order is valid: with the object first, the first "uid" of the body is
    the pod's own, and the shape's uid is not the one to answer with."""
    answers = codec.Answers(16)
    obj = sa_pod(shared())
    for n in range(3):
        obj["metadata"]["uid"] = "same-pod-uid"
        doc = kube.admission_review(obj, uid=f"request-{n}")
        request = doc["request"]
        doc["request"] = {"object": request.pop("object"), **request}
        data = orjson.dumps(doc)
        assert data.index(b"same-pod-uid") < data.index(f"request-{n}".encode())
        outcome = review(data, answers=answers)
        assert json.loads(outcome.body)["response"]["uid"] == f"request-{n}"
    assert len(answers) == 0
    assert answers.hits == 0


@pytest.mark.slow  # waits for a policy reload
async def test_the_server_answers_a_deployments_pods_from_the_cache_and_a_reload_takes_effect(
    tmp_path: Path, aiohttp_server: Any, aiohttp_client: Any
) -> None:
    """Over TLS, as the API server calls it: every replica's answer passes the API server's
    checks and patches its pod into a valid one; all but the first come from the cache; a
    changed policy file is in force for the next replica."""
    policies_dir, files = h.mounted_policies(tmp_path)
    app = server.create_app(h.settings(tmp_path, policies_dir=policies_dir))
    client = await h.start(aiohttp_server, aiohttp_client, app)
    template = sa_pod(shared(), container("log"))

    async def runtime_class(n: int) -> str:
        obj = replica(template, f"r{n:04d}")
        uid = f"uid-replica-{n}"
        response = await h.post_review(client, "/mutate", h.review_body(obj, uid))
        result = h.response_of(await response.json(), uid)
        assert result["allowed"], result
        return str(h.patched(obj, result)["spec"]["runtimeClassName"])

    assert [await runtime_class(n) for n in range(4)] == ["nvidia"] * 4
    state = app[states.STATE]
    assert state.answers.hits == 3
    probes = await aiohttp_client(server.create_probe_app(app))
    text = await (await probes.get("/metrics")).text()
    assert h.metric(text, "gpu_share_webhook_decision_cache_hits") == 3

    changed = dict(files)
    changed["default.yaml"] = files["default.yaml"].replace(
        b"runtimeClassName: nvidia", b"runtimeClassName: nvidia-cdi")
    h.mount_like_kubelet(policies_dir, "v2", changed)
    n = 4

    async def applied() -> bool:
        nonlocal n
        n += 1
        return await runtime_class(n) == "nvidia-cdi"

    await h.eventually(applied, what="the changed policy in force")
    hits = state.answers.hits
    assert await runtime_class(n + 1) == "nvidia-cdi"
    assert state.answers.hits == hits + 1
