"""Rule object-too-large: an object of more than `view.MAX_ITEMS` pod templates, containers or
required node selector terms is refused before any other rule reads it, in every mode and
under every policy, as the pod and as its workloads, whatever endpoint or command reviews it.
Each of those costs a review its own work and patch operations: without the bound, a 7 MiB
body of 86,000 containers held hundreds of MiB for seconds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.engine.rule_cases import lab
from tests.support.kube import (
    admission_review,
    apply,
    container,
    pod,
    review,
    shared,
    workload,
)
from webhook.engine import view
from webhook.errors import BadReview
from webhook.policy import kinds, names, policies
from webhook.server import codec

MOST = view.MAX_ITEMS
JOBSETS = kinds.kinds_by_name(kinds.all_kinds())
TERM = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}


def containers(n: int, **extra: Any) -> list[dict[str, Any]]:
    return [shared(name=f"c{i}", **extra) for i in range(n)]


def with_terms(n: int) -> dict[str, Any]:
    return pod(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [TERM] * n}
            }
        }
    )


def jobset(*templates: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {
            "replicatedJobs": [
                {"name": f"j{i}", "template": {"spec": {"template": {"spec": {"containers": c}}}}}
                for i, c in enumerate(templates)
            ]
        },
    }


def admitted(obj: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """As `kube.admit` does, less the schema check (seconds on objects this size; the same
    patches on small pods are checked in every other test): the rules that patched, and the
    result, which a second pass and the validating review take as it is."""
    decision = review(obj, lab())
    assert decision.allowed, decision.message
    result = apply(obj, decision.patch)
    again = review(result, lab())
    assert (again.allowed, again.patch) == (True, [])
    assert review(result, lab(), mutate=False, require=True).allowed
    return decision.mutations, result


def test_a_pod_at_the_bound_is_reviewed_as_any_other() -> None:
    # Half of them init containers: every list counts.
    p = pod(*containers(MOST // 2), init=containers(MOST // 2, restartPolicy="Always"))
    mutations, _ = admitted(p)
    assert "mps-limits" in mutations
    # Each term is pinned once per group of classes it can match: lab's two (an MPS and a
    # time-slicing class) make the bound's terms of half as many, and the result passes again.
    mutations, result = admitted(with_terms(MOST // 2))
    assert "node-selection" in mutations
    assert len(result["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]) == MOST


def test_terms_that_pinning_would_take_past_the_bound_are_refused_at_mutation() -> None:
    for mode in names.MODES:
        decision = review(with_terms(MOST // 2 + 1), lab(mode=mode))
        assert decision.rules == ["object-too-large"], mode
        assert decision.patch == []
        assert decision.message == (
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            f".nodeSelectorTerms: {MOST // 2 + 1:,} required node selector terms, which pinning"
            f" to the classes left would make {MOST + 2:,} (each term once per group of classes"
            f" it can match); gpu-share-webhook reviews at most {MOST:,} in one object, a bound"
            " on the time and memory of a review that no workload comes near. Write the"
            " selection in fewer terms (rule object-too-large)"
        )


# RULE_CASES (tests/engine/rule_cases.py) hold its words, as a pod's and its workloads'.
@pytest.mark.parametrize("obj", [pod(*containers(MOST + 1)), with_terms(MOST + 1)],
                         ids=["containers", "terms"])
def test_past_the_bound_it_is_the_one_refusal_in_every_mode_and_under_every_policy(
    obj: dict[str, Any],
) -> None:
    # Its containers are privileged too: no other rule runs, nothing is patched.
    for c in obj["spec"]["containers"]:
        c["securityContext"] = {"privileged": True}
    for mode in names.MODES:
        decision = review(obj, lab(mode=mode))
        assert (decision.rules, decision.patch) == (["object-too-large"], []), mode
    # Where the namespace's policy is not in force, too.
    stand_in = policies.stand_in("gone", names.POLICY_NOT_LOADED_RULE, "it does not load")
    assert review(obj, stand_in).rules == ["object-too-large"]


def test_a_policy_cannot_relax_it() -> None:
    text = json.dumps(
        {
            "apiVersion": policies.API_VERSION,
            "kind": policies.KIND,
            "metadata": {"name": "x"},
            "spec": {"ruleModes": {"object-too-large": "warn"}},
        }
    )
    _, problems = policies.parse_documents(text, "x.yaml")
    assert any("ruleModes.object-too-large: always enforced" in p for p in problems), problems


def test_the_counts_are_across_the_objects_pod_templates() -> None:
    half = MOST // 2
    at_bound = jobset(containers(half), containers(MOST - half))
    assert review(at_bound, lab(), mutate=False, kinds=JOBSETS).allowed
    past = jobset(containers(half), containers(MOST - half + 1))
    decision = review(past, lab(), mutate=False, kinds=JOBSETS)
    assert decision.rules == ["object-too-large"]
    assert decision.message.startswith(
        f"(object): {MOST + 1:,} containers (init, regular and ephemeral together) in its 2 pod"
        " templates; "
    )


def test_the_walk_to_the_templates_stops_past_the_bound() -> None:
    many = jobset(*([container("c")] for _ in range(5 * MOST)))
    found, _ = view.templates(many, JOBSETS)
    assert len(found) == MOST + 1
    decision = review(many, lab(), mutate=False, kinds=JOBSETS)
    assert decision.message.startswith(f"(object): more than {MOST:,} pod templates; ")


def _gpu_containers(n: int) -> bytes:
    one = '{"name":"c%d","image":"i","resources":{"limits":{"nvidia.com/gpu.shared":"1"}}}'
    many = ",".join(one % i for i in range(n))
    review_doc = admission_review(pod())
    body = json.dumps(review_doc, separators=(",", ":")).encode()
    return body.replace(
        json.dumps(review_doc["request"]["object"]["spec"]["containers"],
                   separators=(",", ":")).encode(),
        f"[{many}]".encode())


def test_a_pod_of_86000_containers_in_seven_mib_is_refused_before_it_is_decoded() -> None:
    # Under the body cap, every container a GPU one (unbounded: 8.5 s and 300 MiB). Its JSON
    # values are past what a review reads.
    body = _gpu_containers(86_000)
    assert 6 << 20 < len(body) < 7 << 20
    with pytest.raises(BadReview) as caught:
        _answer(body)
    assert str(caught.value).startswith("the body holds 946,")


def test_a_pod_of_as_many_containers_as_a_review_reads_is_refused_by_the_rule() -> None:
    body = _gpu_containers(codec.MAX_VALUES // 11 - 10)
    response = _answer(body)
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("spec.containers: 45,")
    assert "patch" not in response


def _with_filler(obj: dict[str, Any], items: int, **request: Any) -> tuple[bytes, int]:
    """The review of `obj` with `items` small objects in its field `x-unread` (no rule reads
    it), three JSON values each; and the JSON values of the object."""
    filler = b"[" + b",".join(b'{"k%d":1}' % i for i in range(items)) + b"]"
    filled = json.dumps(obj | {"x-unread": "FILL"}).encode().replace(b'"FILL"', filler)
    review_doc = admission_review(obj | {"x-unread": "FILL"}, **request)
    values = view.json_values(filled, 0) or 0
    return json.dumps(review_doc).encode().replace(b'"FILL"', filler), values


GENERIC = view.MAX_GENERIC_VALUES


def _answer(body: bytes, endpoint: codec.Endpoint = "mutate") -> dict[str, Any]:
    loaded = policies.build_set([lab()])
    outcome = codec.review(body, policies=loaded, policy_name="lab", endpoint=endpoint,
                           kinds=JOBSETS)
    response: dict[str, Any] = json.loads(outcome.body)["response"]
    return response


def test_an_object_read_generically_is_read_only_up_to_its_bound() -> None:
    # A field of another type sends the pod to the generic reading; a kind of another
    # project always goes there. Past the bound, neither is decoded.
    malformed = pod(shared())
    malformed["metadata"]["annotations"] = {"a": 1}
    custom = jobset([shared()])
    for obj, endpoint in ((malformed, "mutate"), (custom, "validate")):
        body, _ = _with_filler(obj, GENERIC // 3 - 100)
        assert "object-too-large" not in str(_answer(body, endpoint))
        body, values = _with_filler(obj, GENERIC // 3 + 100)
        assert values > GENERIC
        past = _answer(body, endpoint)
        assert past["allowed"] is False
        assert past["status"]["message"] == (
            f"(object): {values:,} JSON values (objects, lists, their members and items) in an"
            " object read without the webhook's typed view (a kind of another project, a claim,"
            " or an object with a field of another type than Kubernetes gives it);"
            f" gpu-share-webhook reviews at most {GENERIC:,} in one object, a bound on the time"
            " and memory of a review that no workload comes near. Fix the field, or make the"
            " object smaller (rule object-too-large)")
    # The typed view skips what no rule reads, however much it is: a Pod's, and a built-in
    # workload's (its own metadata is read typed too, for a misplaced profile).
    body, _ = _with_filler(pod(shared()), codec.MAX_VALUES // 3 - 100)
    assert _answer(body)["allowed"] is True
    deployment = workload("Deployment", pod(shared()))
    deployment["metadata"]["annotations"] = {"gpu-share.io/profile": "small"}
    body, _ = _with_filler(deployment, codec.MAX_VALUES // 3 - 100)
    response = _answer(body, "validate")
    assert response["allowed"] is True
    assert response["warnings"] == [
        "move it to the pod template's annotations. gpu-share.io/profile in the Deployment's"
        " metadata is ignored"]


def test_what_strings_hold_is_not_counted() -> None:
    # A variable holding a long comma-separated list is one value (a first count over the
    # bytes, which also counts what strings hold, is checked again without them).
    csv = ",".join(f"host{i}:{i}" for i in range(GENERIC))
    custom = jobset([shared(env=[{"name": "HOSTS", "value": csv}])])
    assert view.json_values(json.dumps(custom).encode(), GENERIC) is None
    body = json.dumps(admission_review(custom)).encode()
    assert "object-too-large" not in str(_answer(body, "validate"))
    update = admission_review(pod(shared(env=[{"name": "HOSTS", "value": csv}])),
                              operation="UPDATE", old=pod(shared(env=[{"name": "HOSTS",
                                                                         "value": csv}])))
    assert _answer(json.dumps(update).encode())["allowed"] is True


def test_a_body_read_generically_is_read_only_up_to_its_bound() -> None:
    body, _ = _with_filler(pod(shared()), GENERIC // 3 + 100)
    body = body.replace(b'"uid": "', b'"uid": 7, "x-uid": "', 1)
    with pytest.raises(BadReview) as caught:
        _answer(body)
    assert str(caught.value).startswith("body is not an AdmissionReview as the API server sends"
                                        " it, and of 250,")


def test_the_entries_of_the_lists_and_maps_the_rules_read_are_bounded_across_the_object() -> None:
    # The pod's one container counts, and its limits' one entry: so its env fills the rest.
    def with_env(n: int) -> dict[str, Any]:
        return pod(shared(env=[{"name": f"V{i}", "value": "x"} for i in range(n)]))

    most = view.MAX_ENTRIES
    assert review(with_env(most - 2), lab()).allowed
    decision = review(with_env(most - 1), lab())
    assert decision.rules == ["object-too-large"]
    assert decision.message == (
        f"(object): {most + 1:,} entries in the lists and maps the webhook reads (containers"
        " and their env, mounts, resources and capabilities, volumes, claims, tolerations,"
        " node selection, annotations, labels); gpu-share-webhook reviews at most"
        f" {most:,} in one object, a bound on the time and memory of a review that no"
        " workload comes near. Make the object smaller (rule object-too-large)")
    # Any of them: a nodeSelector of many labels took two reviews to 376 MiB.
    many = pod(nodeSelector={f"k{i}": "v" for i in range(most)})
    assert review(many, lab()).rules == ["object-too-large"]


LONG = "a" * (view.MAX_NAME + 1) + "\U0001f600"  # stored 4 bytes a character
VIOLATING = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": f"all{i}"} for i in range(25)]


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        pytest.param(pod(shared(name=LONG, env=VIOLATING)), "spec.containers[0].name",
                     id="container"),
        pytest.param(pod(shared(env=[{"name": LONG, "value": "x"}, *VIOLATING])),
                     "spec.containers[0].env[0].name", id="env"),
        pytest.param(pod(container(limits={"nvidia.com/gpu.shared": 1, LONG: 1}, env=VIOLATING)),
                     f"spec.containers[0].resources.limits.{LONG[:60]}...", id="limits-key"),
        pytest.param(pod(shared(env=VIOLATING), annotations={LONG: "x"}),
                     f"metadata.annotations.{LONG[:60]}...", id="annotation-key"),
        pytest.param(pod(shared(env=VIOLATING), nodeSelector={"zone": LONG}),
                     "spec.nodeSelector.zone", id="node-selector-value"),
        pytest.param(pod(shared(env=VIOLATING), runtimeClassName=LONG),
                     "spec.runtimeClassName", id="runtime-class"),
        pytest.param(
            pod(shared(env=VIOLATING), affinity={"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": "zone", "operator": "In", "values": [LONG]}]}]}}}),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].values[0]", id="term-value"),
    ],
)
def test_a_name_or_key_longer_than_kubernetes_takes_is_a_problem_no_message_repeats(
    obj: dict[str, Any], field: str
) -> None:
    # Every refusal of a container named its name: 25 of them made a 1 MB name a 40 MB answer.
    for endpoint in ("mutate", "validate"):
        response = _answer(json.dumps(admission_review(obj)).encode(), endpoint)
        message = response["status"]["message"]
        assert f"(1) {field}: must be a name of at most {view.MAX_NAME:,} characters, not one" \
               f" of {len(LONG):,}: no Kubernetes object has this shape" in message
        assert message.count(LONG[:view.MAX_NAME]) == 0
        assert len(message) < 10_000


def test_the_longest_qualified_name_is_a_name() -> None:
    key = "a" * 253 + "/" + "b" * 63
    assert len(key) == view.MAX_NAME
    decision = review(pod(shared(), annotations={key: "x"}), lab())
    assert decision.allowed, decision.message


# Values the rules split or clean: bounded before they are, or never split whole.
def test_a_path_longer_than_linux_takes_is_a_problem() -> None:
    path = "/ab" * 2000
    for obj, field in (
        (pod(shared(), volumes=[{"name": "v", "hostPath": {"path": path}}]),
         "spec.volumes[0].hostPath.path"),
        (pod(shared(volumeMounts=[{"name": "v", "mountPath": path}])),
         "spec.containers[0].volumeMounts[0].mountPath"),
    ):
        message = review(obj, lab()).message
        assert (
            f"{field}: must be a path of at most {view.MAX_PATH:,} characters, not one of"
            f" {len(path):,}" in message), message


def test_driver_capabilities_are_split_only_where_short_and_said_in_part() -> None:
    def with_capabilities(value: str) -> str:
        obj = pod(shared(env=[{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": value}]))
        return review(obj, lab(driverCapabilities=["compute", "utility"])).message

    assert "is longer than any list of what the toolkit knows" in with_capabilities(
        ",".join(f"c{i}" for i in range(1000)))
    message = with_capabilities(",".join(f"c{i}" for i in range(100)))
    assert "gives c0, c1, c10, c11, c12, c13, c14, c15 and 92 more; policy" in message


def test_a_mutations_annotation_not_the_webhooks_is_not_split() -> None:
    recorded = ",".join(f"step{i}" for i in range(100_000))
    decision = review(pod(shared(), annotations={"gpu-share.io/mutations": recorded}), lab())
    (op,) = [o for o in decision.patch if o["path"].endswith("gpu-share.io~1mutations")]
    assert op["value"] == ",".join(sorted(decision.mutations))
