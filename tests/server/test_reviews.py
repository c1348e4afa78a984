"""The AdmissionReview v1 codec: what the API server sends, what it gets back."""

from __future__ import annotations

import base64
import json
from typing import Any

import orjson
import pytest

from tests.support.kube import (
    WORKLOAD_KINDS,
    admission_review,
    apply,
    check_valid,
    container,
    pod,
    shared,
    workload,
)
from webhook.engine import view
from webhook.errors import BadReview
from webhook.policy import names, policies
from webhook.server import codec


def answer(body: dict[str, Any] | bytes, loaded: policies.PolicySet, *, policy: str = "default",
           endpoint: codec.Endpoint = "mutate") -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    outcome = codec.review(raw, policies=loaded, policy_name=policy, endpoint=endpoint)
    doc: dict[str, Any] = json.loads(outcome.body)
    return doc


def test_the_response_echoes_uid_apiversion_and_kind(shipped_policies: policies.PolicySet) -> None:
    doc = answer(admission_review(pod(), uid="abc-123"), shipped_policies)
    assert doc["apiVersion"] == "admission.k8s.io/v1"
    assert doc["kind"] == "AdmissionReview"
    assert doc["response"]["uid"] == "abc-123"


def test_the_patch_is_returned_to_kubernetes_and_applies_to_the_object_as_sent(
    shipped_policies: policies.PolicySet,
) -> None:
    review = admission_review(pod(shared(), container("log")))
    response = answer(review, shipped_policies)["response"]
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    result = apply(review["request"]["object"], patch)
    check_valid(result)
    assert result["spec"]["runtimeClassName"] == "nvidia"
    assert response["auditAnnotations"] == {
        "policy": "default", "profile": "medium", "classes": "t4-mps,a10g-time-slicing",
        "mutations": "runtime-class,tolerations,node-selection,mps-limits,driver-capabilities,"
        "visible-devices",
    }
    assert "warnings" not in response
    assert "status" not in response


def test_a_large_patch_is_answered_in_the_same_bytes_and_applies(
    shipped_policies: policies.PolicySet,
) -> None:
    # Past 64 KiB of patch another encoder writes the envelope (it trims its buffer): the
    # answer must be the bytes the usual one writes.
    review = admission_review(pod(*(shared(name=f"c{i}") for i in range(400))))
    outcome = codec.review(json.dumps(review).encode(), policies=shipped_policies,
                           policy_name="default", endpoint="mutate")
    patch_bytes = base64.b64decode(json.loads(outcome.body)["response"]["patch"])
    assert len(patch_bytes) > 64 * 1024
    assert outcome.body == orjson.dumps(orjson.loads(outcome.body))
    result = apply(review["request"]["object"], json.loads(patch_bytes))
    assert all(c["env"] for c in result["spec"]["containers"])


def test_an_allowed_review_without_changes_carries_neither_patch_nor_patch_type(
    shipped_policies: policies.PolicySet,
) -> None:
    hidden = container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}])
    response = answer(admission_review(pod(hidden)), shipped_policies)["response"]
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


def test_a_denial_has_status_code_and_message_and_no_patch(
    shipped_policies: policies.PolicySet,
) -> None:
    response = answer(admission_review(pod(shared(2))), shipped_policies)["response"]
    assert response["allowed"] is False
    assert "patch" not in response
    assert "patchType" not in response
    assert response["status"]["code"] == 403
    assert response["status"]["reason"] == "Forbidden"
    assert response["status"]["message"].startswith(
        'container "main": invalid multi-replica request: nvidia.com/gpu.shared: 2.')


def test_warnings_are_short_and_plain(shipped_policies: policies.PolicySet) -> None:
    p = pod(shared(envFrom=[{"configMapRef": {"name": "settings"}}]))
    response = answer(admission_review(p), shipped_policies)["response"]
    assert response["warnings"] == [
        'container "main" uses envFrom: NVIDIA_* or CUDA_MPS_* set there are not checked']
    assert response["auditAnnotations"]["env-from"] == "main"


