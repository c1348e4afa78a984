"""The AdmissionReview v1 codec: request bytes in, response bytes out.

Knows the wire format and which objects each endpoint reviews; knows nothing of HTTP. The
two error routes, in one place:

- the body is not a usable AdmissionReview -> `errors.BadReview` (the server answers 400);
- a rule refuses the object -> a normal response with `allowed: false`, `status.code` 403
  and a message a person can act on.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgspec
import orjson

from webhook.engine import namespaces, reviewing, view
from webhook.engine.decision import Decision
from webhook.errors import BadReview
from webhook.policy import kinds, names
from webhook.policy.policies import PolicySet
from webhook.server import envelope

# A review's results, as the server names them.
Request = envelope.Request
Summary = envelope.Summary
Outcome = envelope.Outcome

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
EPHEMERAL_CONTAINERS = reviewing.EPHEMERAL_CONTAINERS
STATUS = reviewing.STATUS
BINDING = reviewing.BINDING

Endpoint = reviewing.Endpoint
ENDPOINTS: tuple[Endpoint, ...] = ("mutate", "validate")

_STATUS_REASONS = {400: "BadRequest", 403: "Forbidden", 500: "InternalError"}


def summary(decision: Decision) -> Summary:
    """What the review line and the metrics read of `decision`."""
    violations, would_refuse = decision.violations, decision.would_refuse
    if not violations and not would_refuse:
        # Most reviews: allowed, nothing that would refuse (no sorting, no generators).
        return Summary(True, len(decision.patch), (), (), ())
    return Summary(
        decision.allowed,
        len(decision.patch),
        tuple(decision.rules),
        tuple((v.rule, names.ENFORCE) for v in decision.violations)
        + tuple((v.rule, mode) for mode, v in decision.would_refuse),
        tuple(sorted({f"{v.rule}:{mode}" for mode, v in decision.would_refuse})),
    )


_DECODE_REVIEW = msgspec.json.Decoder(envelope.RawReview).decode
_DECODE_TYPED = msgspec.json.Decoder(envelope.TypedReview).decode


# The JSON values a body may hold: its objects, lists, members and items (`view.json_values`).
# Decoding costs up to about 100 bytes and a microsecond a value whichever way it is read (a
# list of structs, a map of labels, the generic reading of a body the API server would not
# send), with the interpreter held all along: this bounds one review's decode near 50 MiB and
# half a second. An UPDATE of the largest object etcd stores, sent twice, holds fewer.
MAX_VALUES = 500_000

# What AdmissionRequest.operation may be.
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


def parse(body: bytes) -> Request:
    """Decode an AdmissionReview v1; raise BadReview with a one-line reason.

    The envelope is decoded typed, its objects kept as their bytes (the engine decodes
    them); a body that is not what the API server sends (not JSON, not UTF-8, another
    shape) is read again in full by `_parse_generic`, which says what is wrong. A request
    the API server would never send is refused too: an operation it does not have, a
    CREATE or UPDATE without an object, or an object of another kind than the request
    names (the engine routes by the request and reads the object); and a body of more than
    MAX_VALUES values, before any of it is decoded."""
    values = view.json_values(body, MAX_VALUES)
    if values is not None:
        raise BadReview(
            f"the body holds {values:,} JSON values (objects, lists, their members and"
            f" items); a review reads at most {MAX_VALUES:,}, a bound on its memory"
        )
    request = _parse(body)
    operation = request.operation
    if operation not in OPERATIONS:
        # (Request.operation is empty where the body's is missing or not a string.)
        got = f"not {_shown(operation)}" if operation else "and it is missing or not a string"
        raise BadReview(f"the request's operation must be one of {', '.join(OPERATIONS)}, {got}")
    if operation in ("CREATE", "UPDATE"):
        if request.object is None:
            raise BadReview(f"the {operation} request has no object")
        group, kind = view.head(request.object)
        if (group, kind) != (request.group, request.kind):
            said = f"{group}/{kind}" if group else kind or "of no kind"
            asked = f"{request.group}/{request.kind}" if request.group else request.kind
            raise BadReview(f"the object is {_shown(said)}, the request's kind is {_shown(asked)}")
    return request


def _parse(body: bytes) -> Request:
    review: envelope.RawReview | envelope.TypedReview | None = None
    try:
        review = _DECODE_TYPED(body)
    except (msgspec.DecodeError, RecursionError):
        # The object is no Pod's shape (or no object): read from its bytes, where the
        # slower readings of the view say what is wrong.
        review = None
    try:
        if review is None:
            review = _DECODE_REVIEW(body)
        # What a typed decode leaves unchecked in the fields it skips (an ASCII body, most,
        # is UTF-8 without being copied into a string).
        if not body.isascii():
            body.decode("utf-8")
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        # (Read again outside the `except`: a refusal must not keep this error, and the
        # body it may hold, alive as its context.)
        review = None
    if review is None:
        return _parse_generic(body)
    req = review.request
    if (
        review.apiVersion != API_VERSION
        or review.kind != KIND
        or req is None
        or not isinstance(req.uid, str)
        or not req.uid
    ):
        return _parse_generic(body)
    kind = req.kind if req.kind is not None else envelope.Kind()
    if isinstance(req, envelope.TypedRequest):
        typed = req.object
        obj = (
            view.Source.decoded(typed, partial(_object_bytes, body), len(body))
            if typed is not None
            else None
        )
    else:
        obj = _source(req.object)
    name = req.name
    namespace = req.namespace
    if obj is not None and not (name and namespace):
        meta = view.meta_of(obj)
        name = name or meta.name or meta.generateName
        namespace = namespace or meta.namespace
    operation = req.operation
    return Request(
        uid=req.uid,
        group=str(kind.group or ""),
        kind=str(kind.kind or ""),
        operation=operation if isinstance(operation, str) else "",
        namespace=str(namespace or ""),
        name=str(name or ""),
        sub_resource=str(req.subResource or ""),
        object=obj,
        old_object=_source(req.oldObject),
    )


def _source(raw: msgspec.Raw) -> view.Source | None:
    """An object of the request: None where it is none (null, or not an object)."""
    data = bytes(raw)
    return view.Source(data) if data[:1] == b"{" else None


def _object_bytes(body: bytes) -> bytes:
    """The bytes of the object of `body`, a request `_parse` decoded typed."""
    request = _DECODE_REVIEW(body).request
    return bytes(request.object) if request is not None else b""


def _parse_generic(body: bytes) -> Request:
    """`parse`, over the body's generic form: what is wrong with it, in one line."""
    # Raised outside the `except`: orjson's error holds the whole body as a `str`, and a
    # BadReview raised in the handler would keep it alive as its context (7 MiB a refusal,
    # piling up behind the review threads until the collector ran).
    values = view.json_values(body, view.MAX_GENERIC_VALUES)
    if values is not None:
        raise BadReview(
            f"body is not an AdmissionReview as the API server sends it, and of {values:,}"
            f" JSON values; one that is not is read only up to {view.MAX_GENERIC_VALUES:,}"
        )
    reason = None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        reason = f"body is not JSON: {exc}"
    if reason is not None:
        raise BadReview(reason)
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
        object=view.Source(obj) if isinstance(obj, dict) else None,
        old_object=view.Source(old) if isinstance(old, dict) else None,
    )


