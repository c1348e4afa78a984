"""The command line's options and environment variables, for every command.

Each command reads its own variables only, and only when it runs: a bad value in one
command's variable leaves every other command alone. A bad value, in an option or in its
variable, is a usage error: exit 2 and one line on stderr that names the option or the
variable, the value and what is expected, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import deploy_helpers as dh
from tests.support.kube import REPO
from tests.support.nodes import T4_MPS, node, write
from webhook import cli

PREFIX = "GPU_SHARE_WEBHOOK_"
EXAMPLE = REPO / "examples" / "allowed" / "runtime-class.yaml"

# A value each variable with a syntax refuses (the names without PREFIX).
BAD = {
    "PORT": "http",
    "METRICS_PORT": "8o8o",
    "DRAIN_SECONDS": "soon",
    "SERVICE": "Web_Hook",
    "NAMESPACE": "Bad_NS",
    "OBJECT_NAMESPACE": "Team_A",
    "MUTATE_OUTPUT": "xml",
    "RENDER_OUTPUT": "xml",
    "FAILURE_POLICY": "Retry",
    "TIMEOUT_SECONDS": "31",
    "NAME": "Bad_Name",
    "CERT_MANAGER_CERTIFICATE": "no-slash",
    "DAYS": "abc",
    "FORCE": "maybe",
    "INJECT_CA": "perhaps",
    "SECRET": "Bad/Name",
    "MUTATING_WEBHOOK": "Bad_Name",
    "VALIDATING_WEBHOOK": "Bad_Name",
    "POLICY_NAME": "Not_A_Name",
    "EXTRA_SAN": "hook.example.com,not a name",
    "AUDIT_OUTPUT": "xml",
    "AUDIT_SHOW": "some",
    "AUDIT_CLUSTER": "sometimes",
    "AUDIT_WRITE_REPORTS": "later",
    "AUDIT_PAGE_SIZE": "lots",
}

# The variables each command reads (its --help lists them; a test checks).
READS = {
    "serve": {
        "HOST", "PORT", "METRICS_PORT", "CERT_DIR", "POLICIES", "STATE_DIR", "WORKLOAD_KINDS",
        "SERVICE", "NAMESPACE", "EXTRA_SAN", "DRAIN_SECONDS", "CLIENT_CA_FILE", "CLIENT_NAMES",
        "LOG_LEVEL", "LOG_FORMAT",
    },
    "mutate": {"OBJECT_NAMESPACE", "NAMESPACE", "POLICIES", "WORKLOAD_KINDS", "MUTATE_OUTPUT"},
    "audit": {
        "AUDIT_FILES", "POLICIES", "WORKLOAD_KINDS", "NAMESPACE", "AUDIT_OUTPUT", "AUDIT_SHOW",
        "AUDIT_EXCLUDE_NAMESPACES", "AUDIT_CLUSTER", "KUBECONFIG", "AUDIT_CONTEXT",
        "AUDIT_PAGE_SIZE", "AUDIT_WRITE_REPORTS",
    },
    "policy check": {"POLICIES", "NODES", "DEVICE_CLASSES"},
    "discover": {"NODES", "SLICES", "POLICY_NAME"},
    "certs": {
        "CERT_DIR", "SERVICE", "NAMESPACE", "EXTRA_SAN", "DAYS", "FORCE", "SECRET", "INJECT_CA",
        "MUTATING_WEBHOOK", "VALIDATING_WEBHOOK", "KUBECONFIG",
    },
    "render": {
        "POLICIES", "WORKLOAD_KINDS", "SERVICE", "NAMESPACE", "NAME", "CA_BUNDLE_FILE",
        "FAILURE_POLICY", "TIMEOUT_SECONDS", "CERT_MANAGER_CERTIFICATE", "RENDER_OUTPUT",
    },
}
# Variables several commands read, each meaning the same thing in all of them.
SHARED_ON_PURPOSE = {
    "POLICIES",  # the policy directory
    "WORKLOAD_KINDS",  # the WorkloadKinds file
    "SERVICE",  # the webhook's Service
    "NAMESPACE",  # the webhook's own namespace
    "CERT_DIR",  # the serving certificate's directory
    "EXTRA_SAN",  # more names for the serving certificate
    "NODES",  # a `kubectl get nodes -o json` dump
    "KUBECONFIG",  # the kubeconfig of the cluster to read or write
}
# The variable `mutate` and `render` both read before each had its own.
RETIRED = "GPU_SHARE_WEBHOOK_OUTPUT"
# Makes `serve` stop at its first check, so that no test can start a server by mistake.
SERVE_GUARD = {"GPU_SHARE_WEBHOOK_LOG_LEVEL": "loud"}


def run(argv: list[str]) -> int:
    """`cli.main`, with argparse's exit (a refused option or variable) as its code."""
    try:
        code: object = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    assert isinstance(code, int), code
    return code


