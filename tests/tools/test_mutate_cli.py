"""`gpu-share-webhook mutate` over the examples and the real-world manifests: the documented
exit codes and output, valid and idempotent results, one clear line for bad input."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support import apiserver
from tests.support.kube import (
    REPO,
    WORKLOAD_KINDS,
    as_served,
    check_pod_rules,
    check_valid,
    templates_of,
)
from tests.support.real_world import real_world, real_world_manifests
from webhook import cli, tools
from webhook.policy import policies
from webhook.tools import rendering

EXAMPLES = REPO / "examples"
NOT_RENAMED = ["-l", "gpu-share.io/enabled=true", "-l", "gpu-share.io/policy=not-renamed"]

# The mutation each allowed example shows, as recorded in gpu-share.io/mutations.
STEPS = {
    "runtime-class.yaml": "runtime-class",
    "tolerations.yaml": "tolerations",
    "node-affinity.yaml": "node-selection",
    "node-selector.yaml": "node-selection",
    "mps-limits.yaml": "mps-limits",
    "visible-devices.yaml": "visible-devices",
    "no-gpu.yaml": "visible-devices",
    "annotations.yaml": "tolerations",
    "not-renamed.yaml": "node-selection",
}
# The rule each denied example breaks, as its message names it.
RULES = {
    "multi-replica.yaml": "(rule multi-replica)",
    "requests-limits.yaml": "(rule requests-limits-mismatch)",
    "exclusive-and-shared.yaml": "(rule exclusive-with-shared)",
    "resource-not-allowed.yaml": "(rule resource-not-allowed)",
    "runtime-class.yaml": "(rule runtime-class)",
    "unknown-profile.yaml": "(rule profile)",
    "node-selection.yaml": "(rule node-selection)",
    "mps-above-ceiling.yaml": "(rule mps-limits)",
    "mps-values.yaml": "(rule mps-limits)",
    "device-variables.yaml": "(rule device-variables)",
    "mps-directories.yaml": "(rule mps-directories)",
    "privileged.yaml": "(rule privileged)",
    "capabilities.yaml": "(rule capabilities)",
    "host-namespaces.yaml": "(rule host-namespaces)",
    "host-path.yaml": "(rule host-path)",
    "device-list-mount.yaml": "(rule device-list-mount)",
    "cdi-annotations.yaml": "(rule cdi-annotations)",
    "resource-claims.yaml": "(rule resource-claims)",
    # Issue 19.
    "host-path-proc-link.yaml": "(rule host-path)",
    "device-list-relative-mount.yaml": "(rule device-list-mount)",
    "host-machinery.yaml": "(rule host-path)",
    "capabilities-beyond-baseline.yaml": "(rule capabilities)",
    "host-access.yaml": "(rule host-access)",
    "visible-devices-none.yaml": "(rule device-variables)",
}
# Denied examples the API server would refuse too: an extended resource's requests must
# equal its limits. Every other denied example is a valid object that only the webhook refuses.
REFUSED_BY_THE_API_SERVER_TOO = {"requests-limits.yaml"}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["mutate", "--policies", str(REPO / "policies"), *args])
    out, err = capsys.readouterr()
    return code, out, err


def extra_args(path: Path) -> list[str]:
    return NOT_RENAMED if path.name == "not-renamed.yaml" else []


def test_every_example_is_listed_in_the_tables() -> None:
    assert {p.name for p in (EXAMPLES / "allowed").glob("*.yaml")} == set(STEPS)
    assert {p.name for p in (EXAMPLES / "denied").glob("*.yaml")} == set(RULES)
    readme = (EXAMPLES / "README.md").read_text()
    for folder, names in (("allowed", STEPS), ("denied", RULES)):
        for name in names:
            assert f"`{folder}/{name}`" in readme


@pytest.mark.parametrize("name", sorted(STEPS))
def test_an_allowed_example_exits_0_and_shows_its_mutation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = EXAMPLES / "allowed" / name
    code, out, err = run(capsys, "-f", str(path), *extra_args(path))
    assert (code, err) == (0, "")
    assert "&id" not in out, "shared objects in the output (YAML anchors)"
    results = list(yaml.safe_load_all(out))
    originals = list(yaml.safe_load_all(path.read_text()))
    assert [r["kind"] for r in results] == [o["kind"] for o in originals]
    assert results[0]["kind"] == "Pod"
    assert results[1]["kind"] != "Pod"
    for result in results:
        check_valid(result)
        template = (templates_of(result) or [None])[0]
        assert template is not None
        assert STEPS[name] in template["metadata"]["annotations"]["gpu-share.io/mutations"]
    # Idempotent: its own output gives empty patches.
    again = tmp_path / "again.yaml"
    again.write_text(out)
    code, out2, _ = run(capsys, "-f", str(again), "-o", "patch", *extra_args(path))
    assert (code, out2) == (0, "[]\n[]\n")


@pytest.mark.parametrize("name", sorted(RULES))
def test_a_denied_example_exits_1_with_the_rule_for_the_pod_and_the_workload(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = EXAMPLES / "denied" / name
    code, out, err = run(capsys, "-f", str(path))
    assert (code, out) == (1, "")
    lines = [line for line in err.splitlines() if line.startswith("denied: ")]
    # A hostPath in an example is refused by host-access too where the namespace does not
    # enforce Pod Security baseline (mutate's default labels): lines of that rule besides.
    denials = [line for line in lines
               if RULES[name] == "(rule host-access)" or "(rule host-access)" not in line]
    kinds = list(dict.fromkeys(line.split(":")[1].strip() for line in denials))
    assert len(kinds) == 2, denials
    assert kinds[0].startswith("Pod/")
    assert not kinds[1].startswith("Pod/")
    assert all(RULES[name] in line for line in denials), denials


@pytest.mark.parametrize("name", sorted(set(RULES) - REFUSED_BY_THE_API_SERVER_TOO))
def test_a_denied_example_is_an_object_the_api_server_would_accept(name: str) -> None:
    # The latest schema only: resource claims have their 1.31+ shape.
    version = kubernetes_validate.latest_version()
    for doc in yaml.safe_load_all((EXAMPLES / "denied" / name).read_text()):
        kubernetes_validate.validate(as_served(doc), version, strict=True)
        for template in templates_of(doc):
            check_pod_rules(template)


def test_output_formats(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "allowed" / "runtime-class.yaml")
    code, out, _ = run(capsys, "-f", path, "-o", "json")
    doc = json.loads(out)
    assert (code, doc["kind"], len(doc["items"])) == (0, "List", 2)
    code, out, _ = run(capsys, "-f", path, "-o", "patch")
    lines = [json.loads(line) for line in out.splitlines()]
    assert (code, len(lines)) == (0, 2)
    runtime_class = {"op": "add", "value": "nvidia"}
    assert {**runtime_class, "path": "/spec/runtimeClassName"} in lines[0]
    assert {**runtime_class, "path": "/spec/template/spec/runtimeClassName"} in lines[1]


@pytest.mark.parametrize("value", ["y", "n", "1e3", "0o17", "0x1f", "1_000"])
def test_yaml_output_quotes_what_kubectl_would_read_as_no_string(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kubectl reads YAML with go-yaml v2 (YAML 1.1: `y` is true, `1e3` a number), where
    PyYAML writes these strings plain: piped to `kubectl apply`, a label or an env value would
    reach the API server as no string."""
    pod, _ = yaml.safe_load_all((EXAMPLES / "allowed" / "runtime-class.yaml").read_text())
    pod["metadata"]["labels"] = {"tier": value}
    pod["spec"]["containers"][0]["env"] = [{"name": "SCALE", "value": value}]
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    code, out, _ = run(capsys, "-f", str(tmp_path / "pod.yaml"))
    assert code == 0
    assert f"tier: '{value}'\n" in out
    assert f"value: '{value}'\n" in out
    (admitted,) = yaml.safe_load_all(out)
    assert admitted["metadata"]["labels"] == {"tier": value}


