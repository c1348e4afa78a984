"""The docs are true to the product: every `gpu-share-webhook` command README.md, docs/*.md
and examples/README.md show runs as shown, and the figures they quote are the shipped ones.

Each command line of a shell block (fenced, or indented by four spaces) that runs
`gpu-share-webhook` or `python -m webhook` is either

- offline (mutate, audit, policy check, discover, render, certs into a directory, --help):
  run with `cli.main` in a workspace holding a copy of the repository's examples/ and
  policies/ and the files the docs name (a node dump from tests/support/nodes.py, a cluster dump of
  the examples, train.yaml), the lines of one block in order (a `> FILE` is written, a
  `cd DIR` is followed), and its exit code held to what the doc implies: `# exit N` beside
  it, 1 for an example under examples/denied/, 0 for one under examples/allowed/, else 0
  or 1 (never 2: a doc never shows bad input unless it says so);
- online (serve, certs that talk to a cluster, audit --cluster): not run, but parsed by the
  real parser, so a renamed or removed flag fails.

Every failing command is reported, by file and line, in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import re
import shlex
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import jsonpatch
import pytest
import yaml

from tests.support import deploy_helpers as dh
from tests.support import dra_objects, nodes, slices
from tests.support import server_helpers as h
from webhook import cli, tools
from webhook.engine import reviewing
from webhook.policy import kinds, names, policies
from webhook.server import app as server
from webhook.server import limits, states
from webhook.tools import rendering

REPO = dh.REPO
DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "examples" / "README.md")
CHART = REPO / "charts" / "gpu-share-webhook"
OPERATIONS = REPO / "docs" / "operations.md"
INSTALL = REPO / "docs" / "install.md"

PROGRAM = re.compile(r"^(?:gpu-share-webhook|python3? -m webhook)(?=\s|$)")
SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
# What makes a command online: it talks to a cluster or serves.
ONLINE_FLAGS = {"--secret", "--inject-ca", "--kubeconfig", "--cluster", "--write-reports"}


@dataclass(frozen=True)
class Command:
    """One command line of a doc: where it is, its words, and its `# ...` comment."""

    doc: Path
    line: int
    block: int
    words: tuple[str, ...]
    comment: str
    stdout: str | None  # the file of `> FILE`

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    @property
    def args(self) -> list[str]:
        return list(self.words)

    def online(self) -> str | None:
        """Why this command is not run, or None."""
        if "--help" in self.words or "-h" in self.words:
            return None
        if self.words and self.words[0] == "serve":
            return "serve listens"
        used = ONLINE_FLAGS.intersection(self.words)
        if used:
            return f"{sorted(used)[0]} talks to a cluster"
        return None

    def expected_exits(self) -> set[int]:
        hint = re.search(r"\bexit (\d)\b", self.comment)
        if hint:
            return {int(hint.group(1))}
        files = [w for w in self.words if w.startswith("examples/")]
        if files and all(f.startswith("examples/denied/") for f in files):
            return {tools.EXIT_FAILED}
        if files and all(f.startswith("examples/allowed/") for f in files):
            return {tools.EXIT_OK}
        return {tools.EXIT_OK, tools.EXIT_FAILED}


def _split_comment(line: str) -> tuple[str, str]:
    """The code and the comment of a shell line (a `#` outside quotes after a space)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), ""


def _shell_lines(text: str) -> Iterator[tuple[int, int, str]]:
    """(line number, block number, logical line) of every shell block of a Markdown text,
    continuation lines joined."""
    lines = text.splitlines()
    block = 0
    fence: str | None = None
    fence_is_shell = False
    pending: tuple[int, str] | None = None
    previous_blank = True
    in_indented = False
    for number, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        if fence is None and stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
            fence_is_shell = stripped[len(fence) :].strip() in SHELL_FENCES
            block += 1
            continue
        if fence is not None:
            if stripped.startswith(fence) and stripped.strip("`") == "":
                fence = None
                continue
            if not fence_is_shell:
                continue
            code = raw
        else:
            indented = raw.startswith("    ") and stripped != ""
            if indented and (previous_blank or in_indented):
                if not in_indented:
                    block += 1
                in_indented = True
                code = raw
            else:
                in_indented = in_indented and stripped == ""
                previous_blank = stripped == ""
                continue
            previous_blank = False
        text_line = code.strip()
        if text_line.startswith("$ "):
            text_line = text_line[2:]
        if pending is not None:
            start, head = pending
            text_line = head + " " + text_line
        else:
            start = number
        if text_line.endswith("\\"):
            pending = (start, text_line[:-1].rstrip())
            continue
        pending = None
        yield start, block, text_line


