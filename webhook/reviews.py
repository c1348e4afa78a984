"""The AdmissionReview v1 codec: request bytes in, response bytes out.

Knows the wire format and which objects each endpoint reviews; knows nothing of HTTP. The
two error routes, in one place:

- the body is not a usable AdmissionReview -> `errors.BadReview` (the server answers 400);
- a rule refuses the object -> a normal response with `allowed: false`, `status.code` 403
  and a message a person can act on.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from webhook import mutating
from webhook.decisions import Decision
from webhook.errors import BadReview
from webhook.policies import PolicySet

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
# The path segment of the webhook entry that catches namespaces whose policy label names no
# policy. Not a DNS label, so no policy can have this name.
UNKNOWN_POLICY = "_unknown"

Endpoint = Literal["mutate", "validate"]

_WORKLOAD_GROUPS = {"apps", "batch"}
_STATUS_REASONS = {400: "BadRequest", 403: "Forbidden", 500: "InternalError"}


@dataclass(frozen=True, slots=True)
class Request:
    """The parts of an AdmissionRequest the webhook uses."""

    uid: str
    group: str
    kind: str
    operation: str
    namespace: str
    name: str
    sub_resource: str
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Outcome:
    """A review as answered: what was asked, what was decided, and the response body."""

    request: Request
    decision: Decision
    body: bytes


def parse(body: bytes) -> Request:
    """Decode an AdmissionReview v1; raise BadReview with a one-line reason."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadReview("body is not an AdmissionReview object")
    api_version = doc.get("apiVersion")
    if api_version != API_VERSION or doc.get("kind") != KIND:
        raise BadReview(
            f"expected apiVersion {API_VERSION} kind {KIND}, got {api_version} {doc.get('kind')}"
        )
    req = doc.get("request")
    if not isinstance(req, dict):
        raise BadReview("the AdmissionReview has no request")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("the AdmissionReview request has no uid")
    kind = req.get("kind")
    kind = kind if isinstance(kind, dict) else {}
    obj = req.get("object")
    old = req.get("oldObject")
    operation = req.get("operation")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name = req.get("name") or meta.get("name") or meta.get("generateName") or ""
    return Request(
        uid=uid,
        group=str(kind.get("group") or ""),
        kind=str(kind.get("kind") or ""),
        operation=operation if isinstance(operation, str) else "",
        namespace=str(req.get("namespace") or meta.get("namespace") or ""),
        name=str(name),
        sub_resource=str(req.get("subResource") or ""),
        object=obj if isinstance(obj, dict) else None,
        old_object=old if isinstance(old, dict) else None,
    )


def decide(
    request: Request, *, policies: PolicySet, policy_name: str, endpoint: Endpoint
) -> Decision:
    """What the webhook at `/<endpoint>/<policy_name>` decides about `request`."""
    policy = policies.get(policy_name)
    if policy is None:
        return unknown_policy(policy_name, policies)
    obj = request.object
    if obj is None or request.sub_resource or request.operation not in ("CREATE", "UPDATE"):
        return Decision()
    if request.kind == "Pod" and request.group == "":
        if request.operation != "CREATE":
            # A pod's containers, resources and scheduling are immutable once created.
            return Decision()
        return mutating.review(obj, policy=policy, mutate=endpoint == "mutate")
    if (
        endpoint == "validate"
        and request.group in _WORKLOAD_GROUPS
        and request.kind in mutating.TEMPLATE_PATHS
    ):
        decision = mutating.review(obj, policy=policy, mutate=False)
        if decision.violations and request.operation == "UPDATE" and _same_template(request):
            # An update that leaves the pod template alone (labels, scaling, a rollout
            # restart's annotations are elsewhere) is not refused for a template that was
            # admitted before these rules: tell, and let it through.
            kept = Decision(warnings=list(decision.warnings))
            kept.warn("the pod template breaks gpu-share rules; its new pods will be refused")
            return kept
        return decision
    return Decision()


def _same_template(request: Request) -> bool:
    if request.old_object is None or request.object is None:
        return False
    return mutating.template_of(request.old_object) == mutating.template_of(request.object)


def unknown_policy(name: str, policies: PolicySet) -> Decision:
    known = ", ".join(policies.names) or "none"
    d = Decision()
    if name == UNKNOWN_POLICY:
        d.deny(
            "unknown-policy",
            "this namespace's label gpu-share.io/policy names a policy that does not exist"
            f" (policies: {known}). Fix the label, or remove it for the default policy.",
        )
    else:
        d.deny(
            "unknown-policy",
            f'policy "{name}" does not exist (policies: {known}). Fix the namespace label'
            " gpu-share.io/policy, or add the policy and render the webhook configurations.",
        )
    return d


def encode(uid: str, decision: Decision) -> bytes:
    """The AdmissionReview v1 response for `decision`."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if decision.allowed:
        # patch and patchType come together, and only with a non-empty patch.
        if decision.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(decision.patch)).decode("ascii")
    else:
        response["status"] = {
            "code": decision.code,
            "reason": _STATUS_REASONS.get(decision.code, "Forbidden"),
            "message": decision.message,
        }
    if decision.warnings:
        response["warnings"] = decision.warnings
    if decision.audit:
        response["auditAnnotations"] = decision.audit
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def review(body: bytes, *, policies: PolicySet, policy_name: str, endpoint: Endpoint) -> Outcome:
    """The whole exchange: parse, decide, encode. Raises BadReview for an unusable body."""
    request = parse(body)
    decision = decide(request, policies=policies, policy_name=policy_name, endpoint=endpoint)
    return Outcome(request, decision, encode(request.uid, decision))


def internal_error(uid: str, reference: str) -> bytes:
    """The answer when reviewing failed unexpectedly: a denial that still echoes the uid."""
    d = Decision(code=500)
    d.deny(
        "internal-error",
        f"gpu-share-webhook could not review this object (internal error {reference}, logged);"
        " try again, and report it if it persists.",
    )
    return encode(uid, d)


def uid_of(body: bytes) -> str | None:
    """The request uid of a body, if one can be read: for answering after an internal error."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    req = doc.get("request") if isinstance(doc, dict) else None
    uid = req.get("uid") if isinstance(req, dict) else None
    return uid if isinstance(uid, str) and uid else None
