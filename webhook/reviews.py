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
from typing import Any, NamedTuple

import orjson

from webhook import names
from webhook.core import pods, reviewing
from webhook.core.decisions import Decision
from webhook.errors import BadReview
from webhook.policies import PolicySet

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
UNKNOWN_POLICY = names.UNKNOWN_POLICY
EPHEMERAL_CONTAINERS = reviewing.EPHEMERAL_CONTAINERS

Endpoint = reviewing.Endpoint
ENDPOINTS: tuple[Endpoint, ...] = ("mutate", "validate")

# Reviews of larger bodies are never cached (see `review`): the cache then holds at most
# its size times a few times this.
CACHE_MAX_BODY_BYTES = 16 * 1024

_STATUS_REASONS = {400: "BadRequest", 403: "Forbidden", 500: "InternalError"}


class Request(NamedTuple):
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


class Outcome(NamedTuple):
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
            f"expected apiVersion {API_VERSION} kind {KIND}, got {_shown(api_version)}"
            f" {_shown(doc.get('kind'))}"
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


def _shown(value: object, longest: int = 64) -> str:
    """A value from the body, for a reason: on one line, cut to `longest` characters."""
    text = orjson.dumps(value, default=repr).decode() if not isinstance(value, str) else value
    text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= longest else text[:longest] + "..."


def decide(
    request: Request,
    *,
    policies: PolicySet,
    policy_name: str,
    endpoint: Endpoint,
    kinds: pods.Kinds = pods.BUILTIN,
    cache: reviewing.Cache | None = None,
) -> Decision:
    """What the webhook at `/<endpoint>/<policy_name>` decides about `request` (see
    `reviewing.admit`). A policy that is not in force (an unknown name, a file that does not
    load) is stood in for by one that refuses GPU pods, saying why (`PolicySet.governing`)."""
    return reviewing.admit(
        request.object,
        policy=policies.governing(policy_name),
        endpoint=endpoint,
        group=request.group,
        kind=request.kind,
        operation=request.operation,
        sub_resource=request.sub_resource,
        old=request.old_object,
        kinds=kinds,
        cache=cache,
    )


def encode(uid: str, decision: Decision) -> bytes:
    """The AdmissionReview v1 response for `decision`."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if decision.allowed:
        # patch and patchType come together, and only with a non-empty patch.
        if decision.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(decision.patch)).decode("ascii")
    else:
        response["status"] = _status(decision.code, decision.message)
    if decision.warnings:
        response["warnings"] = decision.warnings
    if decision.audit:
        response["auditAnnotations"] = decision.audit
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def review(
    body: bytes,
    *,
    policies: PolicySet,
    policy_name: str,
    endpoint: Endpoint,
    kinds: pods.Kinds = pods.BUILTIN,
    cache: reviewing.Cache | None = None,
) -> Outcome:
    """The whole exchange: parse, decide, encode. Raises BadReview for an unusable body."""
    request = parse(body)
    if len(body) > CACHE_MAX_BODY_BYTES:
        # A decision's key and patch grow with the pod: a cache bounded by entries must not
        # hold large ones (a few hundred pods with a 1 MB annotation would fill a replica).
        cache = None
    decision = decide(
        request,
        policies=policies,
        policy_name=policy_name,
        endpoint=endpoint,
        kinds=kinds,
        cache=cache,
    )
    return Outcome(request, decision, encode(request.uid, decision))


def _status(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "reason": _STATUS_REASONS.get(code, "Forbidden"), "message": message}


def internal_error(uid: str, reference: str) -> bytes:
    """The answer when reviewing failed unexpectedly: a denial that still echoes the uid."""
    message = (
        f"gpu-share-webhook could not review this object (internal error {reference}, logged);"
        " try again, and report it if it persists (rule internal-error)"
    )
    response = {"uid": uid, "allowed": False, "status": _status(500, message)}
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def uid_of(body: bytes) -> str | None:
    """The request uid of a body, if one can be read: for answering after an internal error."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    req = doc.get("request") if isinstance(doc, dict) else None
    uid = req.get("uid") if isinstance(req, dict) else None
    return uid if isinstance(uid, str) and uid else None
