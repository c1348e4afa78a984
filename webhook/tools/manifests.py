"""The Kubernetes objects a user hands to the commands (`mutate`, `audit`, `explain`,
`discover`, `policy check --nodes`): files or standard input, read by the one reader of
documents (`webhook.policy.documents`, whose words say what makes a file unusable).

What is the commands' own: a document whose `kind` ends in `List` (`List`, `PodList`, ...)
and whose `items` is a list stands for its items (those of a `PodList` are Pods of its
apiVersion: the API leaves that out); any other document must be an object; an empty one is
skipped.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from webhook.engine import view
from webhook.errors import InputError
from webhook.policy import documents

STDIN = "-"
OBJECT = "Kubernetes object"


def read_text(path: str) -> tuple[str, str]:
    """The text of `path` ("-" for standard input) and a name for messages."""
    if path != STDIN:
        return documents.read_file(path), path
    binary = getattr(sys.stdin, "buffer", None)
    if binary is None:  # a text stream with no bytes under it (tests, embedding)
        return sys.stdin.read().removeprefix("\ufeff"), "<stdin>"
    return documents.decode(binary.read(), "<stdin>"), "<stdin>"


def read(paths: Sequence[str]) -> list[dict[str, Any]]:
    """Every object in the files, in order. A file with none is no error (a cluster may have
    no pods), but files that together hold none are."""
    objects: list[dict[str, Any]] = []
    sources: list[str] = []
    for path in paths:
        text, source = read_text(path)
        objects += _objects(documents.load(text, source), source)
        sources.append(source)
    if not objects:
        raise InputError(documents.holds_none(", ".join(sources), OBJECT))
    return objects


def parse(text: str, source: str) -> list[dict[str, Any]]:
    """Every object in `text`; InputError if unusable or if there is none."""
    objects = _objects(documents.load(text, source), source)
    if not objects:
        raise InputError(documents.holds_none(source, OBJECT))
    return objects


def describe(obj: dict[str, Any]) -> str:
    """`Kind/name` for messages, as kubectl prints it."""
    kind = obj.get("kind") or "object"
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name") or meta.get("generateName") or "(unnamed)"
    return f"{kind}/{name}"


def _objects(docs: list[Any], source: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for number, doc in enumerate(docs, 1):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InputError(
                f"{source}: document {number} is {view.type_name(doc)}, not a Kubernetes object"
            )
        kind, items = doc.get("kind"), doc.get("items")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            of = _of_list(kind, doc.get("apiVersion"))
            for i, item in enumerate(items):
                if not isinstance(item, dict):
                    raise InputError(f"{source}: document {number}, item {i} is not an object")
                objects.append(item if "kind" in item or not of else {**of, **item})
            continue
        objects.append(doc)
    return objects


def _of_list(kind: str, api_version: object) -> dict[str, Any]:
    """What the items of a list of `kind` leave out: the API's own lists (a PodList, from
    client-go or curl) give their items no kind and no apiVersion; kubectl's List does."""
    if kind == "List":
        return {}
    of: dict[str, Any] = {"kind": kind.removesuffix("List")}
    if isinstance(api_version, str):
        of = {"apiVersion": api_version, **of}
    return of
