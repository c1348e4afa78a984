"""Reading YAML and JSON documents: the one reader of the policy files, the workload-kinds
file and every file a command reads (manifests, dumps, lists of nodes), and so one set of
words for what makes a file unusable.

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
- An empty document is None: what a caller looks for in the documents (objects, Lists, a
  policy) is its own.

What cannot be used is an InputError of one line, in these words wherever it is read:

    FILE: no such file | is a directory, not a file | cannot be read: REASON
    FILE: is not UTF-8 text
    FILE: not valid YAML or JSON at line L, column C[ of document N]: REASON
    FILE: not valid JSON at line L, column C of document N: REASON     (a JSON stream)
    FILE: not valid JSON in document N (line L): NaN is not JSON       (a JSON stream)
    FILE: not valid YAML: a value its tag does not take (such as !!int abc): REASON
    FILE: values nested deeper than can be read (no Kubernetes object is)
    FILE: its YAML aliases make it stand for more than 1,000,000 values; ...
    FILE: holds no WHAT                                                 (`holds_none`)

A YAML error is in the words of PyYAML's own (pure-Python) parser, a JSON stream's in those of
Python's JSON decoder; the document is named in a file of several. Nesting is bounded by
orjson's 1,024 levels, libyaml's 1,000 and Python's recursion limit: no Kubernetes object
comes near.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from webhook.errors import InputError


def why_unreadable(exc: OSError) -> str:
    """Why a file cannot be read, as the messages say it (after `FILE: `)."""
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "is a directory, not a file"
    return f"cannot be read: {exc.strerror or exc}"


def read_bytes(path: str | Path) -> bytes:
    """The bytes of the file at `path`; InputError when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: {why_unreadable(exc)}") from None


def decode(data: bytes, source: str) -> str:
    """`data` as text: UTF-8, without the byte-order mark some Windows editors put first
    (kubectl drops it too); InputError when it is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{source}: is not UTF-8 text") from None


def read_file(path: str | Path) -> str:
    """The text of the file at `path`; InputError when it cannot be read or is not UTF-8."""
    return decode(read_bytes(path), str(path))


def holds_none(source: str, what: str) -> str:
    """The words for a file (or files) in which the caller finds none of `what` it looks for:
    "a.yaml: holds no policy document"."""
    return f"{source}: holds no {what}"


def load(text: str, source: str) -> list[Any]:
    """Every document in `text` (None for an empty one), as values; InputError when it is
    neither JSON nor YAML."""
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
    except yaml.YAMLError as exc:
        # libyaml stops at 1,000 levels, where the pure-Python parser, which takes time
        # growing with the square of the depth, would stop later on Python's recursion limit.
        if getattr(exc, "problem", None) == _LIBYAML_TOO_DEEP:
            raise InputError(_too_deep(source)) from None
    except _MISTAGGED:
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


_LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"


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
