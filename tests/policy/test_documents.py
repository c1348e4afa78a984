"""The one reader of YAML and JSON documents (`webhook.policy.documents`): JSON (one value or
several one after another), YAML as PyYAML's safe loader reads it, and one set of one-line
words for what makes a file unusable, the same from every reader: the commands' files, the
policy files as `policy check` and the server read them, the workload-kinds file."""

from __future__ import annotations

import datetime
import json
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.kube import REPO
from webhook.errors import InputError, PolicyError
from webhook.policy import documents, kinds, policies
from webhook.server.reload import PolicyWatch
from webhook.tools import checking, manifests

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}
POD_B = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}}


def safe_load_all(text: str) -> Any:
    """What PyYAML's safe loader reads, or "error"."""
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return "error"


def load(text: str) -> Any:
    """What the reader reads, or "error"."""
    try:
        return documents.load(text, "t")
    except InputError:
        return "error"


def one_error(text: str, source: str = "in.yaml") -> str:
    with pytest.raises(InputError) as caught:
        documents.load(text, source)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- YAML


@pytest.mark.parametrize(
    "text",
    [
        "",
        "---\n---\n",
        "a: yes\nb: No\nc: ~\nd: null\ne: 1.5\nf: .inf\ng: 0x1F\nh: 017\ni: 1_000\nj: '1'\n"
        'k: "true"\nl: 2026-11-01T10:00:00Z\nm: ! 12\nn: 2026-11-01\n',
        "- a\n- [1, 2, {x: y}]\n- {}\n- []\n- |\n  multi\n  line\n",
        "---\na: 1\n...\n---\n- 2\n",
        "{a: 1, b: [x, y]}\n",
        # JSON documents between YAML's separators are YAML.
        '{"a": 1}\n---\n{"b": 2}\n',
        '"apiVersion": v1\n"kind": Pod\n',
        '{"a": 1} # a comment\n',
        # What kubectl never writes goes to the loader itself.
        "a: &x {b: 1}\nc: *x\nd:\n  <<: *x\n  e: 2\n",
        "a: !!str 1\nb: !!binary aGk=\n",
        "? a\n: 1\n? {b: 2}\n: 3\n",
        "a: *nowhere\n",
        "a: [1, 2\n",
        "a: 1\n b: 2\n",
    ],
)
def test_yaml_reads_as_the_safe_loader_reads_it(text: str) -> None:
    assert load(text) == safe_load_all(text)


def test_a_date_that_is_none_is_a_string_where_the_safe_loader_fails() -> None:
    text = "a: 2026-13-45\nb: 2026-11-01\n"
    with pytest.raises(ValueError, match="month must be in"):
        yaml.safe_load(text)
    assert load(text) == [{"a": "2026-13-45", "b": datetime.date(2026, 11, 1)}]
    # The same where an alias sends the text to the loader itself.
    assert load("a: &x 2026-13-45\nb: *x\n") == [{"a": "2026-13-45", "b": "2026-13-45"}]


def test_a_yaml_error_names_the_line_and_column_and_the_problem() -> None:
    assert one_error("kind: Pod\nspec: [\n") == (
        "in.yaml: not valid YAML or JSON at line 3, column 1: expected the node content,"
        " but found '<stream end>'"
    )
    assert one_error("{items: [", "nodes.json") == (
        "nodes.json: not valid YAML or JSON at line 1, column 10: expected the node content,"
        " but found '<stream end>'"
    )
    assert one_error("a: *nowhere\n") == (
        "in.yaml: not valid YAML or JSON at line 1, column 4: found undefined alias 'nowhere'"
    )


@pytest.mark.parametrize("text", ["a: !!int abc\n", "a: !!bool maybe\n", "a: !!timestamp x\n"])
def test_a_value_its_tag_does_not_take_is_one_line_not_a_traceback(text: str) -> None:
    assert one_error(text).startswith(
        "in.yaml: not valid YAML: a value its tag does not take (such as !!int abc)"
    )


