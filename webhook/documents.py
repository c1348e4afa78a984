"""Reading the Kubernetes objects a user hands to the CLI: YAML or JSON, several documents."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from webhook.errors import InputError


def read_text(path: str) -> tuple[str, str]:
    """The text of `path` ("-" for standard input) and a name for messages."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8"), path
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a file") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: is not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc.strerror}") from None


def parse(text: str, source: str) -> list[dict[str, Any]]:
    """Every object in `text` (YAML or JSON; `kind: List` is expanded); InputError if unusable."""
    try:
        # JSON is YAML; one parser keeps line numbers in the errors for both.
        raw = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(exc, "problem", None) or "cannot be parsed"
        raise InputError(f"{source}: not valid YAML or JSON{where}: {reason}") from None
    objects: list[dict[str, Any]] = []
    for number, doc in enumerate(raw, 1):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InputError(
                f"{source}: document {number} is a {type(doc).__name__}, not a Kubernetes object"
            )
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            for i, item in enumerate(doc["items"]):
                if not isinstance(item, dict):
                    raise InputError(f"{source}: document {number}, item {i} is not an object")
                objects.append(item)
            continue
        objects.append(doc)
    if not objects:
        raise InputError(f"{source}: holds no Kubernetes object")
    return objects


def describe(obj: dict[str, Any]) -> str:
    """`Kind/name` for messages, as kubectl prints it."""
    kind = obj.get("kind") or "object"
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name") or meta.get("generateName") or "(unnamed)"
    return f"{kind}/{name}"
