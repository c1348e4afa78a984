"""Reading the Kubernetes objects a user hands to the CLI: the one reader of `mutate`,
`audit`, `discover` and `policy check --nodes`.

The rules:

- The text is UTF-8; a byte-order mark before it is dropped, as kubectl's `-f` drops it.
- JSON is one value (`kubectl get ... -o json`) or several one after another, with or without
  blanks between (`jq` output, `cat a.json b.json`, or `kubectl get ... -o json >> dump`), as
  kubectl's `-f` reads a JSON stream. orjson reads kubectl's dump of ten thousand pods in a
  fraction of a second.
- Anything else is YAML, one or more documents (JSON is YAML: a flow mapping such as
  `{a: 1}` is read here), with the values PyYAML's safe loader gives (YAML 1.1: `yes` is
  true, `017` is 15, `2026-11-01` a date), built ten times as fast (`_build`). One exception:
  a plain scalar shaped like a date that is none (`2026-13-45`) is a string, as kubectl reads
  it, where the safe loader fails.
- An empty document is skipped. A document whose `kind` ends in `List` (`List`, `PodList`,
  ...) and whose `items` is a list stands for its items (those of a `PodList` are Pods of its
  apiVersion: the API leaves that out); any other document must be an object.
- What cannot be used is an InputError of one line naming the file, the line and column and,
  in a file of several documents, the document: for a JSON stream in the words of Python's
  JSON decoder, for YAML in those of PyYAML's own (pure-Python) parser. Values nested deeper
  than Python can follow are refused in one line too (orjson stops at 1,024 levels; no
  Kubernetes object comes near).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from webhook.engine import view
from webhook.errors import InputError

STDIN = "-"


def read_text(path: str) -> tuple[str, str]:
    """The text of `path` ("-" for standard input) and a name for messages."""
    if path == STDIN:
        binary = getattr(sys.stdin, "buffer", None)
        if binary is None:  # a text stream with no bytes under it (tests, embedding)
            return sys.stdin.read().removeprefix(_BOM), "<stdin>"
        data, source = binary.read(), "<stdin>"
    else:
        source = path
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory, not a file") from None
        except OSError as exc:
            raise InputError(f"{path}: cannot be read: {exc.strerror}") from None
    return _decode(data, source), source


_BOM = "\ufeff"


def _decode(data: bytes, source: str) -> str:
    """UTF-8, without the byte-order mark some Windows editors put first (kubectl drops it
    too)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{source}: is not UTF-8 text") from None


def read(paths: Sequence[str]) -> list[dict[str, Any]]:
    """Every object in the files, in order. A file with none is no error (a cluster may have
    no pods), but files that together hold none are."""
    objects: list[dict[str, Any]] = []
    sources: list[str] = []
    for path in paths:
        text, source = read_text(path)
        objects += _objects(load(text, source), source)
        sources.append(source)
    if not objects:
        raise InputError(f"{', '.join(sources)}: holds no Kubernetes object")
    return objects


def parse(text: str, source: str) -> list[dict[str, Any]]:
    """Every object in `text` (see the module's rules); InputError if unusable or if there
    is none."""
    objects = _objects(load(text, source), source)
    if not objects:
        raise InputError(f"{source}: holds no Kubernetes object")
    return objects