def _shown(value: object, longest: int = 64) -> str:
    """A value from the body, for a reason: on one line, cut to `longest` characters."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = orjson.dumps(value, default=repr).decode()
        except orjson.JSONEncodeError:
            # Nested deeper than orjson writes (254 levels): say what it is.
            text = f"a {type(value).__name__} nested too deep to show"
    text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= longest else text[:longest] + "..."


def decide(
    request: Request,
    *,
    policies: PolicySet,
    policy_name: str,
    endpoint: Endpoint,
    kinds: kinds.Kinds = kinds.BUILTIN,
) -> Decision:
    """What the webhook at `/<endpoint>/<policy_name>` decides about `request` (see
    `reviewing.admit`). A policy that is not in force (an unknown name, a file that does not
    load) is stood in for by one that refuses GPU pods, saying why (`PolicySet.governing`).
    A Namespace (the validating entry that sends relabelled namespaces) gets warnings only."""
    if request.kind == "Namespace" and request.group == "":
        decision = Decision()
        if endpoint == "validate" and request.operation in ("CREATE", "UPDATE"):
            for line in namespaces.label_warnings(_labels(request.object), policies):
                decision.warn(line)
        return decision
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
    )


def _labels(source: view.Source | None) -> dict[str, str]:
    """An object's labels, those whose key and value are strings (the API server refuses
    any other after the webhooks)."""
    obj = source.generic if source is not None else None
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    raw = meta.get("labels") if isinstance(meta, dict) else None
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


# msgspec writes the answer, the patch's bytes as base64 included: one call, with no string
# of the base64 made first (the same bytes as orjson for the rest).
_ENCODE = msgspec.json.Encoder().encode


def encode(uid: str, decision: Decision) -> bytes:
    """The AdmissionReview v1 response for `decision`."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if decision.allowed:
        # patch and patchType come together, and only with a non-empty patch.
        if decision.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = orjson.dumps(decision.patch)
    else:
        response["status"] = _status(decision.code, decision.message)
    if decision.warnings:
        response["warnings"] = decision.warnings
    if decision.audit:
        response["auditAnnotations"] = decision.audit
    return _ENCODE({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def review(
    body: bytes,
    *,
    policies: PolicySet,
    policy_name: str,
    endpoint: Endpoint,
    kinds: kinds.Kinds = kinds.BUILTIN,
) -> Outcome:
    """The whole exchange: parse, decide, encode. Raises BadReview for an unusable body."""
    request = parse(body)
    reason = None
    try:
        decision = decide(
            request,
            policies=policies,
            policy_name=policy_name,
            endpoint=endpoint,
            kinds=kinds,
        )
    except view.Unreadable as exc:
        reason = str(exc)
    if reason is not None:
        raise BadReview(reason)
    return Outcome(request, decision, encode(request.uid, decision), summary(decision))


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