def _commands(doc: Path) -> Iterator[Command | tuple[int, int, str]]:
    """The project's commands of a doc, and its `cd DIR` lines (as tuples)."""
    for number, block, line in _shell_lines(doc.read_text(encoding="utf-8")):
        code, comment = _split_comment(line)
        for piece in re.split(r"\s*(?:&&|;|\|\|)\s*", code):
            part = piece.strip().lstrip("(").rstrip(")")
            if part.startswith("cd "):
                yield number, block, part[3:].strip()
                continue
            if not PROGRAM.match(part):
                continue
            run = part.split(" | ", 1)[0]
            stdout = None
            redirect = re.search(r"\s>\s*(\S+)\s*$", run)
            if redirect:
                stdout = redirect.group(1)
                run = run[: redirect.start()]
            words = shlex.split(run)
            words = words[1:] if words[0] == "gpu-share-webhook" else words[3:]
            yield Command(doc, number, block, tuple(words), comment, stdout)


def all_commands() -> list[Command]:
    return [c for doc in DOCS for c in _commands(doc) if isinstance(c, Command)]


# --------------------------------------------------------------------------- the workspace


def _examples(kind: str) -> list[dict[str, Any]]:
    objects = []
    for path in sorted((REPO / "examples" / kind).glob("*.yaml")):
        objects += [o for o in yaml.safe_load_all(path.read_text(encoding="utf-8")) if o]
    return objects


def _namespace(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}},
    }


def _listing(objects: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}, indent=1)


def workspace(root: Path) -> Path:
    """Where the docs' commands run: a copy of examples/ and policies/, and the files the
    docs name (slices.json too)."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    for part in ("examples", "policies"):
        shutil.copytree(REPO / part, repo / part)
    # A cluster whose device plugin renames shared GPUs: T4s with MPS, A10Gs time-sliced,
    # a CPU node and a node whose labels disagree (discover leaves it out); the GPU nodes in
    # the pools of two teams (policies.md, "One policy per team").
    ml, vision = {"team": "ml"}, {"team": "vision"}
    nodes.write(
        repo,
        [
            nodes.node("gpu-1", nodes.T4_MPS, labels=ml),
            nodes.node("gpu-2", nodes.T4_MPS, labels=ml),
            nodes.node("gpu-3", nodes.A10G_TS, labels=vision),
            nodes.node("cpu-1"),
            nodes.node("bad-1", nodes.T4_MPS, drop=("nvidia.com/gpu.count",), labels=ml),
        ],
    )
    # `kubectl get resourceslices -o json`: NVIDIA's DRA driver's GPUs, MIG and VFIO devices,
    # and a NIC of another driver (`discover --slices`, docs/dra.md).
    slices.write_slices(repo, *slices.CLUSTER)
    # `kubectl get deviceclasses -o json`: NVIDIA's classes and some of an admin's own
    # (`policy check --device-classes`, docs/dra.md).
    (repo / "deviceclasses.json").write_text(
        json.dumps(dra_objects.device_class_list()), encoding="utf-8"
    )
    team = "team-a"
    pods = [dict(o, metadata={**o["metadata"], "namespace": team}) for o in _examples("allowed")]
    namespaces = [_namespace(team, **{"gpu-share.io/enabled": "true"})]
    (repo / "dump.json").write_text(_listing(namespaces + pods), encoding="utf-8")
    (repo / "namespaces.json").write_text(_listing(namespaces), encoding="utf-8")
    # `kubectl get namespace team-b -o json`: one object, not a list.
    team_b = _namespace("team-b", **{"gpu-share.io/enabled": "true"})
    (repo / "team-b.json").write_text(json.dumps(team_b), encoding="utf-8")
    (repo / "workloads.json").write_text(_listing(pods), encoding="utf-8")
    shutil.copy(REPO / "examples" / "allowed" / "mps-limits.yaml", repo / "train.yaml")
    # The site's own policies, as the first steps make them (discover from the nodes).
    site = repo / "site" / "policies"
    site.mkdir(parents=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["discover", "-f", str(repo / "nodes.json")]) == 0
    (site / "default.yaml").write_text(out.getvalue(), encoding="utf-8")
    return repo


def _run(command: Command, cwd: Path) -> tuple[int, str]:
    """Run an offline command as the shell would in `cwd`: its exit code and stderr."""
    out, err = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(command.args)
            except SystemExit as exc:  # --help, and argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else tools.EXIT_USAGE
    finally:
        os.chdir(previous)
    if command.stdout is not None:
        target = cwd / command.stdout
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(out.getvalue(), encoding="utf-8")
    return code, err.getvalue()


def _parses(command: Command) -> str | None:
    """Why the real parser refuses the command's words, or None."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.build_parser().parse_args(command.args)
        except SystemExit as exc:
            if exc.code not in (0, None):
                return err.getvalue().strip().splitlines()[-1]
    return None