def nodes_file(tmp_path: Path) -> Path:
    return write(tmp_path, [node("t4-1", T4_MPS)])


def namespaces_file(tmp_path: Path) -> Path:
    """A dump of one namespace that has not opted in and a pod in it: nothing would be
    refused (a dump with no pod or workload is bad input)."""
    path = tmp_path / "namespaces.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
         "spec": {"containers": [{"name": "c", "image": "busybox"}]}}]}))
    return path


def working(command: str, tmp_path: Path) -> list[str]:
    """An invocation of `command` that succeeds, its variables unset."""
    return {
        "mutate": ["mutate", "-f", str(EXAMPLE), "--policies", str(dh.POLICIES)],
        "audit": ["audit", "-f", str(namespaces_file(tmp_path)), "--policies", str(dh.POLICIES)],
        "policy check": ["policy", "check", str(dh.POLICIES)],
        "discover": ["discover", "-f", str(nodes_file(tmp_path))],
        "certs": ["certs", "--dir", str(tmp_path / "certs")],
        "render": ["render", "--policies", str(dh.POLICIES)],
    }[command]


def clear_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in os.environ:
        if name.startswith(PREFIX):
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Nothing of the caller's environment, and nothing written into the checkout.
    clear_environment(monkeypatch)
    monkeypatch.chdir(tmp_path)


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def help_variables(command: str, capsys: pytest.CaptureFixture[str]) -> set[str]:
    assert run([*command.split(), "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    return {m.removeprefix(PREFIX) for m in re.findall(rf"env ({PREFIX}\w+)", text)}


def listed_commands(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The commands `gpu-share-webhook --help` lists, in its order."""
    assert run(["--help"]) == 0
    text = capsys.readouterr().out
    listing = text.split("  COMMAND\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^    (\w+)", listing, flags=re.MULTILINE)


def serve(environment: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`serve` in a process of its own, so that a mistake cannot leave a server running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    return subprocess.run(
        [sys.executable, "-m", "webhook", "serve"],
        env={**env, **SERVE_GUARD, **environment},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --------------------------------------------------------------------------- the table


def test_the_table_lists_what_each_command_reads(capsys: pytest.CaptureFixture[str]) -> None:
    for command, variables in READS.items():
        assert help_variables(command, capsys) == variables, command


def test_help_lists_every_command_in_the_order_of_use(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert listed_commands(capsys) == [
        "serve", "mutate", "audit", "policy", "discover", "explain", "certs", "render"]


def test_no_two_commands_share_a_variable_that_means_different_things(
    capsys: pytest.CaptureFixture[str],
) -> None:
    readers: dict[str, list[str]] = {}
    commands = ["policy check" if c == "policy" else c for c in listed_commands(capsys)]
    for command in commands:
        for variable in help_variables(command, capsys):
            readers.setdefault(variable, []).append(command)
    shared = {v: c for v, c in readers.items() if len(c) > 1}
    assert set(shared) <= SHARED_ON_PURPOSE, shared
    assert "OUTPUT" not in readers


# --------------------------------------------------------------------------- bad variables

BAD_VARIABLES = [
    pytest.param(command, variable, id=f"{command}-{variable}")
    for command, variables in READS.items()
    if command != "serve"
    for variable in sorted(variables & set(BAD))
]


@pytest.mark.parametrize(("command", "variable"), BAD_VARIABLES)
def test_a_bad_value_in_a_variable_is_exit_2_and_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    variable: str,
) -> None:
    argv = working(command, tmp_path)
    monkeypatch.setenv(PREFIX + variable, BAD[variable])
    assert run(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    line = one_line(err)
    assert line.startswith(f"gpu-share-webhook {command}: error: ")
    assert f"{PREFIX}{variable}={BAD[variable]!r}" in line
    assert ": expected " in line
    assert not (tmp_path / "certs").exists()


@pytest.mark.slow  # starts `serve` in another interpreter
@pytest.mark.parametrize(
    "variable", sorted(READS["serve"] & set(BAD)), ids=lambda v: f"serve-{v}"
)
def test_a_bad_value_in_a_variable_of_serve_is_exit_2_and_one_line(
    tmp_path: Path, variable: str
) -> None:
    proc = serve({PREFIX + variable: BAD[variable]}, tmp_path)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    line = one_line(proc.stderr)
    assert line.startswith("gpu-share-webhook serve: error: ")
    assert f"{PREFIX}{variable}={BAD[variable]!r}" in line
    assert not (tmp_path / "certs").exists()


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DAYS", "0", "a whole number, at least 1"),
        ("TIMEOUT_SECONDS", "0", "a whole number from 1 to 30"),
        ("TIMEOUT_SECONDS", "", "a whole number from 1 to 30"),
        ("MUTATE_OUTPUT", "YAML", "one of yaml, json, patch"),
        ("RENDER_OUTPUT", "patch", "one of yaml, json"),
        ("FAILURE_POLICY", "fail", "one of Fail, Ignore"),
        ("FORCE", "2", "true or false (also 1/0, yes/no, on/off)"),
    ],
)
def test_the_line_says_what_the_variable_takes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *,
    variable: str,
    value: str,
    expected: str,
) -> None:
    command = next(c for c in ("mutate", "certs", "render") if variable in READS[c])
    monkeypatch.setenv(PREFIX + variable, value)
    assert run(working(command, tmp_path)) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"gpu-share-webhook {command}: error: {PREFIX}{variable}={value!r}")
    assert line.endswith(f": expected {expected}"), line


# --------------------------------------------------------------------------- one command's
# variables leave the others alone


@pytest.mark.parametrize(
    "command", ["mutate", "audit", "policy check", "discover", "certs", "render"]
)
def test_bad_variables_of_other_commands_do_not_disturb_a_command(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    others = sorted(set(BAD) - READS[command])
    assert others
    for variable in others:
        monkeypatch.setenv(PREFIX + variable, BAD[variable])
    monkeypatch.setenv(RETIRED, "xml")
    code = run(working(command, tmp_path))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out
    assert "Traceback" not in err


@pytest.mark.slow  # starts `serve` in another interpreter
def test_bad_variables_of_other_commands_do_not_disturb_serve(tmp_path: Path) -> None:
    others = {PREFIX + v: BAD[v] for v in sorted(set(BAD) - READS["serve"])}
    proc = serve({**others, RETIRED: "xml"}, tmp_path)
    # It gets as far as its own first check, the guard.
    assert proc.returncode == 2, proc.stderr
    assert "GPU_SHARE_WEBHOOK_LOG_LEVEL" in one_line(proc.stderr)


def test_a_bad_variable_of_serve_does_not_disturb_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The variables only serve reads; it once parsed them whichever command ran.
    for variable in ("PORT", "METRICS_PORT", "DRAIN_SECONDS"):
        monkeypatch.setenv(PREFIX + variable, BAD[variable])
    for command in ("mutate", "audit", "policy check", "discover", "certs", "render"):
        assert run(working(command, tmp_path)) == 0, capsys.readouterr().err
        capsys.readouterr()


def test_an_option_given_leaves_its_variable_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PREFIX + "MUTATE_OUTPUT", "xml")
    monkeypatch.setenv(PREFIX + "DAYS", "abc")
    assert run([*working("mutate", tmp_path), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "List"
    assert run([*working("certs", tmp_path), "--days", "30"]) == 0


def test_a_variable_is_read_when_its_command_runs_not_when_the_parser_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = cli.build_parser()
    set_later = {"HOST": "127.0.0.2", "CERT_DIR": "tls", "STATE_DIR": "state", "PORT": "9443"}
    for variable, value in set_later.items():
        monkeypatch.setenv(PREFIX + variable, value)
    args = parser.parse_args(["serve"])
    assert (args.host, args.cert_dir, args.state_dir, args.port) == (
        "127.0.0.2", "tls", "state", 9443)


def test_an_empty_state_dir_variable_is_memory_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PREFIX + "STATE_DIR", "")
    assert cli.build_parser().parse_args(["serve"]).state_dir is None


def test_a_list_variable_is_split_and_blank_parts_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PREFIX + "EXTRA_SAN", " hook.example.com,, 10.1.2.3 ,")
    monkeypatch.setenv(PREFIX + "AUDIT_FILES", f"{os.pathsep}a.json{os.pathsep}{os.pathsep}b")
    parser = cli.build_parser()
    assert parser.parse_args(["certs"]).extra_san == ["hook.example.com", "10.1.2.3"]
    assert parser.parse_args(["serve"]).extra_san == ["hook.example.com", "10.1.2.3"]
    assert parser.parse_args(["audit"]).filename == ["a.json", "b"]
    monkeypatch.delenv(PREFIX + "EXTRA_SAN")
    monkeypatch.delenv(PREFIX + "AUDIT_FILES")
    assert parser.parse_args(["certs"]).extra_san == []
    assert parser.parse_args(["audit"]).filename == []


def test_each_parse_gives_lists_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # `cli.main` parses with one parser: a command that changes a list it was given must
    # not change the next command's default.
    monkeypatch.delenv(PREFIX + "EXTRA_SAN", raising=False)
    monkeypatch.delenv(PREFIX + "NODES", raising=False)
    parser = cli.build_parser()
    parser.parse_args(["certs"]).extra_san.append("hook.example.com")
    parser.parse_args(["discover"]).pools.append("a pool")
    assert parser.parse_args(["certs"]).extra_san == []
    assert parser.parse_args(["discover"]).pools == []


def test_a_repeatable_option_given_replaces_its_variable_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PREFIX + "EXTRA_SAN", BAD["EXTRA_SAN"])
    monkeypatch.setenv(PREFIX + "AUDIT_FILES", str(tmp_path / "missing.json"))
    args = cli.build_parser().parse_args(
        ["certs", "--extra-san", "a.example.com", "--extra-san", "b.example.com"])
    assert args.extra_san == ["a.example.com", "b.example.com"]
    assert run(working("audit", tmp_path)) == 0, capsys.readouterr().err
    assert run([*working("certs", tmp_path), "--extra-san", "c.example.com"]) == 0


def test_the_line_for_a_bad_list_variable_names_the_whole_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PREFIX + "EXTRA_SAN", "hook.example.com, a..b")
    assert run(working("certs", tmp_path)) == 2
    assert one_line(capsys.readouterr().err) == (
        "gpu-share-webhook certs: error: GPU_SHARE_WEBHOOK_EXTRA_SAN='hook.example.com, a..b'"
        " (for --extra-san): expected a DNS name (a *. wildcard allowed) or an IP address,"
        " several separated by ','"
    )
    assert not (tmp_path / "certs").exists()


# --------------------------------------------------------------------------- good variables


def test_each_output_format_has_its_own_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PREFIX + "MUTATE_OUTPUT", "json")
    monkeypatch.setenv(PREFIX + "RENDER_OUTPUT", "json")
    mutate = ["mutate", "-f", str(EXAMPLE), "--policies", str(dh.POLICIES)]
    assert run(mutate) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "List"
    assert run(working("render", tmp_path)) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "List"
    monkeypatch.setenv(PREFIX + "MUTATE_OUTPUT", "patch")
    assert run(mutate) == 0
    assert [json.loads(line)[0]["op"] for line in capsys.readouterr().out.splitlines()] == [
        "add",
        "add",
    ]


def test_the_retired_shared_variable_is_read_by_neither(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(RETIRED, "json")
    assert run(["mutate", "-f", str(EXAMPLE), "--policies", str(dh.POLICIES)]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)] == [
        "Pod",
        "Deployment",
    ]
    assert run(working("render", tmp_path)) == 0
    assert capsys.readouterr().out.startswith("# Generated by `gpu-share-webhook render`")


def test_good_values_from_variables_are_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PREFIX + "TIMEOUT_SECONDS", "7")
    monkeypatch.setenv(PREFIX + "RENDER_OUTPUT", "json")
    assert run(working("render", tmp_path)) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    assert {e["timeoutSeconds"] for c in items for e in c["webhooks"]} == {7}
    assert run(working("certs", tmp_path)) == 0
    capsys.readouterr()
    monkeypatch.setenv(PREFIX + "FORCE", "yes")
    assert run(working("certs", tmp_path)) == 0
    assert "made a new CA" in capsys.readouterr().out


# --------------------------------------------------------------------------- bad options

TOP = "gpu-share-webhook"
BAD_OPTIONS = [
    # (argv, the parser that refuses it, what the line names)
    pytest.param(["mutate", "-f", str(EXAMPLE), "-o", "xml"], "mutate", "-o/--output",
                 id="mutate-output"),
    pytest.param(["mutate", "-f", str(EXAMPLE), "-n", "Team_A"], "mutate", "--namespace/-n",
                 id="mutate-namespace"),
    pytest.param(["mutate", "-f", str(EXAMPLE), "--webhook-namespace", "Bad_NS"], "mutate",
                 "--webhook-namespace", id="mutate-webhook-namespace"),
    pytest.param(["mutate"], "mutate", "-f/--filename", id="mutate-no-file"),
    pytest.param(["mutate", "-f", str(EXAMPLE), "--bogus"], "", "--bogus", id="mutate-unknown"),
    pytest.param(["render", "-o", "xml"], "render", "-o/--output", id="render-output"),
    pytest.param(["render", "--timeout-seconds", "31"], "render", "--timeout-seconds",
                 id="render-timeout-too-long"),
    pytest.param(["render", "--timeout-seconds", "soon"], "render", "--timeout-seconds",
                 id="render-timeout-not-a-number"),
    pytest.param(["render", "--failure-policy", "Retry"], "render", "--failure-policy",
                 id="render-failure-policy"),
    pytest.param(["render", "--service", "Web_Hook"], "render", "--service", id="render-service"),
    pytest.param(["render", "--namespace", "Bad_NS"], "render", "--namespace",
                 id="render-namespace"),
    pytest.param(["render", "--name", "Bad_Name"], "render", "--name", id="render-name"),
    pytest.param(["render", "--cert-manager-certificate", "no-slash"], "render",
                 "--cert-manager-certificate", id="render-cert-manager-certificate"),
    pytest.param(["certs", "--days", "abc"], "certs", "--days", id="certs-days"),
    pytest.param(["certs", "--days", "0"], "certs", "--days", id="certs-days-zero"),
    pytest.param(["certs", "--secret", "Bad/Name"], "certs", "--secret", id="certs-secret"),
    pytest.param(["certs", "--mutating-webhook", "Bad_Name"], "certs", "--mutating-webhook",
                 id="certs-mutating-webhook"),
    pytest.param(["certs", "--service", "Web_Hook"], "certs", "--service", id="certs-service"),
    pytest.param(["certs", "--namespace", "Bad_NS"], "certs", "--namespace",
                 id="certs-namespace"),
    pytest.param(["discover", "--name", "Not_A_Name"], "discover", "--name", id="discover-name"),
    pytest.param(["discover", "--bogus"], "", "--bogus", id="discover-unknown"),
    pytest.param(["policy"], "policy", "ACTION", id="policy-no-action"),
    pytest.param(["policy", "nope"], "policy", "nope", id="policy-unknown-action"),
    pytest.param(["policy", "check", "--bogus"], "", "--bogus", id="policy-check-unknown"),
    pytest.param(["serve", "--port", "http"], "serve", "--port", id="serve-port"),
    pytest.param(["serve", "--metrics-port", "0"], "serve", "--metrics-port",
                 id="serve-metrics-port"),
    pytest.param(["serve", "--drain-seconds", "soon"], "serve", "--drain-seconds",
                 id="serve-drain"),
    pytest.param(["serve", "--service", "Web_Hook"], "serve", "--service", id="serve-service"),
    pytest.param(["bogus"], "", "bogus", id="unknown-command"),
]


@pytest.mark.parametrize(("argv", "parser", "named"), BAD_OPTIONS)
def test_a_bad_option_is_exit_2_and_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    parser: str,
    named: str,
) -> None:
    for variable, value in SERVE_GUARD.items():
        monkeypatch.setenv(variable, value)
    assert run(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    line = one_line(err)
    prog = f"{TOP} {parser}" if parser else TOP
    assert line.startswith(f"{prog}: error: "), line
    assert named in line


@pytest.mark.slow  # the command in another interpreter
def test_a_bad_option_from_a_console_script_is_one_line_too(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "certs", "--days", "abc"],
        env={**env, PREFIX + "RENDER_OUTPUT": "xml"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert one_line(proc.stderr) == (
        "gpu-share-webhook certs: error: argument --days: invalid value 'abc':"
        " expected a whole number, at least 1"
    )
