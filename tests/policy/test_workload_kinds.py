"""Workload kinds from configuration (webhook/policy/kinds.py, webhook/policy/workload-kinds.yaml):
the pod templates of JobSet, LeaderWorkerSet, RayCluster, RayJob, RayService and PyTorchJob are
judged as a Deployment's are; a refusal names the kind, the template's path and the container; the
rendered configuration sends them to the validating webhook; unlisted kinds pass untouched."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import apiserver, kube
from tests.support import deploy_helpers as dh
from tests.support.kube import container, shared
from webhook import cli
from webhook.engine import reviewing, view
from webhook.errors import PolicyError
from webhook.policy import kinds, policies
from webhook.tools import rendering

ALL = kinds.all_kinds()
BY_NAME = kinds.kinds_by_name(ALL)


def _template(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "train"}},
            "spec": {"containers": list(containers), "restartPolicy": "Never"}}


def _ray_group(name: str, *containers: dict[str, Any]) -> dict[str, Any]:
    return {"groupName": name, "replicas": 2, "rayStartParams": {},
            "template": _template(*containers)}


def jobset(worker: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "team-a"},
            "spec": {"replicatedJobs": [
                {"name": "driver", "replicas": 1,
                 "template": {"spec": {"template": _template(container("driver"))}}},
                {"name": "workers", "replicas": 4,
                 "template": {"spec": {"parallelism": 2, "template": _template(worker)}}}]}}


def leaderworkerset(worker: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "vllm", "namespace": "team-a"},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {
                "size": 4,
                "leaderTemplate": _template(container("leader")),
                "workerTemplate": _template(worker)}}}


def raycluster(worker: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "ray", "namespace": "team-a"},
            "spec": {"headGroupSpec": {"rayStartParams": {},
                                       "template": _template(container("head"))},
                     "workerGroupSpecs": [_ray_group("cpu", container("cpu")),
                                          _ray_group("gpu", worker)]}}


def rayjob(worker: dict[str, Any]) -> dict[str, Any]:
    cluster = raycluster(worker)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "job", "namespace": "team-a"},
            "spec": {"entrypoint": "python train.py", "rayClusterSpec": cluster["spec"],
                     "submitterPodTemplate": _template(container("submit"))}}


def rayservice(worker: dict[str, Any]) -> dict[str, Any]:
    cluster = raycluster(worker)
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "serve", "namespace": "team-a"},
            "spec": {"serveConfigV2": "applications: []", "rayClusterConfig": cluster["spec"]}}


def pytorchjob(worker: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "mnist", "namespace": "team-a"},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure",
                           "template": _template(container("pytorch"))},
                "Worker": {"replicas": 3, "restartPolicy": "OnFailure",
                           "template": _template(worker)}}}}


# (builder, where the worker's template is)
KINDS = {
    "JobSet": (jobset, "spec.replicatedJobs[1].template.spec.template"),
    "LeaderWorkerSet": (leaderworkerset, "spec.leaderWorkerTemplate.workerTemplate"),
    "RayCluster": (raycluster, "spec.workerGroupSpecs[1].template"),
    "RayJob": (rayjob, "spec.rayClusterSpec.workerGroupSpecs[1].template"),
    "RayService": (rayservice, "spec.rayClusterConfig.workerGroupSpecs[1].template"),
    "PyTorchJob": (pytorchjob, "spec.pytorchReplicaSpecs.Worker.template"),
}
TWO_REPLICAS = container("worker", limits={"nvidia.com/gpu.shared": 2})


def test_the_shipped_file_lists_the_kinds_of_the_common_gpu_operators() -> None:
    assert {k.kind for k in ALL if not k.builtin} == set(KINDS)
    assert {k.kind for k in ALL if k.builtin} == set(kube.WORKLOAD_KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_bad_template_is_refused_naming_the_kind_its_path_and_the_container(
    kind: str, default_policy: policies.Policy
) -> None:
    build, where = KINDS[kind]
    decision = reviewing.review_object(build(TWO_REPLICAS), policy=default_policy, mutate=False,
                                kinds=BY_NAME)
    assert decision.rules == ["multi-replica"]
    assert decision.message.startswith(
        f'{kind} {where}: container "worker": invalid multi-replica request:')
    assert decision.violations[0].container == "worker"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_template_is_judged_and_mutate_shows_them_as_their_pods_will_be(
    kind: str, default_policy: policies.Policy
) -> None:
    build, _ = KINDS[kind]
    obj = build(shared(name="worker"))
    decision = reviewing.review_object(obj, policy=default_policy, kinds=BY_NAME)
    assert decision.allowed, decision.message
    result = kube.apply(obj, decision.patch)
    found, problems = view.templates(result, BY_NAME)
    assert not problems
    assert len(found) >= 2
    for t in found:
        for c in t.generic()["spec"]["containers"]:
            env = {e["name"]: e["value"] for e in c.get("env") or []}
            if c["name"] == "worker":
                assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
            else:
                assert env == {"NVIDIA_VISIBLE_DEVICES": "void"}
        kube.check_pod_rules(t.generic())
    again = reviewing.review_object(result, policy=default_policy, kinds=BY_NAME)
    assert again.patch == []


def test_an_unlisted_kind_passes_untouched(default_policy: policies.Policy) -> None:
    tfjob = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "t"},
             "spec": {"tfReplicaSpecs": {"Worker": {"template": _template(TWO_REPLICAS)}}}}
    decision = reviewing.review_object(tfjob, policy=default_policy, kinds=BY_NAME)
    assert (decision.allowed, decision.patch) == (True, [])


def test_a_template_of_the_wrong_shape_is_a_malformed_object(
    default_policy: policies.Policy,
) -> None:
    obj = raycluster(TWO_REPLICAS)
    obj["spec"]["workerGroupSpecs"] = {"gpu": obj["spec"]["workerGroupSpecs"][1]}
    decision = reviewing.review_object(obj, policy=default_policy, mutate=False, kinds=BY_NAME)
    assert decision.rules == ["malformed-object"]
    assert decision.message.startswith("spec.workerGroupSpecs: must be a list, not an object")


def test_an_update_that_keeps_the_templates_is_not_refused(default_policy: policies.Policy) -> None:
    old = jobset(TWO_REPLICAS)
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    decision = reviewing.admit(new, policy=default_policy, endpoint="validate",
                               group="jobset.x-k8s.io", kind="JobSet", operation="UPDATE",
                               old=old, kinds=BY_NAME)
    assert decision.allowed
    new["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "image"] = "other"
    decision = reviewing.admit(new, policy=default_policy, endpoint="validate",
                               group="jobset.x-k8s.io", kind="JobSet", operation="UPDATE",
                               old=old, kinds=BY_NAME)
    assert decision.rules == ["multi-replica"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_in_a_cluster_the_validating_webhook_refuses_it_at_apply(
    kind: str, shipped_policies: policies.PolicySet
) -> None:
    configurations = rendering.render(shipped_policies, service="s", namespace="gpu-share-system",
                                      name="n", kinds=ALL)
    send = apiserver.in_process(shipped_policies, kinds=BY_NAME)
    cluster = apiserver.ApiServer(configurations, send)
    labels = dh.namespace_labels("team-a", **{"gpu-share.io/enabled": "true"})
    build, _ = KINDS[kind]
    outcome = asyncio.run(cluster.admit(build(TWO_REPLICAS), labels=labels))
    assert outcome.entries == [(rendering.VALIDATING_KIND, rendering.DEFAULT_ENTRY)]
    assert not outcome.allowed
    assert "(rule multi-replica)" in outcome.message
    # Nothing a rule can refuse: the webhook is not called at all.
    plain = asyncio.run(cluster.admit(build(container("worker")), labels=labels))
    assert plain.calls == []
    assert plain.allowed


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("kind: WorkloadKinds\n", "apiVersion: Field required", id="no-api-version"),
        pytest.param("- kind: WorkloadKinds\n", "a WorkloadKinds document is a mapping, not list",
                     id="not-a-mapping"),
        pytest.param("kind: WorkloadKinds\n---\nkind: WorkloadKinds\n",
                     "holds 2 documents; a WorkloadKinds file holds one", id="two-documents"),
        pytest.param("apiVersion: gpu-share.io/v1alpha1\nkind: WorkloadKinds\nspec:\n  kinds:\n"
                     "  - {group: ray.io, versions: [v1], kind: RayCluster, resource: rayclusters,"
                     " templates: ['spec.workerGroupSpecs[][]']}\n",
                     "spec.kinds.0.templates: 'spec.workerGroupSpecs[][]' is not a template path",
                     id="bad-path"),
        pytest.param("apiVersion: gpu-share.io/v1alpha1\nkind: WorkloadKinds\nspec:\n  kinds:\n"
                     "  - {group: apps, versions: [v1], kind: Deployment, resource: deployments,"
                     " templates: [spec.template]}\n",
                     "spec.kinds.0.group: String should match pattern", id="builtin-group"),
        pytest.param("apiVersion: gpu-share.io/v1alpha1\nkind: WorkloadKinds\nspec:\n  kinds:\n"
                     "  - {group: ray.io, versions: [v1], kind: RayCluster, resource: rayclusters,"
                     " templates: ['spec.a[].b{}']}\n", "at most one [] or {}", id="two-wildcards"),
        pytest.param("apiVersion: gpu-share.io/v1alpha1\nkind: WorkloadKinds\nspec:\n  kinds:\n"
                     "  - {group: ray.io, versions: [v1], kind: RayCluster, resource: rayclusters,"
                     " templates: [spec.t], extra: 1}\n", "spec.kinds.0.extra: unknown field",
                     id="unknown-field"),
    ],
)
def test_a_bad_kinds_file_is_refused_with_the_file_the_field_and_the_reason(
    text: str, problem: str
) -> None:
    with pytest.raises(PolicyError) as caught:
        kinds.parse(text, "kinds.yaml")
    assert any(p.startswith("kinds.yaml: ") and problem in p for p in caught.value.problems), (
        caught.value.problems)


def test_render_and_mutate_take_another_kinds_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    only = tmp_path / "kinds.yaml"
    only.write_text("apiVersion: gpu-share.io/v1alpha1\nkind: WorkloadKinds\nspec:\n  kinds:\n"
                    "  - {group: ray.io, versions: [v1], kind: RayCluster, resource: rayclusters,"
                    " templates: [spec.headGroupSpec.template,"
                    " 'spec.workerGroupSpecs[].template']}\n")
    assert cli.main(["render", "--workload-kinds", str(only)]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    resources = {r for rule in objects[1]["webhooks"][0]["rules"] for r in rule["resources"]}
    assert "rayclusters" in resources
    assert "jobsets" not in resources
    manifest = tmp_path / "ray.yaml"
    manifest.write_text(yaml.safe_dump(raycluster(TWO_REPLICAS)))
    assert cli.main(["mutate", "-f", str(manifest), "--workload-kinds", str(only)]) == 1
    assert "RayCluster spec.workerGroupSpecs[1].template" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("kind: [\n")
    assert cli.main(["render", "--workload-kinds", str(tmp_path / "bad.yaml")]) == 2
    assert "bad.yaml: not valid YAML" in capsys.readouterr().err