def test_a_lone_surrogate_is_written_escaped() -> None:
    # libyaml's emitter writes UTF-8 and cannot write it; PyYAML's own escapes it.
    text = tools.dump_yaml([{"a": "\ud800", "b": "y"}])
    assert text == "---\na: \"\\uD800\"\nb: 'y'\n"
    assert yaml.safe_load(text) == {"a": "\ud800", "b": "y"}


def test_every_shape_of_input_gives_the_same_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """YAML documents, a kubectl List, the API's PodList (items without kind) and JSON values
    one after another (`jq -c '.items[]'`) are the same input to mutate."""
    objects = list(yaml.safe_load_all((EXAMPLES / "allowed" / "runtime-class.yaml").read_text()))
    pod, deployment = objects
    bare_pod = {k: v for k, v in pod.items() if k not in ("apiVersion", "kind")}
    shapes = {
        "yaml": yaml.safe_dump_all(objects),
        "list.json": json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        "stream.json": "\n".join(json.dumps(o) for o in objects) + "\n",
        "api.json": json.dumps({"apiVersion": "v1", "kind": "PodList", "items": [bare_pod]})
        + json.dumps({"apiVersion": "apps/v1", "kind": "DeploymentList", "items": [deployment]}),
    }
    patches = set()
    for name, text in shapes.items():
        (tmp_path / name).write_text(text)
        code, out, err = run(capsys, "-f", str(tmp_path / name), "-o", "patch")
        assert (code, err) == (0, ""), name
        patches.add(out)
    assert len(patches) == 1
    assert '"path":"/spec/runtimeClassName"' in patches.pop()


