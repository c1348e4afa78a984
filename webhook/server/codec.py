"""The AdmissionReview v1 codec: request bytes in, response bytes out.

Knows the wire format and which objects each endpoint reviews; knows nothing of HTTP. The
two error routes, in one place:

- the body is not a usable AdmissionReview -> `errors.BadReview` (the server answers 400);
- a rule refuses the object -> a normal response with `allowed: false`, `status.code` 403
  and a message a person can act on.
"""

from __future__ import annotations

import base64
import re
import threading
from collections.abc import Hashable, Mapping
from typing import Any, NamedTuple

import orjson

from webhook.engine import namespaces, reviewing
from webhook.engine.decision import Decision
from webhook.errors import BadReview
from webhook.policy import kinds, names
from webhook.policy.policies import PolicySet

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
EPHEMERAL_CONTAINERS = reviewing.EPHEMERAL_CONTAINERS
STATUS = reviewing.STATUS
BINDING = reviewing.BINDING

Endpoint = reviewing.Endpoint
ENDPOINTS: tuple[Endpoint, ...] = ("mutate", "validate")

# What an `Answers` cache holds at most, keys and answers together (a typical entry: 3-4 KB),
# and the largest body it keeps an answer for: bounded in bytes, it takes a pod of 50
# containers (28 KB), and still at least 128 of them.
ANSWERS_MAX_BYTES = 8 * 1024 * 1024
ANSWERS_MAX_BODY_BYTES = 64 * 1024

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


class Summary(NamedTuple):
    """What the review line and the metrics read of a decision (`summary`)."""

    allowed: bool
    patch_operations: int
    # The rules that refused, each once, sorted (none when allowed).
    rules: tuple[str, ...]
    # Every violation found, with the mode that applied it: enforce (refused), warn, dry-run.
    violations: tuple[tuple[str, str], ...]
    # "rule:mode" of each rule that would refuse but was not enforced, sorted.
    would_refuse: tuple[str, ...]


def summary(decision: Decision) -> Summary:
    """What the review line and the metrics read of `decision`."""
    return Summary(
        decision.allowed,
        len(decision.patch),
        tuple(decision.rules),
        tuple((v.rule, names.ENFORCE) for v in decision.violations)
        + tuple((v.rule, mode) for mode, v in decision.would_refuse),
        tuple(sorted({f"{v.rule}:{mode}" for mode, v in decision.would_refuse})),
    )


class Outcome:
    """A review as answered: what was asked, what was decided, the response body, and the
    summary of the decision the review line and the metrics read.

    A review answered from `Answers` was neither parsed nor judged: its `request.object` is
    None, and its `decision` is made from the kept answer when first asked for (a new one,
    as every review makes: the server only reads `summary`).
    """

    __slots__ = ("_answer", "_decision", "body", "request", "summary")

    def __init__(
        self,
        request: Request,
        decision: Decision | None,
        body: bytes,
        summary: Summary,
        answer: Answer | None = None,
    ) -> None:
        self.request = request
        self.body = body
        self.summary = summary
        self._decision = decision
        self._answer = answer

    @property
    def decision(self) -> Decision:
        if self._decision is None:
            assert self._answer is not None  # an Outcome has one or the other
            self._decision = self._answer.decision()
        return self._decision


def parse(body: bytes) -> Request:
    """Decode an AdmissionReview v1; raise BadReview with a one-line reason."""
    # Raised outside the `except`: orjson's error holds the whole body as a `str`, and a
    # BadReview raised in the handler would keep it alive as its context (7 MiB a refusal,
    # piling up behind the review threads until the collector ran, found by an attack).
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


def _labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """An object's labels, those whose key and value are strings (the API server refuses
    any other after the webhooks)."""
    meta = obj.get("metadata") if obj is not None else None
    raw = meta.get("labels") if isinstance(meta, dict) else None
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


def encode(uid: str, decision: Decision) -> bytes:
    """The AdmissionReview v1 response for `decision`."""
    return _encoded(uid, decision)[0]


