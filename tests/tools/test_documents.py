"""The one reader of Kubernetes objects from files (`webhook.tools.documents`), which `mutate`,
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

from tests.support import nodes as n
from webhook import cli
from webhook.errors import InputError
from webhook.tools import documents

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
    assert documents.parse(json.dumps(POD), "t") == [POD]
    assert documents.load("[1, 2]", "t") == [[1, 2]]


def test_json_values_one_after_another_are_documents() -> None:
    listing = {"kind": "List", "items": [POD]}
    stream = f"{json.dumps(POD, indent=2)}\n{json.dumps(POD_B)}{json.dumps(listing)}\n\n"
    assert documents.load(stream, "t") == [POD, POD_B, listing]
    assert documents.parse(stream, "t") == [POD, POD_B, POD]
    assert documents.load("[1]\t[2]", "t") == [[1], [2]]
    # What `jq -c '.items[]'` prints.
    assert documents.parse(json.dumps(POD) + "\n" + json.dumps(POD_B) + "\n", "t") == [POD, POD_B]


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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- just\n- strings\n", "in.yaml: document 1 is a list, not a Kubernetes object"),
        (
            "---\nkind: Pod\n---\nhello\n",
            "in.yaml: document 2 is a string, not a Kubernetes object",
        ),
        ("42", "in.yaml: document 1 is a number, not a Kubernetes object"),
        ('{"kind": "List", "items": [{}, 3]}', "in.yaml: document 1, item 1 is not an object"),
        ("", "in.yaml: holds no Kubernetes object"),
        ('{"kind": "List", "items": []}', "in.yaml: holds no Kubernetes object"),
    ],
)
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


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (None, "no such file"),
        (b"\xff\xfe\x00", "is not UTF-8 text"),
        (b"kind: Pod\nmetadata: {name: \xe9t\xe9}\n", "is not UTF-8 text"),  # Latin-1
        ("directory", "is a directory, not a file"),
    ],
)
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


# --------------------------------------------------------------------------- every command


def _kubectl_list(*items: dict[str, Any]) -> dict[str, Any]:
    """`kubectl get ... -o json`: a List whose items carry their kind and apiVersion."""
    return {
        "apiVersion": "v1",
        "items": list(items),
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    }


def _api_list(kind: str, api_version: str, *items: dict[str, Any]) -> dict[str, Any]:
    """The API's own list (curl, client-go): its items have no kind and no apiVersion."""
    bare = [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in items]
    return {
        "apiVersion": api_version,
        "kind": f"{kind}List",
        "items": bare,
        "metadata": {"resourceVersion": "48213"},
    }


def _gpu_pod(name: str, env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "nvcr.io/nvidia/cuda:12.4.1-base",
        "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
    }
    if env:
        container["env"] = env
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {"containers": [container]},
        "status": {"phase": "Pending"},
    }


_NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "ml", "labels": {"gpu-share.io/enabled": "true"}},
}
_GOOD = _gpu_pod("good")
_REFUSED = _gpu_pod("refused", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "serve", "namespace": "ml"},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "serve"}},
        "template": {"metadata": {"labels": {"app": "serve"}}, "spec": _GOOD["spec"]},
    },
}


def _json(doc: Any) -> str:
    return json.dumps(doc, indent=4)  # as kubectl indents


def _yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


# Each form holds the same objects: the Namespace, two pods (one refused), the Deployment.
_STREAMS = {
    "one JSON List": _json(_kubectl_list(_NAMESPACE, _GOOD, _REFUSED, _DEPLOYMENT)),
    # kubectl get namespaces -o json > dump; kubectl get pods ... >> dump; ...
    "JSON Lists appended": "\n".join(
        _json(d)
        for d in (
            _kubectl_list(_NAMESPACE),
            _kubectl_list(_GOOD, _REFUSED),
            _kubectl_list(_DEPLOYMENT),
        )
    )
    + "\n",
    # cat a.json b.json, where a.json has no newline at its end.
    "JSON Lists back to back": "".join(
        json.dumps(d)
        for d in (
            _kubectl_list(_NAMESPACE),
            _kubectl_list(_GOOD, _REFUSED),
            _kubectl_list(_DEPLOYMENT),
        )
    ),
    "JSON with blanks between": "\n\n\t "
    + "  \r\n".join(json.dumps(d) for d in (_NAMESPACE, _GOOD, _REFUSED, _DEPLOYMENT))
    + "\n\n",
    "jq -c .items[]": "".join(
        json.dumps(d) + "\n" for d in (_NAMESPACE, _GOOD, _REFUSED, _DEPLOYMENT)
    ),
    "API lists (PodList, DeploymentList)": "\n".join(
        _json(d)
        for d in (
            _api_list("Namespace", "v1", _NAMESPACE),
            _api_list("Pod", "v1", _GOOD, _REFUSED),
            _api_list("Deployment", "apps/v1", _DEPLOYMENT),
        )
    ),
    "one YAML List": _yaml(_kubectl_list(_NAMESPACE, _GOOD, _REFUSED, _DEPLOYMENT)),
    "YAML documents": "---\n"
    + "---\n".join(_yaml(d) for d in (_NAMESPACE, _GOOD, _REFUSED, _DEPLOYMENT))
    + "...\n",
    "YAML Lists and objects mixed": "\n---\n".join(
        [
            _yaml(_kubectl_list(_NAMESPACE)),
            _yaml(_GOOD),
            "# a comment\n",
            _yaml(_kubectl_list(_REFUSED, _DEPLOYMENT)),
        ]
    ),
    "YAML then JSON after ---": _yaml(_kubectl_list(_NAMESPACE, _GOOD))
    + "---\n"
    + _json(_kubectl_list(_REFUSED, _DEPLOYMENT)),
}