@pytest.mark.parametrize("name", ["gold", names.UNKNOWN_POLICY_PATH])
def test_an_unknown_policy_is_a_denial_that_says_so(
    shipped_policies: policies.PolicySet, name: str
) -> None:
    response = answer(admission_review(pod()), shipped_policies, policy=name)["response"]
    assert response["status"]["message"].endswith("(rule unknown-policy)")
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "does not exist (policies: default, dra, not-renamed)" in message
    assert ("gpu-share.io/policy" in message)


def test_the_named_policy_governs(shipped_policies: policies.PolicySet) -> None:
    p = pod(container(limits={"nvidia.com/gpu": 1}))
    default = answer(admission_review(p), shipped_policies)["response"]
    # An exclusive GPU under the renamed policy: only the driver capabilities are added.
    assert default["auditAnnotations"]["mutations"] == "driver-capabilities"
    plain = answer(admission_review(p), shipped_policies, policy="not-renamed")["response"]
    assert plain["auditAnnotations"]["policy"] == "not-renamed"


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
def test_the_validating_endpoint_refuses_a_workload_whose_pods_would_be_refused(
    shipped_policies: policies.PolicySet, kind: str
) -> None:
    bad = workload(kind, pod(shared(2)))
    response = answer(admission_review(bad), shipped_policies, endpoint="validate")["response"]
    assert response["allowed"] is False
    assert "invalid multi-replica request" in response["status"]["message"]
    good = workload(kind, pod(shared(1)))
    response = answer(admission_review(good), shipped_policies, endpoint="validate")["response"]
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


def test_the_mutating_endpoint_leaves_workloads_alone(shipped_policies: policies.PolicySet) -> None:
    response = answer(admission_review(workload("Deployment", pod(shared(2)))),
                      shipped_policies)["response"]
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


def test_the_validating_endpoint_checks_pods_without_patching_them(
    shipped_policies: policies.PolicySet,
) -> None:
    mutated = answer(admission_review(pod(shared(), container("log"))), shipped_policies)
    patch = json.loads(base64.b64decode(mutated["response"]["patch"]))
    stored = apply(pod(shared(), container("log")), patch)
    ok = answer(admission_review(stored), shipped_policies, endpoint="validate")["response"]
    assert ok == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    bad = answer(admission_review(pod(shared(securityContext={"privileged": True}))),
                 shipped_policies, endpoint="validate")["response"]
    assert bad["allowed"] is False


def test_the_validating_endpoint_refuses_a_pod_the_mutating_webhook_did_not_guard(
    shipped_policies: policies.PolicySet,
) -> None:
    # As if the mutating webhook had been skipped, or a later webhook had undone its work:
    # a container that asks for no GPU could see them all, and MPS would run without limits.
    response = answer(admission_review(pod(shared(), container("log"))), shipped_policies,
                      endpoint="validate")["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        "4 problems: (1) node selection: the pod asks for nvidia.com/gpu.shared, and its"
        " required node selection (spec.nodeSelector) does not keep it on the node classes of"
        ' policy "default" (t4-mps [nvidia.com/gpu.sharing-strategy=mps,'
        " nvidia.com/gpu.product=Tesla-T4, nvidia.com/gpu.replicas=4]; a10g-time-slicing"
        " [nvidia.com/gpu.sharing-strategy=time-slicing, nvidia.com/gpu.product=NVIDIA-A10G,"
        " nvidia.com/gpu.replicas=4]), where the mutating webhook pins it: it did not run, or a"
        " later change removed or widened the pin. Create the pod again, or require those"
        ' labels (rule node-selection); (2) container "main": missing'
        " CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=3840M (the"
        ' MPS limits of profile "medium"), which the mutating webhook adds: it did not run, or'
        " a later change took it away. Create the pod again, or set it as shown (rule"
        ' mps-limits); (3) container "main": missing NVIDIA_DRIVER_CAPABILITIES=compute,utility'
        ' (the driver capabilities policy "default" allows), which the mutating webhook adds:'
        " it did not run, or a later change took it away. Create the pod again, or set it as"
        ' shown (rule driver-capabilities); (4) container "log": missing'
        " NVIDIA_VISIBLE_DEVICES=void (it hides the GPUs from a container that asks for none),"
        " which the mutating webhook adds: it did not run, or a later change took it away."
        " Create the pod again, or set it as shown (rule visible-devices)"
    )