# --------------------------------------------------------------------------- JSON


def test_json_is_one_value() -> None:
    assert documents.load(json.dumps(POD), "t") == [POD]
    assert documents.load("[1, 2]", "t") == [[1, 2]]


def test_json_values_one_after_another_are_documents() -> None:
    listing = {"kind": "List", "items": [POD]}
    stream = f"{json.dumps(POD, indent=2)}\n{json.dumps(POD_B)}{json.dumps(listing)}\n\n"
    assert documents.load(stream, "t") == [POD, POD_B, listing]
    assert documents.load("[1]\t[2]", "t") == [[1], [2]]
    # What `jq -c '.items[]'` prints.
    assert documents.load(json.dumps(POD) + "\n" + json.dumps(POD_B) + "\n", "t") == [POD, POD_B]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Where the broken document is, not where YAML (which wants `---`) stops.
        (
            json.dumps(POD) + '\n{"kind": "Pod",\n',
            "in.yaml: not valid JSON at line 3, column 1 of document 2: Expecting property name"
            " enclosed in double quotes",
        ),
        (
            f"{json.dumps(POD)}\n{json.dumps(POD_B)}\n"
            '{"kind": "Pod", "metadata": {"name": }}\n',
            "in.yaml: not valid JSON at line 3, column 38 of document 3: Expecting value",
        ),
        (
            f'{json.dumps(POD)}{json.dumps(POD_B)}{{"kind" "Pod"}}',
            "in.yaml: not valid JSON at line 1, column 133 of document 3: Expecting ':' delimiter",
        ),
        # The first of several broken: JSON's word too, YAML would point at the second.
        (
            '{"kind": tru}\n' + json.dumps(POD),
            "in.yaml: not valid JSON at line 1, column 10 of document 1: Expecting value",
        ),
        ("[1]\n[NaN]", "in.yaml: not valid JSON in document 2 (line 2): NaN is not JSON"),
        # YAML documents: the line, and the document once there are several.
        (
            "kind: Pod\n---\nkind: Pod\nspec: [\n",
            "in.yaml: not valid YAML or JSON at line 5, column 1 of document 2: expected the node"
            " content, but found '<stream end>'",
        ),
        (
            json.dumps(POD) + "\nkind: Pod\n",
            "in.yaml: not valid YAML or JSON at line 2, column 1 of document 2: expected '<document"
            " start>', but found '<block mapping start>'",
        ),
    ],
)
def test_a_broken_document_in_a_stream_is_one_line_naming_it(text: str, expected: str) -> None:
    assert one_error(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,
        json.dumps(POD) + "\n" + "[" * 100_000 + "]" * 100_000,
        "a: " + "[" * 100_000,
    ],
    ids=["json", "json-stream", "yaml"],
)
def test_values_nested_too_deep_are_one_line(text: str) -> None:
    assert (
        one_error(text) == "in.yaml: values nested deeper than can be read (no Kubernetes"
        " object is)"
    )


def test_json_is_read_as_json_where_yaml_would_differ() -> None:
    # An escaped surrogate pair is one character in JSON, two broken ones in YAML.
    assert documents.load('{"a": "\\ud83d\\ude00"}', "t") == [{"a": "\U0001f600"}]


def test_what_json_does_not_have_is_read_as_yaml() -> None:
    # The standard library would read NaN and Infinity; JSON has neither, YAML has strings.
    assert documents.load("[NaN, Infinity]", "t") == [["NaN", "Infinity"]]


# --------------------------------------------------------------------------- any value

keys = st.text(string.ascii_letters + string.digits + "-_./ :#'\"", max_size=12)
scalars = st.one_of(
    # Kubernetes' integers are 64-bit at most; orjson reads larger ones as floats.
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=20,
)
styles = st.sampled_from(["json", "json-stream", "yaml-block", "yaml-flow"])


