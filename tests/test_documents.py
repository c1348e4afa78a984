"""The one reader of Kubernetes objects from files (`webhook.documents`), which `mutate`,
`audit`, `discover` and `policy check --nodes` share: JSON (one value or several one after
another), YAML as PyYAML's safe loader reads it, `List` kinds expanded, one line per error."""

from __future__ import annotations

import datetime
import io
import json
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook import documents
from webhook.errors import InputError

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
        documents.parse(text, source)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- YAML


@pytest.mark.parametrize("text", [
    "",
    "---\n---\n",
    "a: yes\nb: No\nc: ~\nd: null\ne: 1.5\nf: .inf\ng: 0x1F\nh: 017\ni: 1_000\nj: '1'\n"
    "k: \"true\"\nl: 2026-11-01T10:00:00Z\nm: ! 12\nn: 2026-11-01\n",
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
])
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
        " but found '<stream end>'")
    assert one_error("{items: [", "nodes.json") == (
        "nodes.json: not valid YAML or JSON at line 1, column 10: expected the node content,"
        " but found '<stream end>'")
    assert one_error("a: *nowhere\n") == (
        "in.yaml: not valid YAML or JSON at line 1, column 4: found undefined alias 'nowhere'")


@pytest.mark.parametrize("text", ["a: !!int abc\n", "a: !!bool maybe\n", "a: !!timestamp x\n"])
def test_a_value_its_tag_does_not_take_is_one_line_not_a_traceback(text: str) -> None:
    assert one_error(text).startswith(
        "in.yaml: not valid YAML: a value its tag does not take (such as !!int abc)")


# --------------------------------------------------------------------------- JSON


def test_json_is_one_value() -> None:
    assert documents.parse(json.dumps(POD), "t") == [POD]
    assert documents.load("[1, 2]", "t") == [[1, 2]]


def test_json_values_one_after_another_are_documents() -> None:
    listing = {"kind": "List", "items": [POD]}
    stream = f"{json.dumps(POD, indent=2)}\n{json.dumps(POD_B)}{json.dumps(listing)}\n\n"
    assert documents.load(stream, "t") == [POD, POD_B, listing]
    assert documents.parse(stream, "t") == [POD, POD_B, POD]
    assert documents.load("[1]\t[2]", "t") == [[1], [2]]
    # What `jq -c '.items[]'` prints.
    assert documents.parse(json.dumps(POD) + "\n" + json.dumps(POD_B) + "\n", "t") == [
        POD, POD_B]


def test_a_broken_json_stream_is_an_error_in_one_line() -> None:
    message = one_error(json.dumps(POD) + '\n{"kind": "Pod",\n')
    assert message.startswith("in.yaml: not valid YAML or JSON at line 2, column 1: ")


def test_json_is_read_as_json_where_yaml_would_differ() -> None:
    # An escaped surrogate pair is one character in JSON, two broken ones in YAML.
    assert documents.load('{"a": "\\ud83d\\ude00"}', "t") == [{"a": "\U0001f600"}]


def test_what_json_does_not_have_is_read_as_yaml() -> None:
    # The standard library would read NaN and Infinity; JSON has neither, YAML has strings.
    assert documents.load("[NaN, Infinity]", "t") == [["NaN", "Infinity"]]
    with pytest.raises(InputError, match="not valid YAML or JSON at line 2, column 1"):
        documents.load("[1]\n[NaN]", "t")


# --------------------------------------------------------------------------- objects


@pytest.mark.parametrize("kind", ["List", "PodList", "NamespaceList"])
def test_a_list_kind_stands_for_its_items(kind: str) -> None:
    text = json.dumps({"apiVersion": "v1", "kind": kind, "items": [POD, POD_B]})
    assert documents.parse(text, "t") == [POD, POD_B]


def test_the_items_of_an_api_list_are_of_its_kind_and_api_version() -> None:
    # What the API answers (client-go, curl): the items carry no kind and no apiVersion.
    bare = [{"metadata": {"name": "a"}}, {"metadata": {"name": "d"}, "kind": "Deployment"}]
    text = json.dumps({"apiVersion": "v1", "kind": "PodList", "items": bare})
    assert documents.parse(text, "t") == [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}},
        {"metadata": {"name": "d"}, "kind": "Deployment"},
    ]
    # kubectl's List says nothing of its items: they are as they are.
    assert documents.parse(json.dumps({"kind": "List", "items": bare[:1]}), "t") == bare[:1]


def test_objects_of_every_document_in_order() -> None:
    text = yaml.safe_dump_all([POD, None, {"kind": "List", "items": [POD_B]}, POD])
    assert documents.parse(text, "t") == [POD, POD_B, POD]


def test_a_list_kind_without_a_list_of_items_is_an_object() -> None:
    weird = {"kind": "List", "items": {"a": 1}}
    assert documents.parse(json.dumps(weird), "t") == [weird]
    whitelist = {"kind": "AllowList", "spec": {"names": ["a"]}}
    assert documents.parse(json.dumps(whitelist), "t") == [whitelist]


@pytest.mark.parametrize(("text", "expected"), [
    ("- just\n- strings\n", "in.yaml: document 1 is a list, not a Kubernetes object"),
    ("---\nkind: Pod\n---\nhello\n", "in.yaml: document 2 is a string, not a Kubernetes object"),
    ("42", "in.yaml: document 1 is a number, not a Kubernetes object"),
    ('{"kind": "List", "items": [{}, 3]}', "in.yaml: document 1, item 1 is not an object"),
    ("", "in.yaml: holds no Kubernetes object"),
    ('{"kind": "List", "items": []}', "in.yaml: holds no Kubernetes object"),
])
def test_what_is_not_an_object_is_one_line(text: str, expected: str) -> None:
    assert one_error(text) == expected


# --------------------------------------------------------------------------- files


def test_files_are_read_in_order_and_one_without_objects_is_no_error(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"kind": "List", "items": [POD]}))
    (tmp_path / "none.json").write_text(json.dumps({"kind": "PodList", "items": []}))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(POD_B))
    paths = [str(tmp_path / n) for n in ("b.yaml", "none.json", "a.json")]
    assert documents.read(paths) == [POD_B, POD]


def test_files_that_together_hold_no_object_are_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"kind": "List", "items": []}))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(InputError) as caught:
        documents.read([str(tmp_path / "a.json"), "-"])
    assert str(caught.value) == f"{tmp_path / 'a.json'}, <stdin>: holds no Kubernetes object"


@pytest.mark.parametrize(("setup", "expected"), [
    (None, "no such file"),
    (b"\xff\xfe\x00", "is not UTF-8 text"),
    ("directory", "is a directory, not a file"),
])
def test_a_file_that_cannot_be_read_is_one_line(
    tmp_path: Path, setup: bytes | str | None, expected: str
) -> None:
    path = tmp_path / "dump.json"
    if setup == "directory":
        path.mkdir()
    elif isinstance(setup, bytes):
        path.write_bytes(setup)
    with pytest.raises(InputError) as caught:
        documents.read([str(path)])
    assert str(caught.value) == f"{path}: {expected}"


# --------------------------------------------------------------------------- any value

keys = st.text(string.ascii_letters + string.digits + "-_./ :#'\"", max_size=12)
scalars = st.one_of(
    # Kubernetes' integers are 64-bit at most; orjson reads larger ones as floats.
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
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