def test_an_update_that_keeps_the_template_is_let_through_with_a_warning(
    shipped_policies: policies.PolicySet,
) -> None:
    old = workload("Deployment", pod(shared(2)))
    new = json.loads(json.dumps(old))
    new["metadata"]["labels"] = {"tier": "gpu"}
    response = answer(admission_review(new, operation="UPDATE", old=old), shipped_policies,
                      endpoint="validate")["response"]
    assert response["allowed"] is True
    assert response["warnings"] == [
        "the pod template breaks gpu-share rules; its new pods will be refused"]
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "cuda:13"
    response = answer(admission_review(new, operation="UPDATE", old=old), shipped_policies,
                      endpoint="validate")["response"]
    assert response["allowed"] is False


@pytest.mark.parametrize(
    "review",
    [
        pytest.param(admission_review(None, operation="DELETE", old=pod(shared(2))), id="delete"),
        pytest.param(admission_review(pod(shared(2)), sub_resource="status"), id="subresource"),
        pytest.param(admission_review(pod(shared(2)), operation="UPDATE", old=pod(shared(2))),
                     id="pod-update"),
    ],
)
def test_what_the_webhook_does_not_review_is_allowed(
    shipped_policies: policies.PolicySet, review: dict[str, Any]
) -> None:
    for endpoint in ("mutate", "validate"):
        response = answer(review, shipped_policies, endpoint=endpoint)["response"]  # type: ignore[arg-type]
        assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(b"{not json", "body is not JSON: ", id="not-json"),
        pytest.param(b"[1, 2]", "body is not an AdmissionReview object", id="not-an-object"),
        pytest.param(json.dumps({"apiVersion": "admission.k8s.io/v1beta1",
                                 "kind": "AdmissionReview", "request": {"uid": "u"}}).encode(),
                     "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got"
                     " admission.k8s.io/v1beta1 AdmissionReview", id="v1beta1"),
        pytest.param(json.dumps({"apiVersion": "admission.k8s.io/v1",
                                 "kind": "AdmissionReview"}).encode(),
                     "the AdmissionReview has no request", id="no-request"),
        pytest.param(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                 "request": {"uid": ""}}).encode(),
                     "the AdmissionReview request has no uid", id="no-uid"),
    ],
)
def test_a_body_that_is_not_a_usable_review_is_a_bad_review(
    shipped_policies: policies.PolicySet, body: bytes, reason: str
) -> None:
    with pytest.raises(BadReview) as caught:
        codec.review(body, policies=shipped_policies, policy_name="default", endpoint="mutate")
    assert str(caught.value).startswith(reason)
    assert "\n" not in str(caught.value)


def test_an_internal_error_answer_still_echoes_the_uid() -> None:
    body = json.dumps(admission_review(pod(), uid="u-1")).encode()
    uid = codec.uid_of(body)
    assert uid == "u-1"
    doc = json.loads(codec.internal_error(uid, "ref-7"))
    assert doc["response"]["uid"] == "u-1"
    assert doc["response"]["allowed"] is False
    assert doc["response"]["status"]["code"] == 500
    assert "internal error ref-7" in doc["response"]["status"]["message"]