@pytest.mark.slow  # 300 hypothesis examples, four styles each
@settings(max_examples=300, deadline=None)
@given(docs=st.lists(values, min_size=1, max_size=3), style=styles)
def test_every_value_reads_back_as_the_safe_loader_reads_it(docs: list[Any], style: str) -> None:
    if style == "json":
        text = json.dumps(docs[0])
        docs = docs[:1]
    elif style == "json-stream":
        docs = [d for d in docs if isinstance(d, dict | list)] or [{}]
        text = "\n".join(json.dumps(d) for d in docs)
    else:
        text = yaml.safe_dump_all(docs, default_flow_style=style == "yaml-flow")
    assert documents.load(text, "t") == docs
    if style.startswith("yaml"):
        assert documents.load(text, "t") == list(yaml.safe_load_all(text))

# --------------------------------------------------------------------------- aliases


def test_yaml_whose_aliases_stand_for_too_many_values_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """An alias of an alias of ... doubles at each step: a few hundred bytes that would be
    written out as gigabytes of JSON. A few anchors, as people write them, are read."""
    lines = ['data0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"data{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 8)]
    bomb = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n" + "\n".join(lines) + "\n"
    with pytest.raises(InputError, match="stand for more than 1,000,000 values"):
        documents.load(bomb, "bomb.yaml")
    anchors = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
        "  - &c {name: a, image: x, env: [{name: A, value: b}]}\n  - *c\n"
    )
    assert len(documents.load(anchors, "pod.yaml")[0]["spec"]["containers"]) == 2


def test_empty_documents_are_none_and_a_file_of_comments_holds_none() -> None:
    assert documents.load("", "t") == []
    assert documents.load("# nothing yet\n", "t") == []
    assert documents.load("---\n---\na: 1\n", "t") == [None, {"a": 1}]


# --------------------------------------------------------------------------- files


def test_the_text_of_a_file_is_utf8_without_its_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_bytes(b"\xef\xbb\xbfname: \xc3\xa9t\xc3\xa9\r\n")
    assert documents.read_file(path) == "name: \u00e9t\u00e9\r\n"
    assert documents.load(documents.read_file(path), str(path)) == [{"name": "\u00e9t\u00e9"}]


# A regular file whose read fails, even for root (whom permissions would not stop).
_UNREADABLE = Path("/proc/self/mem")


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (None, "no such file"),
        ("directory", "is a directory, not a file"),
        ("unreadable", "cannot be read: Input/output error"),
        (b"\xff\xfe\x00", "is not UTF-8 text"),
        (b"kind: Pod\nmetadata: {name: \xe9t\xe9}\n", "is not UTF-8 text"),  # Latin-1
    ],
)
def test_a_file_that_cannot_be_read_is_one_line(
    tmp_path: Path, setup: bytes | str | None, expected: str
) -> None:
    path = tmp_path / "dump.json"
    if setup == "directory":
        path.mkdir()
    elif setup == "unreadable":
        if not _UNREADABLE.is_file():
            pytest.skip("needs Linux /proc")
        path.symlink_to(_UNREADABLE)
    elif isinstance(setup, bytes):
        path.write_bytes(setup)
    with pytest.raises(InputError) as caught:
        documents.read_file(path)
    assert str(caught.value) == f"{path}: {expected}"


# --------------------------------------------------------------------------- every reader

_BOMB = (
    "data0: &a0 [x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"data{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 8))
)