def load(text: str, source: str) -> list[Any]:
    """Every document in `text`, as values; InputError when it is neither JSON nor YAML."""
    try:
        return [orjson.loads(text)]
    except orjson.JSONDecodeError:
        pass
    values, broken = _json_stream(text, source)
    if broken is None:
        return values
    try:
        try:
            return _build(text)
        except _Unusual:
            return _bounded(list(yaml.load_all(text, Loader=_FastLoader)), source)
    except (yaml.YAMLError, *_MISTAGGED):
        pass
    except RecursionError:
        raise InputError(_too_deep(source)) from None
    # libyaml's messages are terser and its marks less exact (`{items: [` is "line 2,
    # column 1" to it, "line 1, column 10" here); the pure-Python parser reads the text
    # again to say where and what. The rare text only libyaml refuses is read on from here.
    try:
        return _bounded(list(yaml.load_all(text, Loader=_Loader)), source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        reason = getattr(exc, "problem", None) or "cannot be parsed"
        # JSON documents one after another, one of them broken: YAML stops where the second
        # begins (it wants `---`), which is not where the fault is; JSON's decoder says that.
        if broken.reason and (values or reason.startswith("expected '<document start>'")):
            raise InputError(f"{source}: not valid JSON{broken.where}: {broken.reason}") from None
        where = ""
        if mark:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
            number = _yaml_document(text, mark.index)
            where += f" of document {number}" if number > 1 else ""
        raise InputError(f"{source}: not valid YAML or JSON{where}: {reason}") from None
    except RecursionError:
        raise InputError(_too_deep(source)) from None
    except _MISTAGGED as exc:
        detail = f": {exc}" if isinstance(exc, ValueError) else ""
        raise InputError(
            f"{source}: not valid YAML: a value its tag does not take (such as !!int abc)" + detail
        ) from None


# Values a YAML text may stand for once its aliases are followed: a few anchors in a
# hand-written manifest stand for little more than they hold, while an alias of an alias of
# ... doubles at each step (a file of a few hundred bytes that stands for billions of values,
# which printing it as JSON would write out).
MAX_EXPANDED = 1_000_000


def _bounded(docs: list[Any], source: str) -> list[Any]:
    """`docs` as loaded, or InputError when its aliases make it stand for more than
    MAX_EXPANDED values (counted once per shared value: the count stops at the bound)."""
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, dict | list):
            return 1
        known = sizes.get(id(value))
        if known is not None:
            return known
        sizes[id(value)] = MAX_EXPANDED + 1  # a value that holds itself is too large
        items = value.values() if isinstance(value, dict) else value
        total = 1
        for item in items:
            total += size(item)
            if total > MAX_EXPANDED:
                break
        sizes[id(value)] = total
        return total

    total = 0
    for doc in docs:
        total += size(doc)
        if total > MAX_EXPANDED:
            raise InputError(
                f"{source}: its YAML aliases make it stand for more than {MAX_EXPANDED:,}"
                " values; write the values out, or fewer aliases of aliases"
            )
    return docs


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


# --------------------------------------------------------------------------- JSON


def _not_json(word: str) -> Any:
    raise ValueError(f"{word} is not JSON")


# Only JSON: the standard library's own reads NaN and Infinity, which are YAML's strings.
_JSON = json.JSONDecoder(parse_constant=_not_json)
# What JSON allows between values.
_NOT_BLANK = re.compile(r"[^ \t\n\r]")


def _after_blanks(text: str, position: int) -> int:
    found = _NOT_BLANK.search(text, position)
    return found.start() if found else len(text)


@dataclass(frozen=True)
class _Stop:
    """Where and why a JSON stream stopped: `reason` is empty when what follows the last
    value is no JSON at all (YAML's to read, or to refuse)."""

    where: str = ""
    reason: str = ""


def _json_stream(text: str, source: str) -> tuple[list[Any], _Stop | None]:
    """The values of JSON objects or arrays one after another, and None; or the values read
    before the stream stopped, and where and why it stopped (then the text is YAML's to read,
    or to refuse).

    Only objects and arrays: after `"key"` or `12` may come YAML (`"key": value`), after a
    closing brace only another JSON value or the end, which YAML cannot read either.
    """
    values: list[Any] = []
    position = _after_blanks(text, 0)
    while position < len(text):
        if text[position] not in "{[":
            return values, _Stop()
        try:
            value, position = _JSON.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            where = f" at line {exc.lineno}, column {exc.colno} of document {len(values) + 1}"
            return values, _Stop(where, exc.msg)
        except RecursionError:
            raise InputError(_too_deep(source)) from None
        except ValueError as exc:  # `_not_json`
            line = text.count("\n", 0, position) + 1
            return values, _Stop(f" in document {len(values) + 1} (line {line})", str(exc))
        values.append(value)
        position = _after_blanks(text, position)
    return values, (None if values else _Stop())


def _too_deep(source: str) -> str:
    return f"{source}: values nested deeper than can be read (no Kubernetes object is)"


# --------------------------------------------------------------------------- YAML

_TIMESTAMP = "tag:yaml.org,2002:timestamp"
# What PyYAML's safe constructors raise, past their checks, for a value an explicit tag
# does not take: `!!int abc` (ValueError), `!!bool maybe` (KeyError), `!!timestamp x`
# (AttributeError). kubectl never writes such tags.
_MISTAGGED = (ValueError, KeyError, AttributeError)