def test_a_date_that_is_none_is_text_as_kubectl_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was a traceback: PyYAML's safe loader raises ValueError for month 13.
    text = (EXAMPLES / "allowed" / "runtime-class.yaml").read_text()
    path = tmp_path / "in.yaml"
    path.write_text(text.replace("  name: cuda-vectoradd\n",
                                 "  name: cuda-vectoradd\n  annotations: {built: 2026-13-45}\n"))
    code, out, _ = run(capsys, "-f", str(path), "-o", "json")
    assert code == 0
    assert json.loads(out)["items"][0]["metadata"]["annotations"]["built"] == "2026-13-45"


def test_a_namespace_that_has_not_opted_in_is_left_alone_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = str(EXAMPLES / "denied" / "multi-replica.yaml")
    code, out, err = run(capsys, "-f", path, "-l", "gpu-share.io/enabled=false", "-o", "patch")
    assert (code, out) == (0, "[]\n[]\n")
    reason = "the namespace: not opted in (no label gpu-share.io/enabled=true); left unchanged"
    assert err.splitlines() == [
        f"not reviewed: Pod/greedy: {reason}",
        f"not reviewed: Deployment/greedy: {reason}",
    ]


def test_an_unknown_policy_label_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "allowed" / "runtime-class.yaml")
    code, _, err = run(capsys, "-f", path, "-l", "gpu-share.io/enabled=true",
                       "-l", "gpu-share.io/policy=gold")
    assert code == 1
    assert 'policy "gold" does not exist (policies: default, dra, not-renamed)' in err


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        pytest.param(None, ["-f", "missing.yaml"], "error: missing.yaml: no such file",
                     id="missing"),
        pytest.param("kind: Pod\nspec: [\n", ["-f", "{f}"],
                     "error: {f}: not valid YAML or JSON at line 3, column 1: expected the node"
                     " content, but found '<stream end>'", id="not-yaml"),
        pytest.param("- a\n- b\n", ["-f", "{f}"],
                     "error: {f}: document 1 is a list, not a Kubernetes object", id="not-object"),
        pytest.param("", ["-f", "{f}"], "error: {f}: holds no Kubernetes object", id="empty"),
        pytest.param("kind: Pod\n", ["-f", "{f}", "-l", "novalue"],
                     "error: --namespace-label 'novalue': expected KEY=VALUE", id="bad-label"),
        pytest.param(b"\xff\xfe", ["-f", "{f}"], "error: {f}: is not UTF-8 text", id="binary"),
    ],
)
def test_bad_input_exits_2_with_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str | bytes | None,
    args: list[str], message: str,
) -> None:
    f = tmp_path / "in.yaml"
    if isinstance(setup, bytes):
        f.write_bytes(setup)
    elif setup is not None:
        f.write_text(setup)
    code, out, err = run(capsys, *[a.replace("{f}", str(f)) for a in args])
    assert (code, out) == (2, "")
    assert err.splitlines() == [message.replace("{f}", str(f))]