@pytest.mark.parametrize("form", list(_STREAMS))
def test_audit_and_mutate_read_every_stream_kubectl_reads(
    form: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "dump"
    path.write_text(_STREAMS[form], encoding="utf-8")
    assert cli.main(["audit", "-f", str(path), "-o", "json"]) == 1  # the refused pod
    report = json.loads(capsys.readouterr().out)
    assert report["totals"]["objects"] == 3
    assert report["totals"]["refused"] == 1
    assert cli.main(["mutate", "-f", str(path), "-l", "gpu-share.io/enabled=true"]) == 1
    err = capsys.readouterr().err
    assert "denied: Pod/refused" in err
    assert "Pod/good" not in err


def _nodes_streams() -> dict[str, str]:
    one, two = n.node("gpu-1", n.T4_TS), n.node("gpu-2", n.T4_MPS)
    return {
        "one JSON List": _json(_kubectl_list(one, two)),
        "JSON Lists appended": _json(_kubectl_list(one)) + "\n" + _json(_kubectl_list(two)),
        "JSON Lists back to back": json.dumps(_kubectl_list(one)) + json.dumps(_kubectl_list(two)),
        "NodeList of the API": _json(_api_list("Node", "v1", one, two)),
        "YAML documents": _yaml(one) + "---\n" + _yaml(two),
        "YAML List": _yaml(_kubectl_list(one, two)),
    }


@pytest.mark.parametrize("form", list(_nodes_streams()))
def test_discover_and_policy_check_read_every_stream_kubectl_reads(
    form: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nodes"
    path.write_text(_nodes_streams()[form], encoding="utf-8")
    assert cli.main(["discover", "-f", str(path)]) == 0
    said = " ".join(capsys.readouterr().out.replace("\n# ", " ").split())
    assert "2 nodes, 2 with shared GPUs, in 2 classes." in said
    # The shipped policies describe other nodes too: problems (exit 1), but both are read.
    assert cli.main(["policy", "check", "--nodes", str(path)]) == 1
    assert "2 nodes, 2 with shared GPUs: 4 problems" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [
        ["audit", "-f"],
        ["mutate", "-f"],
        ["discover", "-f"],
        ["policy", "check", "--nodes"],
    ],
)
def test_a_broken_document_stops_every_command_with_one_line(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "dump.json"
    path.write_text(
        json.dumps(_kubectl_list(_NAMESPACE)) + "\n" + json.dumps(_kubectl_list(_GOOD))[:-40] + "\n"
    )
    assert cli.main([*command, str(path)]) == 2
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert line.startswith(f"error: {path}: not valid JSON at line 2, column 327 of document 2: ")


def test_yaml_whose_aliases_stand_for_too_many_values_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """An alias of an alias of ... doubles at each step: a few hundred bytes that would be
    written out as gigabytes of JSON. A few anchors, as people write them, are read."""
    lines = ['data0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"data{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 8)]
    bomb = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n" + "\n".join(lines) + "\n"
    with pytest.raises(InputError, match="stand for more than 1,000,000 values"):
        documents.parse(bomb, "bomb.yaml")
    anchors = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
        "  - &c {name: a, image: x, env: [{name: A, value: b}]}\n  - *c\n"
    )
    assert len(documents.parse(anchors, "pod.yaml")[0]["spec"]["containers"]) == 2