def test_a_body_that_is_not_json_is_refused_without_keeping_it() -> None:
    # orjson's error holds the whole body as a str: the refusal must not carry it along (as
    # its context), or refused 7 MiB bodies stay alive with every reference to the refusal.
    with pytest.raises(BadReview) as refused:
        codec.parse(b"x" * 100_000)
    assert refused.value.__context__ is None
    assert refused.value.__cause__ is None


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_review_as_the_api_server_sends_it_is_decoded_typed_keeping_the_objects_bytes(
    operation: str,
) -> None:
    # The generic reading (`_parse_generic`) is for bodies that are not what the API server
    # sends; it keeps the objects as dicts, the typed decode as their bytes.
    review = admission_review(pod(shared(1)), uid="u-2", operation=operation)
    review["request"]["oldObject"] = pod() if operation == "UPDATE" else None
    request = codec.parse(json.dumps(review).encode())
    assert request.object is not None
    assert isinstance(request.object.raw, bytes)
    if operation == "UPDATE":
        assert request.old_object is not None
        assert isinstance(request.old_object.raw, bytes)
    else:
        assert request.old_object is None
    assert (request.uid, request.kind, request.operation) == ("u-2", "Pod", operation)
    # ... and the view reads the pod from those bytes typed, not through the generic reader.
    found, problems = view.templates(request.object)
    assert problems == []
    assert found[0].node is None


def _with_number(text: str, *, read: bool) -> bytes:
    """A Pod CREATE whose shared GPU count (`read`) or a field no rule reads is `text`, a JSON
    number as written (json.dumps cannot write one beyond a float's range)."""
    review = admission_review(pod(shared("NUMBER" if read else 1)), uid="u-3")
    if not read:
        review["request"]["object"]["spec"]["x-unread"] = "NUMBER"
    body = json.dumps(review)
    assert body.count('"NUMBER"') == 1
    return body.replace('"NUMBER"', text).encode()


def test_a_number_beyond_a_float_where_a_rule_reads_it_is_a_bad_review_not_an_error(
    shipped_policies: policies.PolicySet,
) -> None:
    # The typed decode finds it where it reads the field; the answer is a 400, as for any body
    # that is not JSON, never an internal error.
    with pytest.raises(BadReview) as caught:
        codec.review(_with_number("1e400", read=True), policies=shipped_policies,
                     policy_name="default", endpoint="mutate")
    assert str(caught.value).startswith("body is not JSON: ")
    assert caught.value.__context__ is None


def test_a_number_beyond_a_float_in_a_field_no_rule_reads_is_not_read(
    shipped_policies: policies.PolicySet,
) -> None:
    # The typed decode skips what no rule reads without converting it: the API server never
    # sends such a number (it parsed the object), and reading it would cost every review.
    doc = answer(_with_number("1e400", read=False), shipped_policies)
    assert doc["response"]["allowed"] is True
    assert doc["response"]["uid"] == "u-3"


@pytest.mark.parametrize(
    "field", [b'"x-unread": "\xff"', b'"x-unread": "caf\xc3"'], ids=["stray-byte", "cut-sequence"]
)
def test_a_body_that_is_not_utf8_where_no_rule_reads_is_a_bad_review(
    shipped_policies: policies.PolicySet, field: bytes
) -> None:
    # The typed decode skips the field without reading it; JSON is UTF-8 all the same.
    body = _with_number("1", read=False).replace(b'"x-unread": 1', field)
    assert field in body
    with pytest.raises(BadReview) as caught:
        codec.review(body, policies=shipped_policies, policy_name="default", endpoint="mutate")
    assert str(caught.value).startswith("body is not JSON: ")


def _deep(levels: int) -> Any:
    """A list nested `levels` deep: deeper than orjson writes (254), within what it reads."""
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