def test_a_broken_policy_directory_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "p.yaml").write_text("nope: [\n")
    code = cli.main(["mutate", "-f", str(EXAMPLES / "allowed" / "runtime-class.yaml"),
                     "--policies", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: policies: {tmp_path / 'p.yaml'}: not valid YAML")


@pytest.mark.slow  # the command in two more interpreters
def test_the_console_script_and_python_m_are_the_same_program(tmp_path: Path) -> None:
    path = str(EXAMPLES / "denied" / "multi-replica.yaml")
    for argv in ([sys.executable, "-m", "webhook"],
                 [str(Path(sys.executable).parent / "gpu-share-webhook")]):
        proc = subprocess.run([*argv, "mutate", "-f", path], capture_output=True, text=True,
                              cwd=tmp_path, timeout=60, check=False)
        assert proc.returncode == 1, proc.stderr
        assert "invalid multi-replica request" in proc.stderr
        assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- namespaces the
# webhook never sees

GREEDY = EXAMPLES / "denied" / "multi-replica.yaml"  # refused wherever the webhook sees it
OWN = "never reviewed (the webhook's own namespace is never sent to it; see --webhook-namespace)"
SYSTEM = "never reviewed (kube-system is never sent to the webhook)"
ENABLED = ["-l", "gpu-share.io/enabled=true"]


def not_reviewed(reason: str) -> list[str]:
    return [f"not reviewed: {what}: {reason}; left unchanged"
            for what in ("Pod/greedy", "Deployment/greedy")]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        pytest.param(["-n", "kube-system"], f"namespace kube-system: {SYSTEM}", id="kube-system"),
        pytest.param(["-n", "gpu-share-system"], f"namespace gpu-share-system: {OWN}",
                     id="the-webhooks-own"),
        pytest.param(["-n", "gpu-system", "--webhook-namespace", "gpu-system"],
                     f"namespace gpu-system: {OWN}", id="the-webhooks-own-elsewhere"),
        pytest.param([*ENABLED, "-l", "kubernetes.io/metadata.name=kube-system"],
                     f"namespace kube-system: {SYSTEM}", id="kube-system-by-its-label"),
        pytest.param(["-n", "kube-system", *ENABLED, "-l", "gpu-share.io/policy=not-renamed"],
                     f"namespace kube-system: {SYSTEM}", id="kube-system-with-a-policy"),
        pytest.param(["-n", "kube-system", *ENABLED, "-l", "gpu-share.io/policy=gold"],
                     f"namespace kube-system: {SYSTEM}", id="kube-system-with-an-unknown-policy"),
        pytest.param(["-n", "team-a", "-l", "gpu-share.io/enabled=false"],
                     "namespace team-a: not opted in (no label gpu-share.io/enabled=true)",
                     id="not-opted-in"),
    ],
)
def test_a_namespace_the_configurations_leave_out_is_not_reviewed_and_says_why(
    capsys: pytest.CaptureFixture[str], args: list[str], reason: str
) -> None:
    code, out, err = run(capsys, "-f", str(GREEDY), *args)
    assert code == 0
    assert list(yaml.safe_load_all(out)) == list(yaml.safe_load_all(GREEDY.read_text()))
    assert err.splitlines() == not_reviewed(reason)
    code, out, _ = run(capsys, "-f", str(GREEDY), "-o", "patch", *args)
    assert (code, out) == (0, "[]\n[]\n")