# --------------------------------------------------------------------------- the commands


def test_the_docs_show_commands_of_every_kind() -> None:
    """The extraction finds what the docs hold (else the test below checks nothing)."""
    found = all_commands()
    assert len(found) >= 20
    kinds = {c.words[0] for c in found if c.words}
    assert {"serve", "mutate", "audit", "policy", "discover", "render", "certs"} <= kinds
    assert any(c.online() for c in found)
    assert any(c.stdout for c in found)


def test_every_command_the_docs_show_runs_as_shown(tmp_path: Path) -> None:
    failures: list[str] = []
    ran = skipped = 0
    for index, doc in enumerate(DOCS):
        repo = workspace(tmp_path / f"{index}-{doc.stem}")
        block, cwd = -1, repo
        for item in _commands(doc):
            if isinstance(item, tuple):
                _, item_block, directory = item
                if item_block != block:
                    block, cwd = item_block, repo
                cwd = (cwd / directory).resolve()
                cwd.mkdir(parents=True, exist_ok=True)
                continue
            if item.block != block:
                block, cwd = item.block, repo
            refused = _parses(item)
            if refused:
                failures.append(f"{item.where}: `{shlex.join(item.words)}`: {refused}")
                continue
            if item.online():
                skipped += 1
                continue
            code, stderr = _run(item, cwd)
            ran += 1
            if code not in item.expected_exits():
                failures.append(
                    f"{item.where}: `{shlex.join(item.words)}` exited {code}, the doc implies"
                    f" {sorted(item.expected_exits())}: {stderr.strip()[:300]}"
                )
    assert not failures, "\n".join(failures)
    assert ran >= 15
    assert skipped >= 1


