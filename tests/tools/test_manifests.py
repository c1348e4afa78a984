"""The Kubernetes objects the commands read from files (`webhook.tools.manifests`), which
`mutate`, `audit`, `explain`, `discover` and `policy check --nodes` share: every document an
object or a `List` of them, read by the one reader of documents (tests/policy/test_documents.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import kube
from tests.support import nodes as n
from webhook import cli
from webhook.errors import InputError
from webhook.tools import manifests

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}
POD_B = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}}


def one_error(text: str, source: str = "in.yaml") -> str:
    with pytest.raises(InputError) as caught:
        manifests.parse(text, source)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- objects


@pytest.mark.parametrize("kind", ["List", "PodList", "NamespaceList"])
def test_a_list_kind_stands_for_its_items(kind: str) -> None:
    text = json.dumps({"apiVersion": "v1", "kind": kind, "items": [POD, POD_B]})
    assert manifests.parse(text, "t") == [POD, POD_B]


def test_the_items_of_an_api_list_are_of_its_kind_and_api_version() -> None:
    # What the API answers (client-go, curl): the items carry no kind and no apiVersion.
    bare = [{"metadata": {"name": "a"}}, {"metadata": {"name": "d"}, "kind": "Deployment"}]
    text = json.dumps({"apiVersion": "v1", "kind": "PodList", "items": bare})
    assert manifests.parse(text, "t") == [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}},
        {"metadata": {"name": "d"}, "kind": "Deployment"},
    ]
    # kubectl's List says nothing of its items: they are as they are.
    assert manifests.parse(json.dumps({"kind": "List", "items": bare[:1]}), "t") == bare[:1]


def test_objects_of_every_document_in_order() -> None:
    text = yaml.safe_dump_all([POD, None, {"kind": "List", "items": [POD_B]}, POD])
    assert manifests.parse(text, "t") == [POD, POD_B, POD]


def test_a_list_kind_without_a_list_of_items_is_an_object() -> None:
    weird = {"kind": "List", "items": {"a": 1}}
    assert manifests.parse(json.dumps(weird), "t") == [weird]
    whitelist = {"kind": "AllowList", "spec": {"names": ["a"]}}
    assert manifests.parse(json.dumps(whitelist), "t") == [whitelist]


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


def test_json_values_one_after_another_are_objects_and_lists_of_them() -> None:
    listing = {"kind": "List", "items": [POD]}
    stream = f"{json.dumps(POD, indent=2)}\n{json.dumps(POD_B)}{json.dumps(listing)}\n\n"
    assert manifests.parse(stream, "t") == [POD, POD_B, POD]
    # What `jq -c '.items[]'` prints.
    assert manifests.parse(json.dumps(POD) + "\n" + json.dumps(POD_B) + "\n", "t") == [POD, POD_B]


# --------------------------------------------------------------------------- files


def test_files_are_read_in_order_and_one_without_objects_is_no_error(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"kind": "List", "items": [POD]}))
    (tmp_path / "none.json").write_text(json.dumps({"kind": "PodList", "items": []}))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(POD_B))
    paths = [str(tmp_path / n) for n in ("b.yaml", "none.json", "a.json")]
    assert manifests.read(paths) == [POD_B, POD]


def test_files_that_together_hold_no_object_are_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"kind": "List", "items": []}))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(InputError) as caught:
        manifests.read([str(tmp_path / "a.json"), "-"])
    assert str(caught.value) == f"{tmp_path / 'a.json'}, <stdin>: holds no Kubernetes object"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\xef\xbb\xbf" + json.dumps(POD).encode(), [POD]),
        (b"kind: Pod\nmetadata: {name: \xe9t\xe9}\n", "<stdin>: is not UTF-8 text"),
        (b"", "<stdin>: holds no Kubernetes object"),
    ],
)
def test_standard_input_is_read_as_a_file_is(
    monkeypatch: pytest.MonkeyPatch, data: bytes, expected: list[dict[str, Any]] | str
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    if isinstance(expected, list):
        assert manifests.read(["-"]) == expected
        return
    with pytest.raises(InputError) as caught:
        manifests.read(["-"])
    assert str(caught.value) == expected


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
    """A pending pod of namespace ml, as `kubectl get -o json` lists one."""
    made = kube.pod(kube.shared("1", env=env, image="nvcr.io/nvidia/cuda:12.4.1-base"), name=name)
    made["metadata"] |= {"namespace": "ml", "uid": f"uid-{name}"}
    return made | {"status": {"phase": "Pending"}}


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