def test_only_the_webhooks_own_namespace_is_left_out_with_kube_system(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same variable as `render --namespace`: the two agree on which namespace is left out.
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_NAMESPACE", "gpu-system")
    code, _, err = run(capsys, "-f", str(GREEDY), "-n", "gpu-system")
    assert (code, err.splitlines()) == (0, not_reviewed(f"namespace gpu-system: {OWN}"))
    code, _, err = run(capsys, "-f", str(GREEDY), "-n", "gpu-share-system")
    assert code == 1
    assert "invalid multi-replica request" in err


def test_an_objects_own_namespace_counts_unless_namespace_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = list(yaml.safe_load_all(GREEDY.read_text()))
    for doc in docs:
        doc["metadata"]["namespace"] = "kube-system"
    path = tmp_path / "in-kube-system.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    code, _, err = run(capsys, "-f", str(path))
    assert (code, err.splitlines()) == (0, not_reviewed(f"namespace kube-system: {SYSTEM}"))
    # --namespace says where they are created: it wins.
    code, _, err = run(capsys, "-f", str(path), "-n", "team-a")
    assert code == 1
    assert "invalid multi-replica request" in err


# Namespaces as the API server sees them: what mutate is told with -l.
NAMESPACES = [
    {"gpu-share.io/enabled": "true"},
    {"gpu-share.io/enabled": "true", "kubernetes.io/metadata.name": "team-a"},
    {"gpu-share.io/enabled": "true", "kubernetes.io/metadata.name": "kube-system"},
    {"gpu-share.io/enabled": "true", "kubernetes.io/metadata.name": "gpu-share-system"},
    {"kubernetes.io/metadata.name": "team-a"},
    {"gpu-share.io/enabled": "false", "kubernetes.io/metadata.name": "team-a"},
    {"gpu-share.io/enabled": "true", "kubernetes.io/metadata.name": "team-a",
     "gpu-share.io/policy": "not-renamed"},
    {"gpu-share.io/enabled": "true", "kubernetes.io/metadata.name": "team-a",
     "gpu-share.io/policy": "gold"},
    {"gpu-share.io/enabled": "true", "kubernetes.io/metadata.name": "team-a",
     "gpu-share.io/policy": ""},
    {"gpu-share.io/enabled": "true", "kubernetes.io/metadata.name": "kube-system",
     "gpu-share.io/policy": "gold"},
    {"gpu-share.io/enabled": "true", "kubernetes.io/metadata.name": "gpu-share-system",
     "gpu-share.io/policy": "not-renamed"},
]


@pytest.mark.slow  # 22 cases, each through rendered entries' CEL
@pytest.mark.parametrize("labels", NAMESPACES, ids=lambda labels: ",".join(
    f"{k.rsplit('/', 1)[1]}={v}" for k, v in labels.items()))
@pytest.mark.parametrize("example", ["allowed/runtime-class.yaml", "denied/multi-replica.yaml"])
def test_mutate_reviews_what_the_rendered_configurations_send_and_decides_as_the_cluster(
    capsys: pytest.CaptureFixture[str],
    shipped_policies: policies.PolicySet,
    labels: dict[str, str],
    example: str,
) -> None:
    path = EXAMPLES / example
    pod = next(yaml.safe_load_all(path.read_text()))
    configurations = rendering.render(
        shipped_policies, service="gpu-share-webhook", namespace="gpu-share-system",
        name="gpu-share-webhook",
    )
    cluster = apiserver.ApiServer(configurations, apiserver.in_process(shipped_policies))
    outcome = asyncio.run(cluster.admit(pod, labels=labels))
    pairs = [arg for k, v in labels.items() for arg in ("-l", f"{k}={v}")]
    if "gpu-share.io/enabled" not in labels:
        # mutate's namespace has opted in unless told otherwise: an empty value, which no
        # entry's selector matches, stands for the label the cluster's namespace lacks.
        pairs += ["-l", "gpu-share.io/enabled="]
    code, _, err = run(capsys, "-f", str(path), *pairs)
    pod_lines = [line for line in err.splitlines() if "Pod/" in line]
    reviewed = not any(line.startswith("not reviewed: ") for line in pod_lines)
    assert reviewed == bool(outcome.calls), (pod_lines, outcome.entries)
    refused = any(line.startswith("denied: ") for line in pod_lines)
    assert refused == (not outcome.allowed), (pod_lines, outcome.message)
    # The Deployment has the Pod's spec as its template: the same verdict.
    assert code == (1 if refused else 0), err


# --------------------------------------------------------------------------- real world

# What each published manifest gets under each shipped policy: "mutated" (every object with a
# pod template changes), "untouched", or "denied: <rule phrase>". Under not-renamed, whose
# shared GPU is `nvidia.com/gpu`, a `nvidia.com/gpu.shared` request is not allowed. A whole
# GPU under default is "mutated" too: the shipped policies set its driver capabilities.
REAL = {
    "01-pre6g-yolo26-3inst.yaml": ("mutated", "denied: (rule resource-not-allowed)"),
    "03-pre6g-shared-gpu-runtimeclass-job.yaml": ("mutated", "denied: (rule resource-not-allowed)"),
    "05-pre6g-yolo26-user-job.yaml": ("mutated", "denied: (rule resource-not-allowed)"),
    # A model cache mounted from the node (hostPath): where the namespace does not enforce
    # Pod Security baseline, not allowed unless the policy lists the path.
    "07-tokenlabs-qwen36-vllm-anchors.yaml": ("denied: (rule host-access)",
                                              "denied: (rule host-access)"),
    "08-iet-transformers-mps.yaml": ("denied: (rule host-access)",
                                     "denied: (rule resource-not-allowed)"),
    "10-etherport-ollama-gpushared-limits-only.yaml": (
        "mutated", "denied: (rule resource-not-allowed)"),
    "13-pre6g-test-gpu-shared-4pods.yaml": ("mutated", "denied: (rule resource-not-allowed)"),
    "17-selectel-triton-timeslicing-t4-shared.yaml": ("mutated", "mutated"),
    "19-eks-time-slicing-verification.yaml": ("mutated", "mutated"),
    "20-data-on-eks-timeslicing-test-hostpid.yaml": (
        "denied: (rule host-namespaces)", "denied: (rule host-namespaces)"),
    "23-nvdp-e2e-job-quoted.yaml": ("mutated", "mutated"),
    "24-gke-vit-statefulset-privileged.yaml": ("denied: (rule privileged)",
                                               "denied: (rule privileged)"),
    # The init container (a native sidecar) asks for no GPU: it is hidden from them.
    "26-giex-vllm-native-sidecar-initcontainer.yaml": ("mutated", "mutated"),
    "29-autopilot-cronjob-8gpu.yaml": ("mutated", "denied: (rule multi-replica)"),
    "31-gpu-burn-kind-first-custom-toleration.yaml": ("mutated", "mutated"),
    "33-gardenlinux-gpu-pod-leading-blank.yaml": ("mutated", "mutated"),
    # A Kubeflow PyTorchJob, a kind of webhook/policy/workload-kinds.yaml: its templates ask for
    # nvidia.com/gpu, which is the shared resource under not-renamed only.
    "C1-kubeflow-pytorchjob-nccl.yaml": ("mutated", "mutated"),
}


# In a namespace that enforces Pod Security baseline, host-access leaves hostPaths to Pod
# Security: the model caches come out as they would without host-access.
REAL_UNDER_BASELINE = {
    "07-tokenlabs-qwen36-vllm-anchors.yaml": "mutated",
    "08-iet-transformers-mps.yaml": "mutated",
}


def test_every_real_world_manifest_has_an_expectation() -> None:
    assert {p.name for p in real_world_manifests()} == set(REAL)


@pytest.mark.slow  # every published manifest, two policies
@pytest.mark.parametrize("policy", ["default", "not-renamed", "default-under-baseline"])
@pytest.mark.parametrize("name", sorted(REAL))
def test_a_real_world_manifest_comes_out_valid_and_idempotent_untouched_or_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, policy: str
) -> None:
    expected = REAL[name][0 if policy == "default" else 1]
    path = real_world() / name
    labels = ["-l", "gpu-share.io/enabled=true"]
    if policy == "default-under-baseline":
        expected = REAL_UNDER_BASELINE.get(name, REAL[name][0])
        policy = "default"
        labels += ["-l", "pod-security.kubernetes.io/enforce=baseline"]
    labels += ["-l", f"gpu-share.io/policy={policy}"]
    code, out, err = run(capsys, "-f", str(path), *labels)
    assert "Traceback" not in err
    originals = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    if expected.startswith("denied: "):
        assert code == 1
        assert expected.removeprefix("denied: ") in err
        return
    assert code == 0
    # Nothing on stderr but the line that says why an object comes out unchanged.
    told = [line for line in err.splitlines() if not line.startswith("no change: ")]
    assert told == []
    results = list(yaml.safe_load_all(out))
    assert len(results) == len(originals)
    changed = [r != o for r, o in zip(results, originals, strict=True)]
    gpu_templates = [bool(templates_of(o)) for o in originals]
    # ... one for each pod or workload that comes out unchanged.
    named = {line.split(": ")[1] for line in err.splitlines()}
    unchanged = {f"{o['kind']}/{o['metadata']['name']}": g for o, c, g
                 in zip(originals, changed, gpu_templates, strict=True) if not c}
    assert named <= set(unchanged)
    assert {name for name, g in unchanged.items() if g} <= named
    if expected == "untouched":
        assert not any(changed)
    else:
        assert any(changed)
        assert all(c for c, g in zip(changed, gpu_templates, strict=True) if g)
    for result in results:
        if result.get("kind") in WORKLOAD_KINDS or result.get("kind") == "Pod":
            check_valid(_fill_placeholders(result))
    again = tmp_path / "again.yaml"
    again.write_text(out)
    code, patches, _ = run(capsys, "-f", str(again), "-o", "patch", *labels)
    assert code == 0
    assert patches == "[]\n" * len(results)


def _fill_placeholders(obj: dict[str, Any]) -> dict[str, Any]:
    """Published manifests keep placeholders (`<GCSFUSE_KSA>`); the schema rightly refuses
    them as names, which is not the webhook's doing."""
    text = json.dumps(obj).replace("<GCSFUSE_KSA>", "gcsfuse-ksa")
    return dict(json.loads(text))


def test_a_label_given_is_added_to_the_opt_in_not_put_in_its_place(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `-l gpu-share.io/policy=not-renamed` alone: the namespace opted in, with that policy.
    path = str(EXAMPLES / "allowed" / "not-renamed.yaml")
    code, out, err = run(capsys, "-f", path, "-l", "gpu-share.io/policy=not-renamed", "-o", "patch")
    assert code == 0
    assert "not reviewed" not in err
    assert '"gpu-share.io/policy":"not-renamed"' in out.replace(" ", "")