def _timestamp(loader: yaml.SafeLoader | yaml.CSafeLoader, node: yaml.ScalarNode) -> Any:
    try:
        return loader.construct_yaml_timestamp(node)
    except ValueError:
        # Month 13: the safe loader fails; kubectl (sigs.k8s.io/yaml) reads a string.
        return loader.construct_scalar(node)


class _Loader(yaml.SafeLoader):
    """The safe loader, except for dates that are none (`_timestamp`)."""


_Loader.add_constructor(_TIMESTAMP, _timestamp)

try:
    # libyaml's parser: the pure-Python one is several times slower.
    from yaml import CSafeLoader as _CSafeLoader
except ImportError:  # PyYAML built without libyaml
    _CSafeLoader = yaml.SafeLoader  # type: ignore[misc, assignment]


class _FastLoader(_CSafeLoader):
    """`_Loader` with libyaml's parser."""


_FastLoader.add_constructor(_TIMESTAMP, _timestamp)

_YAML = "tag:yaml.org,2002:"
# The types of scalar `_build` builds itself (as the safe loader does).
_SCALARS = frozenset(f"{_YAML}{t}" for t in ("null", "bool", "int", "float", "timestamp", "str"))


class _Unusual(Exception):
    """YAML that `_build` leaves to the loader (aliases, merge keys, tags, keys that are
    collections)."""


def _build(text: str) -> list[Any]:
    """Every document of `text`, as `_FastLoader` reads them, built from the parser's events.

    The loader builds a node for every value before it builds the value, which takes close
    to a minute and over a gigabyte for a dump of ten thousand pods; this is ten times as
    fast, and resolves each distinct plain scalar once. What kubectl never writes raises
    _Unusual; YAMLError as the loader raises it.
    """
    constructor = _Loader("")
    # Untyped in PyYAML's stubs.
    resolve: Any = constructor.resolve
    known: dict[str, Any] = {}

    def plain(value: str) -> Any:
        if value in known:
            return known[value]
        tag = resolve(yaml.ScalarNode, value, (True, False))
        if tag not in _SCALARS:
            raise _Unusual(tag)
        built = known[value] = constructor.construct_object(yaml.ScalarNode(tag, value))
        return built

    docs: list[Any] = []
    # The mappings and sequences being built, and for each mapping the key whose value
    # comes next (`_NO_KEY`: a key comes next).
    open_nodes: list[dict[Any, Any] | list[Any]] = []
    keys: list[Any] = []

    def put(value: Any) -> None:
        if not open_nodes:
            docs.append(value)
            return
        node = open_nodes[-1]
        if isinstance(node, list):
            node.append(value)
        elif keys[-1] is _NO_KEY:
            if isinstance(value, dict | list):
                raise _Unusual("a key that is not a scalar")
            keys[-1] = value
        else:
            node[keys[-1]] = value
            keys[-1] = _NO_KEY

    for event in yaml.parse(text, Loader=_FastLoader):
        if isinstance(event, yaml.ScalarEvent):
            if event.tag not in (None, "!"):
                raise _Unusual(event.tag)
            # Plain scalars have a type (a merge key `<<` is a type of its own); quoted
            # ones are strings.
            put(plain(event.value) if event.implicit[0] else event.value)
        elif isinstance(event, yaml.CollectionStartEvent):
            if event.tag not in (None, "!"):
                raise _Unusual(event.tag)
            node: dict[Any, Any] | list[Any] = (
                {} if isinstance(event, yaml.MappingStartEvent) else []
            )
            put(node)
            open_nodes.append(node)
            keys.append(_NO_KEY)
        elif isinstance(event, yaml.CollectionEndEvent):
            open_nodes.pop()
            keys.pop()
        elif isinstance(event, yaml.AliasEvent):
            raise _Unusual("an alias")
    return docs


_NO_KEY = object()


def _yaml_document(text: str, index: int) -> int:
    """Which document of `text` (counting from 1) holds the character at `index`, where
    PyYAML stopped."""
    number, ended = 0, False
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if event.start_mark is not None and event.start_mark.index > index:
                break
            if isinstance(event, yaml.DocumentStartEvent):
                number, ended = number + 1, False
            elif isinstance(event, yaml.DocumentEndEvent):
                ended = True
    except yaml.YAMLError:
        # The parser stopped after a document ended: what it found is a new one's start.
        return number + 1 if ended else max(number, 1)
    return max(number, 1)