def _privileged_pod_review() -> dict[str, Any]:
    return admission_review(pod(container(securityContext={"privileged": True})), uid="u-4")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param(lambda r: r["request"].update(operation="create"),
                     "the request's operation must be one of", id="lowercase-operation"),
        pytest.param(lambda r: r["request"].pop("operation"),
                     "must be one of CREATE, UPDATE, DELETE, CONNECT, and it is missing or not a"
                     " string", id="no-operation"),
        pytest.param(lambda r: r["request"].update(operation=_deep(300)),
                     "and it is missing or not a string", id="deep-operation"),
        pytest.param(lambda r: r.update(kind=_deep(300)),
                     "got admission.k8s.io/v1 a list nested too deep to show", id="deep-kind"),
        pytest.param(lambda r: r.update(apiVersion=_deep(300)),
                     "got a list nested too deep to show AdmissionReview", id="deep-api-version"),
        pytest.param(lambda r: r["request"].update(object=None),
                     "the CREATE request has no object", id="create-without-object"),
        pytest.param(lambda r: r["request"]["object"].update(kind="Deployment"),
                     "the object is Deployment, the request's kind is Pod", id="object-kind"),
        pytest.param(lambda r: r["request"]["object"].pop("kind"),
                     "the object is of no kind", id="object-without-kind"),
        pytest.param(lambda r: r["request"]["object"].update(apiVersion="apps/v1"),
                     "the object is apps/Pod", id="object-group"),
        pytest.param(lambda r: r["request"]["kind"].update(kind="pod"),
                     "the request's kind is pod", id="request-kind-case"),
    ],
)
def test_a_request_the_api_server_never_sends_is_a_bad_review_not_an_allowed_pod(
    shipped_policies: policies.PolicySet, change: Any, reason: str
) -> None:
    # The engine routes by the request's kind and reads the object: they must agree, or a
    # privileged pod sent as something else would be let through unreviewed.
    review = _privileged_pod_review()
    change(review)
    for endpoint in ("mutate", "validate"):
        with pytest.raises(BadReview) as caught:
            codec.review(json.dumps(review).encode(), policies=shipped_policies,
                         policy_name="default", endpoint=endpoint)
        assert reason in str(caught.value)


def test_the_same_privileged_pod_sent_as_the_api_server_sends_it_is_refused(
    shipped_policies: policies.PolicySet,
) -> None:
    doc = answer(_privileged_pod_review(), shipped_policies, endpoint="validate")
    assert doc["response"]["allowed"] is False


def _padded_review(filler: bytes) -> bytes:
    """A review of a shared-GPU pod whose field `x-unread` (which no rule reads) is `filler`."""
    body = json.dumps(admission_review(pod(shared()) | {"x-unread": "FILL"})).encode()
    return body.replace(b'"FILL"', filler)


@pytest.mark.parametrize(
    "filler",
    [b"[" + b",".join([b"[[]]"] * 400_000) + b"]",
     b'{"uid": [' + b",".join([b"{}"] * 600_000) + b"]}"],
    ids=["skipped-field", "anywhere"],
)
def test_a_body_of_more_json_values_than_a_review_reads_is_refused_before_it_is_decoded(
    shipped_policies: policies.PolicySet, filler: bytes
) -> None:
    # Decoding costs up to about 100 bytes a value, whichever path reads it: a 7 MiB body of
    # empty lists held 200 MiB in a generic reading.
    body = _padded_review(filler)
    with pytest.raises(BadReview) as caught:
        codec.review(body, policies=shipped_policies, policy_name="default", endpoint="mutate")
    assert str(caught.value).startswith("the body holds 1,")
    assert str(caught.value).endswith(
        f"JSON values (objects, lists, their members and items); a review reads at most"
        f" {codec.MAX_VALUES:,}, a bound on its memory")


def test_a_body_as_long_with_few_values_is_reviewed(shipped_policies: policies.PolicySet) -> None:
    body = _padded_review(b'"' + b"x" * (codec.MAX_VALUES + 1) + b'"')
    assert len(body) > codec.MAX_VALUES
    assert answer(body, shipped_policies)["response"]["allowed"] is True