def test_an_unknown_command_or_flag_fails_the_check(tmp_path: Path) -> None:
    """The check itself: a doc with a removed flag and a wrong exit is reported by line."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "Text.\n\n    gpu-share-webhook serve --no-such-flag\n"
        "    gpu-share-webhook frobnicate\n\n"
        "```sh\ngpu-share-webhook mutate -f examples/denied/multi-replica.yaml   # exit 0\n```\n",
        encoding="utf-8",
    )
    found = [c for c in _commands(doc) if isinstance(c, Command)]
    assert [c.line for c in found] == [3, 4, 7]
    assert _parses(found[0])
    assert _parses(found[1])
    code, _ = _run(found[2], workspace(tmp_path / "ws"))
    assert code not in found[2].expected_exits()


# --------------------------------------------------------------------------- cluster dumps

# What `audit` reviews of a cluster: pods, the built-in workload kinds, and claims and claim
# templates (their plural resource names, as `kubectl get` takes them).
AUDITED = frozenset({"pods", *(k.resource for k in kinds.BUILTIN_KINDS), *names.CLAIM_RESOURCES})


def _dump_commands(doc: Path) -> Iterator[tuple[str, int, list[str], set[str]]]:
    """Each `kubectl get` of pods in a doc's shell blocks: where, its words, and what the
    other `kubectl get` lines of its block fetch."""
    blocks: dict[int, list[tuple[int, list[str]]]] = {}
    for number, block, line in _shell_lines(doc.read_text(encoding="utf-8")):
        code, _ = _split_comment(line)
        if not code.startswith("kubectl get "):
            continue
        words = shlex.split(code)
        if len(words) > 2:
            blocks.setdefault(block, []).append((number, words))
    for commands_of_block in blocks.values():
        fetched = {r for _, w in commands_of_block for r in w[2].split(",") if r}
        for number, words in commands_of_block:
            if "pods" in words[2].split(","):
                yield f"{doc.relative_to(REPO)}:{number}", number, words, fetched


def test_every_cluster_dump_the_docs_show_holds_every_kind_audit_reviews() -> None:
    """A dump the docs tell an admin to make for `audit` fetches every built-in kind audit
    reviews, in every namespace, and the Namespaces (in that command or another of its
    block): a kind left out is a workload never judged, and no warning says so.

    The kinds of other projects (the shipped WorkloadKinds file: JobSet, RayCluster, ...) are
    not required: `kubectl get` of a resource whose CRD is not installed fails the whole
    command, so docs/audit.md says to add the ones a cluster has."""
    found = [c for doc in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
             for c in _dump_commands(doc)]
    assert {where.split(":")[0] for where, *_ in found} >= {"README.md", "docs/audit.md"}
    problems = []
    for where, _, words, fetched in found:
        resources = set(words[2].split(","))
        missing = sorted(AUDITED - resources)
        if missing:
            problems.append(f"{where}: `{shlex.join(words)}` leaves out {', '.join(missing)}")
        if not {"-A", "--all-namespaces"} & set(words):
            problems.append(f"{where}: `{shlex.join(words)}` reads one namespace only (-A)")
        if "namespaces" not in fetched:
            problems.append(f"{where}: no `kubectl get namespaces` beside it")
    assert not problems, "\n".join(problems)


def test_every_doc_with_a_cluster_dump_says_which_kinds_to_add_and_when_to_drop_claims() -> None:
    """Beside the dump commands an admin meets first (README.md's first steps, audit.md's),
    the doc names each kind of other projects audit reviews (as `kubectl get` takes it) and
    says what fails on a cluster that does not serve `resource.k8s.io/v1`: the admin adds
    what the cluster has and drops what it has not."""
    extra = [f"{k.resource}.{k.group}" for k in kinds.load()]
    assert extra
    for doc in (REPO / "README.md", REPO / "docs" / "audit.md"):
        assert list(_dump_commands(doc)), doc.name
        text = " ".join(doc.read_text(encoding="utf-8").split())
        missing = [r for r in extra if f"`{r}`" not in text]
        assert not missing, f"{doc.name} does not name {missing}"
        assert "without `resource.k8s.io/v1`" in text, doc.name
        assert "doesn't have a resource type" in text, doc.name


def test_the_readme_names_every_workload_kind_the_webhook_reviews() -> None:
    """README.md, "What it does": the sentence on workload templates names every built-in
    kind and every kind of the shipped WorkloadKinds file."""
    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    sentence = text.split("The same rules check the pod templates of ", 1)[1].split(". ", 1)[0]
    missing = [f"{k.kind}s" for k in kinds.BUILTIN_KINDS if f"{k.kind}s" not in sentence]
    missing += [k.kind for k in kinds.load() if k.kind not in sentence]
    assert not missing, f"README.md leaves out {missing}"
    assert "webhook/policy/workload-kinds.yaml" in sentence


# --------------------------------------------------------------------------- quickstart


def test_the_quickstart_names_everything_the_webhook_adds_to_its_pod(tmp_path: Path) -> None:
    """docs/quickstart.md, step 7: the variables the webhook sets on the pod of
    examples/allowed/runtime-class.yaml (under the policy `discover` writes for the faked T4
    node) and its annotations, each with its value, as the text names them."""
    nodes.write(tmp_path, [nodes.node("gpu-share-worker", nodes.T4_MPS)])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["discover", "-f", str(tmp_path / "nodes.json")]) == 0
    site = tmp_path / "policies"
    site.mkdir()
    (site / "default.yaml").write_text(out.getvalue(), encoding="utf-8")
    policy = policies.load_directory(site).governing("default")
    pod = next(o for o in dh.load_yaml(REPO / "examples" / "allowed" / "runtime-class.yaml")
               if o["kind"] == "Pod")
    decision = reviewing.review_object(pod, policy=policy)
    assert decision.allowed
    result = jsonpatch.apply_patch(pod, decision.patch)
    text = (REPO / "docs" / "quickstart.md").read_text(encoding="utf-8")
    step = " ".join(text.split("\n## 7. ", 1)[1].split("\n## ", 1)[0].split())
    added = [
        f"`{e['name']}={e['value']}`"
        for c in result["spec"]["containers"]
        for e in c.get("env", [])
        if e not in next(o for o in pod["spec"]["containers"] if o["name"] == c["name"]).get(
            "env", [])
    ]
    assert added
    annotations = [f"`{k}" for k in result["metadata"]["annotations"] if k.startswith("gpu-share")]
    missing = [a for a in [*added, *annotations] if a not in step]
    assert not missing, f"quickstart.md, step 7, leaves out {missing}"
    assert f"`runtimeClassName: {result['spec']['runtimeClassName']}`" in step


# --------------------------------------------------------------------------- option tables


def _options(command: str) -> dict[str, Any]:
    """The options of a command, by each of their flags."""
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {flag: a for a in sub.choices[command]._actions for flag in a.option_strings}


_UNITS = {"s": 1, "KiB": 2**10, "MiB": 2**20}
# docs/operations.md's bounds table: each row's values, in order, and the fixed values they are.
_BOUNDS = {
    "header timeout": ("header_timeout",),
    "body timeout": ("body_timeout",),
    "idle timeout": ("idle_timeout",),
    "connections": ("max_connections",),
    "connections per source": ("max_connections_per_source",),
    "handshakes": ("max_handshakes", "max_handshakes_per_source"),
    "body": ("max_body_bytes",),
    "review bytes in flight": ("max_inflight_bytes", "max_inflight_bytes_per_source"),
}


def test_the_bounds_operations_md_lists_are_the_fixed_values_of_the_server() -> None:
    """docs/operations.md, "Who can reach it": each bound's value as the server has it."""
    text = OPERATIONS.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| ([a-z' ]+) \| ([^|]+) \|", text, flags=re.MULTILINE))
    fixed = limits.Limits()
    for bound, fields in _BOUNDS.items():
        numbers = re.findall(r"(\d[\d,]*(?:\.\d+)?)(?: (s|KiB|MiB)\b)?", rows[bound])
        shown = [float(n.replace(",", "")) * _UNITS.get(unit, 1) for n, unit in numbers]
        assert shown == [float(getattr(fixed, f)) for f in fields], (bound, rows[bound])
    # The share of time, in words.
    assert fixed.large_share == 0.2
    assert "a fifth of the server's time per source" in rows["large reviews' time"]
    assert f"bodies over {fixed.inline_bytes // limits.KIB} KiB" in text
    # And `serve` has none of them as a flag.
    flags = set(_options("serve"))
    assert not {f"--{f.name.replace('_', '-')}" for f in dataclasses.fields(fixed)} & flags


def test_the_options_audit_md_lists_are_read_from_the_variables_it_names() -> None:
    """docs/audit.md, section 1: each option's environment variable, as its --help says."""
    options = _options("audit")
    rows = re.findall(r"^\| `(-[a-z-]+)`(?:, `(--[a-z-]+)`)? \| `(GPU_SHARE_WEBHOOK_[A-Z_]+)`",
                      (REPO / "docs" / "audit.md").read_text(encoding="utf-8"),
                      flags=re.MULTILINE)
    assert len(rows) >= 10
    for short, long, variable in rows:
        flag = long or short
        assert variable in " ".join(str(options[flag].help).split()), (flag, variable)


# --------------------------------------------------------------------------- /readyz samples


def _samples(text: str, command: str) -> list[str]:
    """The output under each `$ COMMAND` line of indented blocks."""
    out = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == f"$ {command}":
            indent = len(line) - len(line.lstrip())
            sample = []
            for follower in lines[i + 1 :]:
                if not follower.startswith(" " * indent) or not follower.strip():
                    break
                sample.append(follower[indent:])
            out.append("\n".join(sample))
    return out


async def test_the_readyz_samples_are_what_the_server_answers(
    tmp_path: Path, aiohttp_server: Any, aiohttp_client: Any
) -> None:
    """docs/operations.md's two /readyz answers, from the real app with the broken files the
    doc describes (a replica that had a good version; a new one that never did)."""
    samples = _samples(OPERATIONS.read_text(encoding="utf-8"), "curl -s http://POD:8080/readyz")
    assert len(samples) == 2
    mount = "/etc/gpu-share-webhook/policies"

    settings = h.settings(tmp_path / "had-good")
    app = server.create_app(settings)
    await h.start(aiohttp_server, aiohttp_client, app)
    target = settings.policies_dir / "default.yaml"
    target.write_text(
        target.read_text(encoding="utf-8").replace("replicas: 4", "replicas: 1", 1),
        encoding="utf-8",
    )
    app[states.STATE].check_policies()
    probes = await aiohttp_client(server.create_probe_app(app))
    response = await probes.get("/readyz")
    assert response.status == 200
    assert (await response.text()).strip().replace(str(settings.policies_dir), mount) == samples[0]

    settings = h.settings(tmp_path / "never-good")
    target = settings.policies_dir / "default.yaml"
    target.write_text(
        target.read_text(encoding="utf-8").replace("      strategy: mps\n", "", 1),
        encoding="utf-8",
    )
    app = server.create_app(settings)
    await h.start(aiohttp_server, aiohttp_client, app)
    probes = await aiohttp_client(server.create_probe_app(app))
    response = await probes.get("/readyz")
    assert response.status == 503
    assert (await response.text()).strip().replace(str(settings.policies_dir), mount) == samples[1]


# --------------------------------------------------------------------------- the alerts

SECONDS = {"s": 1, "minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "days": 86400}


def _watch_table() -> list[tuple[str, str, str]]:
    """docs/operations.md, "What to watch": (metric, alert when, shipped alert) per row."""
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text.split("## What to watch", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
            assert len(cells) == 3, line
            rows.append((cells[0], cells[1], cells[2].strip("`")))
    return rows


def _rules(objects: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def _chart_rules() -> dict[str, dict[str, Any]]:
    values = {
        "monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
    }
    with helm_python.Chart.load(CHART) as chart:
        manifests = chart.render(values, name="gpu-share-webhook", namespace="gpu-share-system")
    objects = [
        d for p, t in manifests.items() if p.endswith(".yaml") for d in dh.load_all(t) if d
    ]
    return _rules(objects)


def _duration(text: str) -> str:
    """`for 10 minutes` -> 10m; none -> 0m (as the rules write it)."""
    found = re.search(r"\bfor (\d+) (minutes?|hours?)\b", text)
    if not found:
        return "0m"
    return f"{found.group(1)}{found.group(2)[0]}"


@pytest.mark.parametrize("source", ["chart", "kustomize"])
def test_the_alerts_are_the_ones_operations_md_describes(source: str) -> None:
    rules = (
        _chart_rules()
        if source == "chart"
        else _rules(dh.kustomize(REPO / "deploy" / "optional" / "monitoring"))
    )
    rows = [r for r in _watch_table() if r[2] != "none"]
    assert sorted(r[2] for r in rows) == sorted(rules), "a shipped alert missing from the table"
    for metric, when, alert in rows:
        expr = rules[alert]["expr"]
        for name in re.findall(r"`(\w+)", metric):
            assert re.search(rf"\b{name}(_bucket)?\b", expr), f"{alert}: {name} not in {expr}"
        threshold = re.search(r"\b(above|below) ([\d.]+) (s|days)\b", when)
        if threshold:
            op = ">" if threshold.group(1) == "above" else "<"
            seconds = float(threshold.group(2)) * SECONDS[threshold.group(3)]
            shown = re.search(rf"\s{op}\s*([\d.e+]+)\s*$", expr)
            assert shown, f"{alert}: no `{op} N` at the end of {expr}"
            assert float(shown.group(1)) == seconds, f"{alert}: {when} vs {expr}"
        elif when.startswith(("it increases", "they increase")):
            assert "increase(" in expr
            assert expr.rstrip().endswith("> 0")
        else:
            assert "absent(" in expr, f"{alert}: the table says {when!r}"
        assert rules[alert]["for"] == _duration(when), f"{alert}: {when}"


def test_the_latency_alert_is_a_tenth_of_the_timeout_the_configurations_set() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    timeout = values["webhook"]["timeoutSeconds"]
    threshold = values["monitoring"]["prometheusRule"]["latency"]["thresholdSeconds"]
    assert threshold == timeout / 10
    rendered = [
        w["timeoutSeconds"]
        for c in dh.load_yaml(dh.COMMITTED_CONFIGURATIONS)
        for w in c["webhooks"]
    ]
    assert set(rendered) == {timeout}
    when = next(r[1] for r in _watch_table() if r[2] == "GpuShareWebhookSlowReviews")
    assert f"`timeoutSeconds` ({timeout} s)" in when


def test_the_kustomize_alerts_are_generated_from_the_chart() -> None:
    """deploy/optional/monitoring/prometheusrule.yaml is hack/sync.py's rendering of the
    chart: the same alerts, expressions, durations and labels."""
    chart = _chart_rules()
    kustomize = _rules(dh.kustomize(REPO / "deploy" / "optional" / "monitoring"))
    assert sorted(chart) == sorted(kustomize)
    for name, rule in chart.items():
        for key in ("expr", "for", "labels"):
            assert kustomize[name][key] == rule[key], (name, key)


# --------------------------------------------------------------------------- figures


def test_every_timeout_the_docs_quote_is_the_shipped_one() -> None:
    """`timeoutSeconds` as README.md and docs/ quote it is what the configurations set (the
    log of earlier runs excepted: it describes its own days)."""
    (shipped,) = {
        w["timeoutSeconds"]
        for c in dh.load_yaml(dh.COMMITTED_CONFIGURATIONS)
        for w in c["webhooks"]
    }
    quoted = []
    for doc in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))):
        if doc.name == "robustness-log.md":
            continue
        text = doc.read_text(encoding="utf-8")
        for found in re.finditer(r"timeoutSeconds`?(?::| is| \(|=)\s*\(?(\d+)", text):
            quoted.append((doc.name, int(found.group(1))))
    assert len(quoted) >= 4
    assert all(value == shipped for _, value in quoted), quoted


def test_the_robustness_log_is_dated_in_order_and_the_current_page_names_its_runs() -> None:
    heading = re.compile(r"^## (\d{4}-\d{2}-\d{2}), ([0-9a-f]{7})\b", flags=re.MULTILINE)
    log = (REPO / "docs" / "robustness-log.md").read_text(encoding="utf-8")
    entries = heading.findall(log)
    assert len(entries) >= 5
    dates = [date for date, _ in entries]
    assert dates == sorted(dates)
    every_section = re.findall(r"^## .*$", log, flags=re.MULTILINE)
    assert len(every_section) == len(entries), "an entry of the log without a date and commit"
    current = (REPO / "docs" / "robustness.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## (.*)$", current, flags=re.MULTILINE)
    figures = [s for s in sections if s != "Left open"]
    assert figures
    for section in figures:
        assert re.search(r"\((\d{4}-\d{2}-\d{2}), [0-9a-f]{7}\)$", section), section
    # The current page keeps no superseded figure: each of its runs is the newest of its tool.
    assert "712" not in current
    assert "16 MiB" not in current


# --------------------------------------------------------------------------- the outage

# What names the entries of each row of docs/install.md's outage table ("by which entries"):
# the switch that sends it, or the entries that are.
_OUTAGE_WHO = {
    "every-pod": "`voidVisibleDevicesWithoutGpu` on",
    "gpu-pods": "`voidVisibleDevicesWithoutGpu: false`",
    "host-access": "`denyHostAccess` on",
    "ephemeral-containers": "every entry but `namespace-labels`",
    "cdi-updates": "`denyCdiAnnotations` on",
    "claims": "every entry but `namespace-labels`",
    "workloads": "the validating entries",
    "namespace-labels": "`namespace-labels.gpu-share.io`",
}


def _outage_table() -> list[list[str]]:
    """docs/install.md, "When the webhook is down": the rows of its table."""
    text = INSTALL.read_text(encoding="utf-8")
    section = text.split("\n## When the webhook is down\n", 1)[1].split("\n## ", 1)[0]
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| sent to")
    ]
    assert all(len(r) == 3 for r in rows), rows
    return rows


def _switched_policies(root: Path, **rules: bool) -> Any:
    directory = root / "-".join(f"{k}-{v}" for k, v in rules.items())
    directory.mkdir(parents=True)
    doc = yaml.safe_load((REPO / "policies" / "default.yaml").read_text(encoding="utf-8"))
    doc["spec"]["rules"].update(rules)
    (directory / "default.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    return policies.load_directory(directory)


def test_the_outage_table_lists_what_the_rendered_configurations_send(tmp_path: Path) -> None:
    """Row for row, what an entry of the configurations is sent (`rendering.describe`, the
    first column word for word), which entries (the switch that sends it), and what becomes
    of it while the webhook is down (their failurePolicy): as deployed, and under policies
    whose switches send less."""
    rows = _outage_table()
    assert [r[0] for r in rows] == list(rendering.SENT.values())
    # The names the conditions test, as the second row gives them.
    named = (names.NVIDIA_RESOURCE_PREFIX, names.DRA_EXTENDED_RESOURCE_PREFIX, names.NVIDIA_PREFIX,
             names.MPS_PREFIX, *names.CDI_ANNOTATION_PREFIXES)
    assert all(f"`{p}" in rendering.SENT["gpu-pods"] for p in named)
    shipped = dh.load_yaml(dh.COMMITTED_CONFIGURATIONS)
    variants = [shipped] + [
        rendering.render(
            _switched_policies(tmp_path, **switches), service="gpu-share-webhook",
            namespace="gpu-share-system", name="gpu-share-webhook",
        )
        for switches in (
            {"voidVisibleDevicesWithoutGpu": False},
            {"voidVisibleDevicesWithoutGpu": False, "denyHostAccess": False,
             "denyCdiAnnotations": False},
        )
    ]
    failure: dict[str, set[str]] = {}
    for configurations in variants:
        for reach in rendering.describe(configurations):
            for key in reach.sent:
                failure.setdefault(key, set()).add(reach.failure_policy)
    assert set(failure) == set(rendering.SENT), "a row no configuration sends"
    by_phrase = {r[0]: r for r in rows}
    for key, phrase in rendering.SENT.items():
        _, who, down = by_phrase[phrase]
        assert _OUTAGE_WHO[key] in who, (key, who)
        assert down.startswith("refused" if "Fail" in failure[key] else "admitted"), (key, down)
    # What the deployed configurations send under the shipped policies: every pod.
    assert all("every-pod" in r.sent for r in rendering.describe(shipped)
               if r.entry != rendering.NAMESPACE_ENTRY)
    section = INSTALL.read_text(encoding="utf-8").split("\n## When the webhook is down\n")[1]
    assert "under the shipped policies no pod at all can be created" in " ".join(section.split())


def test_the_outage_table_names_every_workload_kind_the_configurations_send() -> None:
    (reach, *_) = [r for r in rendering.describe(dh.load_yaml(dh.COMMITTED_CONFIGURATIONS))
                   if "workloads" in r.sent]
    by_resource = {f"{k.group}/{k.resource}": k.kind for k in kinds.all_kinds()}
    (row,) = [r for r in _outage_table() if r[0] == rendering.SENT["workloads"]]
    missing = [by_resource[w] for w in reach.workloads if by_resource[w] not in row[0]]
    assert not missing, f"the outage table leaves out {missing}"
