"""What the codec (webhook/server/codec.py) decodes and returns, as msgspec Structs: the
AdmissionReview envelope as the body is decoded (its object typed in the same pass), and a
review's results.

This module stays uncompiled in a wheel (hatch_build.py), as webhook/engine/structs.py does:
mypyc gives the classes it compiles annotations msgspec cannot read. The codec, compiled,
reads these.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct

from webhook.engine import structs, view
from webhook.engine.decision import Decision

# Request, Summary and Outcome are made for every review: frozen msgspec Structs, made in C
# (a NamedTuple's constructor is Python code, some 3,000 instructions each).


class Request(Struct, frozen=True, gc=False):
    """The parts of an AdmissionRequest the webhook uses."""

    uid: str
    group: str
    kind: str
    operation: str
    namespace: str
    name: str
    sub_resource: str
    # The objects as sent (the bytes of each, or its value where the body was read in its
    # generic form); None where the request has none (or not an object).
    object: view.Source | None
    old_object: view.Source | None


class Summary(Struct, frozen=True, gc=False):
    """What the review line and the metrics read of a decision (`summary`)."""

    allowed: bool
    patch_operations: int
    # The rules that refused, each once, sorted (none when allowed).
    rules: tuple[str, ...]
    # Every violation found, with the mode that applied it: enforce (refused), warn, dry-run.
    violations: tuple[tuple[str, str], ...]
    # "rule:mode" of each rule that would refuse but was not enforced, sorted.
    would_refuse: tuple[str, ...]


class Outcome(Struct, frozen=True, gc=False):
    """A review as answered: what was asked, what was decided, the response body, and the
    summary of the decision the review line and the metrics read."""

    request: Request
    decision: Decision
    body: bytes
    summary: Summary


class Kind(Struct, gc=False):
    group: Any = None
    kind: Any = None


class Fields(Struct, gc=False):
    uid: Any = None
    kind: Kind | None = None
    operation: Any = None
    namespace: Any = None
    name: Any = None
    subResource: Any = None
    # Kept as its bytes (`null` where the request has none); msgspec takes Raw in no union.
    oldObject: msgspec.Raw = msgspec.Raw()


class RawRequest(Fields, gc=False):
    object: msgspec.Raw = msgspec.Raw()


class TypedRequest(Fields, gc=False):
    # Decoded in the same pass as the request, as the view reads a Pod's fields
    # (`view.typed_object`, which any kind decodes as).
    object: structs.PodObject | None = None


class RawReview(Struct, gc=False):
    apiVersion: Any = None
    kind: Any = None
    request: RawRequest | None = None


class TypedReview(Struct, gc=False):
    apiVersion: Any = None
    kind: Any = None
    request: TypedRequest | None = None