def _encoded(uid: str, decision: Decision) -> tuple[bytes, bytes]:
    """The response for `decision`, and its patch as JSON (b"" when it has none)."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    patch = b""
    if decision.allowed:
        # patch and patchType come together, and only with a non-empty patch.
        if decision.patch:
            patch = orjson.dumps(decision.patch)
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(patch).decode("ascii")
    else:
        response["status"] = _status(decision.code, decision.message)
    if decision.warnings:
        response["warnings"] = decision.warnings
    if decision.audit:
        response["auditAnnotations"] = decision.audit
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response}), patch


def review(
    body: bytes,
    *,
    policies: PolicySet,
    policy_name: str,
    endpoint: Endpoint,
    kinds: kinds.Kinds = kinds.BUILTIN,
    answers: Answers | None = None,
) -> Outcome:
    """The whole exchange: parse, decide, encode. Raises BadReview for an unusable body.

    `answers`: whole answers by the body's shape (`Answers`), looked up before the body is
    even parsed.
    """
    if len(body) > ANSWERS_MAX_BODY_BYTES:
        answers = None
    found: Shape | None = None
    policy = policies.get(policy_name) if answers is not None else None
    if answers is not None and policy is not None:
        # Only under a policy in force: a stand-in (`PolicySet.governing`) is made anew for
        # each review, so its answers would only push out others.
        found = shape(body)
        if found is not None:
            entry = answers.get((policy, endpoint, found.key))
            if entry is not None:
                return _answered(entry, found.uid)
    request = parse(body)
    decision = decide(
        request,
        policies=policies,
        policy_name=policy_name,
        endpoint=endpoint,
        kinds=kinds,
    )
    body, patch = _encoded(request.uid, decision)
    outcome = Outcome(request, decision, body, summary(decision))
    if answers is not None and found is not None:
        kept = _entry(outcome, found, patch)
        if kept is not None:
            answers.put((policy, endpoint, found.key), kept, key_bytes=len(found.key))
    return outcome


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


# --------------------------------------------------------------------------- answers by shape
#
# The API server calls a mutating webhook before it names a pod made from `generateName`, so
# the reviews of the pods of one ReplicaSet, Job or Deployment are the same bytes but for two
# values: the request's uid, and the name of the service account token volume that the
# ServiceAccount admission plugin adds before any webhook runs (`kube-api-access-` and five
# random characters, in `spec.volumes` and in each container's `volumeMounts`). A body's
# shape is its bytes with those values taken out; a review whose shape was answered before is
# answered alike, with its own uid, without being parsed or judged.
#
# Why the answer is the one a fresh review gives. Two bodies of one shape are equal byte for
# byte but in those places, and the values there are drawn from small alphabets that need no
# escaping (the uid: letters, digits, "-"; a token: [a-z0-9]{5}), so one body is valid JSON
# of a given structure exactly when the other is, and their objects differ only there. The
# uid is the request's own (checked when an answer is kept; its place in the bytes is part of
# the shape); no rule reads it. The tokens are renamed in the order they first appear, so two
# bodies of one shape use them alike: where one body has one token twice, so has the other,
# and never one where the other has two. A shape is only made when every "kube-api-access-"
# of the body is the value of a "name" key, as volume and mount names are (not an environment
# value, an annotation value, a `targetContainerName`, the uid), and the body has no \u escape
# (which could spell a token some other way): a rule reads a name only to compare it with
# another (a volume and the mounts that use it) or to show it. What it shows could hold a
# token (a warning naming a volume or container): an answer whose patch, warnings,
# annotations or log fields hold one is not kept. Only allowed answers with no rule relaxed
# are kept, of Pod CREATEs under a policy in force, keyed by that Policy object: a reload
# makes new ones.

_TOKEN = b"kube-api-access-"
_TOKEN_SUFFIX = re.compile(rb"[a-z0-9]{5}\"")
# Where a token may stand: the value of a "name" key, in JSON with any spacing.
_NAME_BEFORE_TOKEN = re.compile(rb'[{,][ \t\r\n]*"name"[ \t\r\n]*:[ \t\r\n]*"\Z')
_COMPACT_NAMES = (b'{"name":"', b',"name":"')
_UID = re.compile(rb'"uid"[ \t\r\n]*:[ \t\r\n]*"([0-9A-Za-z-]{1,128})"')
# Marks where a value was taken out: NUL never stands in a valid JSON text.
_TAKEN = b"\0"


class Shape(NamedTuple):
    """A body with its per-replica values taken out (`key`), and its request uid."""

    key: bytes
    uid: str


def shape(body: bytes) -> Shape | None:
    """The shape of a review body (see above), or None when it cannot be made safely."""
    if b"\\" in body and b"\\u" in body:  # (one byte is looked for much faster than two)
        return None
    uid = _UID.search(body)
    if uid is None:
        return None
    start, end = uid.span(1)
    if _TOKEN in body[start:end]:
        # A uid the API server never makes: a token must stand as a name (see above).
        return None
    # Split at every token: each piece after the first starts with a token's suffix.
    pieces = (body[:start] + _TAKEN + body[end:]).split(_TOKEN)
    renamed: dict[bytes, bytes] = {}
    before = pieces[0]
    for n in range(1, len(pieces)):
        piece = pieces[n]
        if _TOKEN_SUFFIX.match(piece) is None or not (
            # As the API server writes it (compact), else with spacing.
            before.endswith(_COMPACT_NAMES)
            or _NAME_BEFORE_TOKEN.search(before, max(0, len(before) - 64)) is not None
        ):
            return None
        suffix = piece[:5]
        mark = renamed.get(suffix)
        if mark is None:
            mark = renamed[suffix] = _TAKEN + str(len(renamed)).encode()
        pieces[n] = mark + piece[5:]
        before = piece
    return Shape(_TOKEN.join(pieces), uid.group(1).decode("ascii"))


class Answer(NamedTuple):
    """A kept answer: the response around its uid, what the review line and the metrics read
    of it, and what its decision is made again from when asked for (`Outcome.decision`)."""

    head: bytes
    tail: bytes
    summary: Summary
    namespace: str
    name: str
    patch: bytes  # as JSON; b"" for none
    warnings: tuple[str, ...]
    audit: tuple[tuple[str, str], ...]
    mutations: tuple[str, ...]
    patch_rules: tuple[str, ...]

    def decision(self) -> Decision:
        """A new Decision equal to the kept one."""
        return Decision(
            patch=orjson.loads(self.patch) if self.patch else [],
            warnings=list(self.warnings),
            audit=dict(self.audit),
            mutations=list(self.mutations),
            patch_rules=list(self.patch_rules),
        )


class Answers:
    """Whole answers of Pod reviews by their shape, the policy object and the endpoint.

    Bounded in entries (`size`) and in bytes (`max_bytes`, keys and answers): past either the
    oldest go. Writes take a lock (large reviews run on threads); reads need none.
    """

    def __init__(self, size: int, max_bytes: int = ANSWERS_MAX_BYTES) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.hits = 0
        self.bytes = 0
        self._entries: dict[Hashable, tuple[Answer, int]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Answer | None:
        found = self._entries.get(key)
        if found is None:
            return None
        self.hits += 1
        return found[0]

    def put(self, key: Hashable, answer: Answer, *, key_bytes: int) -> None:
        """Keep `answer` under `key` (whose shape is `key_bytes` long)."""
        size = key_bytes + len(answer.head) + len(answer.tail) + len(answer.patch)
        if self.size <= 0 or size > self.max_bytes:
            return
        with self._lock:
            if key in self._entries:
                return
            while self._entries and (
                len(self._entries) >= self.size or self.bytes + size > self.max_bytes
            ):
                oldest = next(iter(self._entries))
                self.bytes -= self._entries.pop(oldest)[1]
            self._entries[key] = (answer, size)
            self.bytes += size


def _entry(outcome: Outcome, found: Shape, patch: bytes) -> Answer | None:
    """What to keep of `outcome` under its shape (`patch`: its decision's patch as JSON), or
    None when it must not be kept."""
    request, decision = outcome.request, outcome.decision
    if (
        request.uid != found.uid
        or (request.group, request.kind, request.operation) != ("", "Pod", "CREATE")
        or request.sub_resource
        or not decision.allowed
        or decision.would_refuse
    ):
        return None
    # The uid is written as it is (its alphabet needs no escaping): the answer is the bytes
    # around it.
    opening = b'"response":{"uid":"'
    at = outcome.body.find(opening + found.uid.encode("ascii") + b'"')
    if at == -1:
        return None
    head = outcome.body[: at + len(opening)]
    tail = outcome.body[at + len(opening) + len(found.uid) :]
    shown = (patch, head, tail, request.namespace.encode(), request.name.encode())
    if any(_TOKEN in part for part in shown):
        return None
    return Answer(
        head,
        tail,
        outcome.summary,
        request.namespace,
        request.name,
        patch,
        tuple(decision.warnings),
        tuple(decision.audit.items()),
        tuple(decision.mutations),
        tuple(decision.patch_rules),
    )


def _answered(answer: Answer, uid: str) -> Outcome:
    """A kept answer for the review with `uid` (its decision is made when asked for)."""
    request = Request(uid, "", "Pod", "CREATE", answer.namespace, answer.name, "", None, None)
    body = answer.head + uid.encode("ascii") + answer.tail
    return Outcome(request, None, body, answer.summary, answer)
