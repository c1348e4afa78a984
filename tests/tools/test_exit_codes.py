"""One exit-code convention for every command: 0 all is well, 1 something refused or a problem
found (or a step failed), 2 bad input or usage (`webhook.tools.EXIT_*`), each with one line
on stderr and no traceback. Each command's cases run through `webhook.cli.main`; a few run
the real interpreter (`python -m webhook`) for what only a process shows: argparse's exit,
Ctrl-C, a signal to `serve`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.support import kube
from tests.support import nodes as n
from tests.support import server_helpers as h
from webhook import cli
from webhook.tools import EXIT_FAILED, EXIT_OK, EXIT_USAGE

REPO = Path(__file__).resolve().parents[2]
OPTED_IN = "gpu-share.io/enabled=true"

NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "ml", "labels": {"gpu-share.io/enabled": "true"}},
}


def pod(env: list[dict[str, str]] | None = None) -> dict[str, object]:
    """A pod in namespace ml asking for one shared GPU, with `env` in its container."""
    made = kube.pod(kube.shared("1", name="train", env=env), name="train")
    made["metadata"]["namespace"] = "ml"
    return made


GOOD_POD = pod()
# Escape route 1: a device-selection variable that widens what the runtime exposes.
REFUSED_POD = pod([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])


def listing(*items: object) -> str:
    """`kubectl get ... -o json` of `items`."""
    return json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": list(items), "metadata": {}}, indent=4
    )


def nodes_dump(*items: dict[str, object]) -> str:
    return listing(*items)


KUBECONFIG_TO_NOWHERE = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Config",
        # Port 1 on this machine: nothing listens, the connection is refused at once.
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
)


@dataclass(frozen=True)
class Case:
    """`args` run in a fresh directory holding `files` (text, or bytes as they are; a None
    value makes a directory), with `env` set; `said` is part of the one line on stderr."""

    args: tuple[str, ...]
    code: int
    said: str = ""
    files: dict[str, str | bytes | None] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


def case(*args: str, code: int, said: str = "", id: str, **kw: object) -> object:
    return pytest.param(Case(args, code, said, **kw), id=id)  # type: ignore[arg-type]


BROKEN_YAML = "apiVersion: v1\nkind: Pod\nspec: [\n"
NOT_UTF8 = b"kind: Pod\nmetadata: {name: \xe9t\xe9}\n"  # Latin-1

CASES = [
    # ------------------------------------------------------------------ the program
    case("--no-such-option", code=EXIT_USAGE, said="unrecognized arguments", id="unknown-option"),
    case("no-such-command", code=EXIT_USAGE, said="invalid choice", id="unknown-command"),
    # ------------------------------------------------------------------ mutate
    case(
        "mutate",
        "-f",
        "pod.json",
        "-l",
        OPTED_IN,
        code=EXIT_OK,
        id="mutate-allowed",
        files={"pod.json": json.dumps(GOOD_POD)},
    ),
    case(
        "mutate",
        "-f",
        "pod.json",
        "-l",
        OPTED_IN,
        code=EXIT_FAILED,
        said="denied: Pod/train",
        id="mutate-refused",
        files={"pod.json": json.dumps(REFUSED_POD)},
    ),
    case(
        "mutate",
        "-f",
        "pod.json",
        "--no-such",
        code=EXIT_USAGE,
        said="unrecognized arguments",
        id="mutate-unknown-option",
        files={"pod.json": json.dumps(GOOD_POD)},
    ),
    case(
        "mutate",
        "-f",
        "pod.json",
        code=EXIT_USAGE,
        said="GPU_SHARE_WEBHOOK_MUTATE_OUTPUT='xml'",
        id="mutate-bad-variable",
        files={"pod.json": json.dumps(GOOD_POD)},
        env={"GPU_SHARE_WEBHOOK_MUTATE_OUTPUT": "xml"},
    ),
    case(
        "mutate",
        "-f",
        "missing.yaml",
        code=EXIT_USAGE,
        said="missing.yaml: no such file",
        id="mutate-missing-file",
    ),
    case(
        "mutate",
        "-f",
        "dir",
        code=EXIT_USAGE,
        said="dir: is a directory",
        id="mutate-directory",
        files={"dir": None},
    ),
    case(
        "mutate",
        "-f",
        "pod.yaml",
        code=EXIT_USAGE,
        said="pod.yaml: is not UTF-8 text",
        id="mutate-not-text",
        files={"pod.yaml": NOT_UTF8},
    ),
    case(
        "mutate",
        "-f",
        "pod.yaml",
        code=EXIT_USAGE,
        said="pod.yaml: not valid YAML or JSON at",
        id="mutate-malformed",
        files={"pod.yaml": BROKEN_YAML},
    ),
    case(
        "mutate",
        "-f",
        "pods.json",
        code=EXIT_USAGE,
        said="not valid JSON at line",
        id="mutate-broken-json-stream",
        files={"pods.json": json.dumps(GOOD_POD) + "\n" + json.dumps(GOOD_POD)[:-1]},
    ),
    case(
        "mutate",
        "-f",
        "deep.json",
        code=EXIT_USAGE,
        said="values nested deeper than can be read",
        id="mutate-nested-too-deep",
        # Deeper than any recursion limit a test runner sets (900 levels were refused or not
        # by the stack the test ran on).
        files={"deep.json": json.dumps(GOOD_POD)[:-1] + f', "x": {"[" * 20000}{"]" * 20000}}}'},
    ),
    # ------------------------------------------------------------------ audit
    case(
        "audit",
        "-f",
        "dump.json",
        code=EXIT_OK,
        id="audit-nothing-refused",
        files={"dump.json": listing(NAMESPACE, GOOD_POD)},
    ),
    case(
        "audit",
        "-f",
        "dump.json",
        code=EXIT_FAILED,
        id="audit-finds-a-refusal",
        files={"dump.json": listing(NAMESPACE, REFUSED_POD)},
    ),
    case(
        "audit",
        "-f",
        "dump.json",
        "--no-such",
        code=EXIT_USAGE,
        said="unrecognized arguments",
        id="audit-unknown-option",
        files={"dump.json": listing(NAMESPACE, GOOD_POD)},
    ),
    case(
        "audit",
        "-f",
        "dump.json",
        code=EXIT_USAGE,
        said="GPU_SHARE_WEBHOOK_AUDIT_OUTPUT='xml'",
        id="audit-bad-variable",
        files={"dump.json": listing(NAMESPACE, GOOD_POD)},
        env={"GPU_SHARE_WEBHOOK_AUDIT_OUTPUT": "xml"},
    ),
    case("audit", code=EXIT_USAGE, said="audit needs -f FILE", id="audit-no-file"),
    case(
        "audit",
        "-f",
        "missing.json",
        code=EXIT_USAGE,
        said="missing.json: no such file",
        id="audit-missing-file",
    ),
    case(
        "audit",
        "-f",
        "dump.json",
        code=EXIT_USAGE,
        said="dump.json: is not UTF-8 text",
        id="audit-not-text",
        files={"dump.json": NOT_UTF8},
    ),
    case(
        "audit",
        "-f",
        "dump.yaml",
        code=EXIT_USAGE,
        said="not valid YAML or JSON at line 4",
        id="audit-malformed",
        files={"dump.yaml": BROKEN_YAML},
    ),
    case(
        "audit",
        "-f",
        "dump.json",
        code=EXIT_USAGE,
        said="no pod or workload in",
        id="audit-no-pod",
        files={"dump.json": listing(NAMESPACE)},
    ),
    # ------------------------------------------------------------------ policy check
    case("policy", "check", code=EXIT_OK, id="policy-check-shipped"),
    case(
        "policy",
        "check",
        "policies",
        code=EXIT_FAILED,
        said="policies: 1 problem",
        id="policy-check-finds-a-problem",
        files={"policies": None, "policies/x.yaml": "kind: ["},
    ),
    case(
        "policy",
        "check",
        "--nodes",
        "nodes.json",
        code=EXIT_FAILED,
        said="problem",
        id="policy-check-nodes-match-no-class",
        files={"nodes.json": nodes_dump(n.node("cpu-1"))},
    ),
    case(
        "policy",
        "check",
        "--no-such",
        code=EXIT_USAGE,
        said="unrecognized arguments",
        id="policy-check-unknown-option",
    ),
    case("policy", code=EXIT_USAGE, said="required: ACTION", id="policy-no-action"),
    case(
        "policy",
        "check",
        code=EXIT_USAGE,
        said="nosuchdir: not a directory",
        id="policy-check-bad-variable",
        env={"GPU_SHARE_WEBHOOK_POLICIES": "nosuchdir"},
    ),
    case(
        "policy",
        "check",
        "nosuchdir",
        code=EXIT_USAGE,
        said="nosuchdir: not a directory",
        id="policy-check-missing-directory",
    ),
    case(
        "policy",
        "check",
        "--nodes",
        "missing.json",
        code=EXIT_USAGE,
        said="no such file",
        id="policy-check-nodes-missing-file",
    ),
    case(
        "policy",
        "check",
        "--nodes",
        "nodes.yaml",
        code=EXIT_USAGE,
        said="not valid YAML",
        id="policy-check-nodes-malformed",
        files={"nodes.yaml": BROKEN_YAML},
    ),
    # ------------------------------------------------------------------ discover
    case(
        "discover",
        "-f",
        "nodes.json",
        code=EXIT_OK,
        id="discover-finds-classes",
        files={"nodes.json": nodes_dump(n.node("gpu-1", n.T4_TS), n.node("gpu-2", n.T4_MPS))},
    ),
    case(
        "discover",
        "-f",
        "nodes.json",
        code=EXIT_FAILED,
        said="no shared GPU node",
        id="discover-finds-no-shared-gpu",
        files={"nodes.json": nodes_dump(n.node("cpu-1"))},
    ),
    case(
        "discover",
        "-f",
        "nodes.json",
        "--no-such",
        code=EXIT_USAGE,
        said="unrecognized",
        id="discover-unknown-option",
        files={"nodes.json": nodes_dump(n.node("cpu-1"))},
    ),
    case(
        "discover",
        code=EXIT_USAGE,
        said="GPU_SHARE_WEBHOOK_POLICY_NAME='Not_A_Name'",
        id="discover-bad-variable",
        env={"GPU_SHARE_WEBHOOK_POLICY_NAME": "Not_A_Name"},
    ),
    case(
        "discover",
        "-f",
        "missing.json",
        code=EXIT_USAGE,
        said="no such file",
        id="discover-missing-file",
    ),
    case(
        "discover",
        "-f",
        "nodes.yaml",
        code=EXIT_USAGE,
        said="not valid YAML",
        id="discover-malformed",
        files={"nodes.yaml": BROKEN_YAML},
    ),
    case(
        "discover",
        "-f",
        "pods.json",
        code=EXIT_USAGE,
        said="holds no Node object",
        id="discover-no-nodes",
        files={"pods.json": listing(GOOD_POD)},
    ),
    # ------------------------------------------------------------------ certs
    case("certs", "--dir", "certs", code=EXIT_OK, said="", id="certs-made"),
    case(
        "certs",
        "--dir",
        "a-file/certs",
        code=EXIT_FAILED,
        said="a-file/certs",
        id="certs-cannot-write",
        files={"a-file": "not a directory"},
    ),
    case(
        "certs",
        "--dir",
        "certs",
        "--secret",
        "tls",
        "--kubeconfig",
        "kubeconfig",
        code=EXIT_FAILED,
        said="the Kubernetes API did not answer",
        id="certs-api-unreachable",
        files={"kubeconfig": KUBECONFIG_TO_NOWHERE},
    ),
    case(
        "certs",
        "--no-such",
        code=EXIT_USAGE,
        said="unrecognized arguments",
        id="certs-unknown-option",
    ),
    case(
        "certs",
        code=EXIT_USAGE,
        said="GPU_SHARE_WEBHOOK_DAYS='soon'",
        id="certs-bad-variable",
        env={"GPU_SHARE_WEBHOOK_DAYS": "soon"},
    ),
    case(
        "certs",
        "--secret",
        "tls",
        "--kubeconfig",
        "/nonexistent",
        code=EXIT_USAGE,
        said="/nonexistent: no such kubeconfig file",
        id="certs-missing-kubeconfig",
    ),
    case(
        "certs",
        "--dir",
        "certs",
        "--kubeconfig",
        "/nonexistent",
        code=EXIT_USAGE,
        said="/nonexistent: no such kubeconfig file",
        id="certs-missing-kubeconfig-unused",
    ),
    case(
        "certs",
        "--dir",
        "certs",
        "--secret",
        "tls",
        "--kubeconfig",
        "kubeconfig",
        code=EXIT_USAGE,
        said="no usable Kubernetes configuration in kubeconfig",
        id="certs-malformed-kubeconfig",
        files={"kubeconfig": "clusters: [\n"},
    ),
    case(
        "certs",
        "--secret",
        "Not_A_Name",
        code=EXIT_USAGE,
        said="invalid value 'Not_A_Name'",
        id="certs-bad-secret-name",
    ),
    # ------------------------------------------------------------------ render
    case("render", code=EXIT_OK, id="render-shipped"),
    case(
        "render",
        "--no-such",
        code=EXIT_USAGE,
        said="unrecognized arguments",
        id="render-unknown-option",
    ),
    case(
        "render",
        code=EXIT_USAGE,
        said="GPU_SHARE_WEBHOOK_FAILURE_POLICY='Maybe'",
        id="render-bad-variable",
        env={"GPU_SHARE_WEBHOOK_FAILURE_POLICY": "Maybe"},
    ),
    case(
        "render",
        "--policies",
        "nosuchdir",
        code=EXIT_USAGE,
        said="nosuchdir: not a directory",
        id="render-missing-directory",
    ),
    case(
        "render",
        "--ca-bundle-file",
        "missing.crt",
        code=EXIT_USAGE,
        said="missing.crt",
        id="render-missing-file",
    ),
    case(
        "render",
        "--policies",
        "policies",
        code=EXIT_USAGE,
        said="x.yaml",
        id="render-malformed-policy",
        files={"policies": None, "policies/x.yaml": "kind: ["},
    ),
    # ------------------------------------------------------------------ explain
    case(
        "explain",
        "namespace",
        "team-a",
        "-l",
        OPTED_IN,
        code=EXIT_OK,
        said="",
        id="explain-governed",
    ),
    case(
        "explain",
        "namespace",
        "team-a",
        "-l",
        "gpu-share.io/enabled=True",
        code=EXIT_FAILED,
        id="explain-not-opted-in",
    ),
    case(
        "explain",
        "namespace",
        "team-a",
        "-f",
        "ns.json",
        code=EXIT_USAGE,
        said="ns.json: no such file",
        id="explain-missing-file",
    ),
    case(
        "explain",
        "namespace",
        "team-a",
        "-f",
        "ns.json",
        code=EXIT_USAGE,
        said="not valid YAML or JSON",
        id="explain-malformed-file",
        files={"ns.json": "{\n"},
    ),
    case(
        "explain",
        "namespace",
        "Team_A",
        code=EXIT_USAGE,
        said="expected a namespace name",
        id="explain-bad-name",
    ),
    # ------------------------------------------------------------------ serve (bad usage;
    # 0 and signals: the processes below)
    case(
        "serve",
        "--no-such",
        code=EXIT_USAGE,
        said="unrecognized arguments",
        id="serve-unknown-option",
    ),
    case(
        "serve",
        code=EXIT_USAGE,
        said="GPU_SHARE_WEBHOOK_PORT='https'",
        id="serve-bad-variable",
        env={"GPU_SHARE_WEBHOOK_PORT": "https"},
    ),
    case(
        "serve",
        "--policies",
        "nosuchdir",
        code=EXIT_USAGE,
        said="not a directory of policy",
        id="serve-missing-directory",
    ),
    case(
        "serve",
        "--port",
        "9443",
        "--metrics-port",
        "9443",
        code=EXIT_USAGE,
        said="they must differ",
        id="serve-same-ports",
    ),
    case(
        "serve",
        "--host",
        "no-such-host.invalid",
        code=EXIT_USAGE,
        said="not an address to listen on",
        id="serve-bad-host",
    ),
]


@pytest.mark.parametrize("c", CASES)
def test_each_command_keeps_the_exit_codes(
    c: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(os.environ):
        if name.startswith("GPU_SHARE_WEBHOOK_"):
            monkeypatch.delenv(name)
    for name, value in c.env.items():
        monkeypatch.setenv(name, value)
    for name, content in c.files.items():
        path = tmp_path / name
        if content is None:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code = _main(c.args)
    err = capsys.readouterr().err
    assert code == c.code, err
    assert "Traceback" not in err
    if c.said:
        assert c.said in err
    if code == EXIT_USAGE and "usage:" not in err and c.args[:1] != ("serve",):
        # One line (argparse puts its usage above its own; serve logs what it did first).
        assert len(err.strip().splitlines()) == 1, err


def _main(args: tuple[str, ...]) -> int:
    try:
        return cli.main(list(args))
    except SystemExit as exc:  # argparse's own exit
        return int(exc.code or 0)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
@pytest.mark.parametrize("command", [["mutate", "-f"], ["audit", "-f"], ["discover", "-f"]])
def test_an_unreadable_file_is_bad_input(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "dump.json"
    path.write_text(listing(NAMESPACE, GOOD_POD))
    path.chmod(0)
    assert cli.main([*command, str(path)]) == EXIT_USAGE
    assert "cannot be read: Permission denied" in capsys.readouterr().err


def test_a_port_in_use_is_a_failed_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = cli.main(["serve", "--port", str(port), "--metrics-port", str(h.free_port())])
    assert code == EXIT_FAILED
    assert "cannot serve on 127.0.0.1" in capsys.readouterr().err


# --------------------------------------------------------------------------- real processes


def _python(*args: str, cwd: Path, **kw: object) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SHARE_WEBHOOK_")}
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "webhook", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,
    )


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["--no-such-option"], EXIT_USAGE, "unrecognized arguments"),
        (["mutate", "-f", "missing.yaml"], EXIT_USAGE, "missing.yaml: no such file"),
        (["policy", "check", "nosuchdir"], EXIT_USAGE, "nosuchdir: not a directory"),
        (["--version"], EXIT_OK, ""),
    ],
)
def test_the_interpreter_exits_with_the_same_codes(
    tmp_path: Path, args: list[str], code: int, said: str
) -> None:
    process = _python(*args, cwd=tmp_path)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code
    assert said in err.decode()
    assert b"Traceback" not in err


@pytest.mark.slow
def test_ctrl_c_while_a_command_reads_is_130(tmp_path: Path) -> None:
    # `audit -f -` waits on standard input, which stays open.
    process = _python("audit", "-f", "-", cwd=tmp_path, stdin=subprocess.PIPE)
    # Signalled once it reads its standard input (Linux: the system call it waits in is
    # read(0, ...)), not after a time a busy machine may not keep.
    deadline = time.monotonic() + 60
    while not Path(f"/proc/{process.pid}/syscall").read_text().startswith("0 0x0 "):
        assert time.monotonic() < deadline, "the command never read its standard input"
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130
    assert b"Traceback" not in err


@pytest.mark.slow
async def test_serve_stopped_by_sigterm_is_0(tmp_path: Path) -> None:
    with h.serving(tmp_path, "--drain-seconds", "0.2") as serve:
        await serve.ready()
        serve.terminate()
        assert serve.wait() == EXIT_OK