# Each mistake, and the words every reader says of it after "FILE: " (WHAT: what the reader
# looks for in the file).
MISTAKES: dict[str, tuple[bytes | None, str]] = {
    "not YAML": (
        b"kind: Pod\nspec: [\n",
        "not valid YAML or JSON at line 3, column 1: expected the node content, but found"
        " '<stream end>'",
    ),
    "second document not YAML": (
        b"a: 1\n---\nb: [\n",
        "not valid YAML or JSON at line 4, column 1 of document 2: expected the node content,"
        " but found '<stream end>'",
    ),
    "JSON stream broken": (
        b'{"a": 1}\n{"b": }\n',
        "not valid JSON at line 2, column 7 of document 2: Expecting value",
    ),
    "value its tag does not take": (
        b"a: !!int abc\n",
        "not valid YAML: a value its tag does not take (such as !!int abc): invalid literal for"
        " int() with base 10: 'abc'",
    ),
    "nested too deeply": (
        b"a: " + b"[" * 5_000,
        "values nested deeper than can be read (no Kubernetes object is)",
    ),
    "aliases of aliases": (
        _BOMB.encode(),
        "its YAML aliases make it stand for more than 1,000,000 values; write the values out, or"
        " fewer aliases of aliases",
    ),
    "not UTF-8": (b"a: \xe9t\xe9\n", "is not UTF-8 text"),
    "unreadable": (None, "cannot be read: Input/output error"),
    "holds no document": (b"# nothing yet\n---\n", "holds no WHAT"),
}


def _problem(error: InputError | PolicyError) -> str:
    (problem,) = error.problems if isinstance(error, PolicyError) else [str(error)]
    return problem


def _command(path: Path) -> str:  # mutate -f, audit -f, discover -f, policy check --nodes
    with pytest.raises(InputError) as caught:
        manifests.read([str(path)])
    return _problem(caught.value)


def _policy_directory(path: Path) -> str:  # serve at start, render, mutate --policies
    with pytest.raises(PolicyError) as caught:
        policies.load_directory(path.parent)
    return _problem(caught.value)


def _policy_check(path: Path) -> str:
    report = checking.check_directory(path.parent)
    (problem,) = report.errors + report.unreadable
    return problem


def _server_reload(path: Path) -> str:
    (problem,) = PolicyWatch(path.parent).problems.values()
    return problem.removesuffix("; its policies are not in force")


def _workload_kinds(path: Path) -> str:  # --workload-kinds
    with pytest.raises(PolicyError) as caught:
        kinds.load(path)
    return _problem(caught.value)


READERS: dict[str, tuple[Callable[[Path], str], str]] = {
    "a command's file": (_command, "Kubernetes object"),
    "a policy directory": (_policy_directory, "policy document"),
    "policy check": (_policy_check, "policy document"),
    "the server's reload": (_server_reload, "policy document"),
    "the workload-kinds file": (_workload_kinds, "WorkloadKinds document"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_says_one_mistake_in_the_same_words(
    tmp_path: Path, reader: str, mistake: str
) -> None:
    data, words = MISTAKES[mistake]
    path = tmp_path / "file.yaml"
    if data is None:
        if not _UNREADABLE.is_file():
            pytest.skip("needs Linux /proc")
        path.symlink_to(_UNREADABLE)
    else:
        path.write_bytes(data)
    read, what = READERS[reader]
    assert read(path) == f"{path}: {words.replace('WHAT', what)}"


def test_a_policy_file_is_read_as_a_command_reads_its_files() -> None:
    """Also where PyYAML's safe loader failed (a date that is none) and as JSON objects one
    after another."""
    shipped = (REPO / "policies" / "default.yaml").read_text()
    text = shipped.replace("  name: default\n", "  name: default\n  reviewed: 2026-13-45\n")
    with pytest.raises(ValueError, match="month must be in"):
        yaml.safe_load(text)
    (policy,), problems = policies.parse_documents(text, "default.yaml")
    assert (policy.name, problems) == ("default", [])
    doc = yaml.safe_load(shipped)
    stream = json.dumps(doc) + json.dumps({**doc, "metadata": {"name": "other"}})
    found, problems = policies.parse_documents(stream, "p.json")
    assert ([p.name for p in found], problems) == (["default", "other"], [])
