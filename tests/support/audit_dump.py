"""A cluster as `kubectl get -o json` dumps it, for the audit's tests: namespaces, workloads
and what their controllers made of them (uids and controller references as the API server
and the controllers set them), the policies of a rollout, and the kinds files."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch

from webhook.engine import reviewing
from webhook.policy import names, policies

REPO = Path(__file__).resolve().parents[2]
SHARED = "nvidia.com/gpu.shared"
OPTED_IN = {names.ENABLED_LABEL: "true"}

# A policy on its way to enforce: dry-run, except `privileged`, which already warns.
ROLLOUT_POLICY = """\
apiVersion: gpu-share.io/v1alpha1
kind: SharingPolicy
metadata:
  name: rollout
spec:
  nodeClasses:
    - {name: t4-mps, product: Tesla-T4, strategy: mps, replicas: 4, memoryMiB: 15360}
  profiles:
    medium: {activeThreadPercentage: 25, pinnedMemoryMiB: 3840}
  defaultProfile: medium
  mode: dry-run
  ruleModes: {privileged: warn}
"""

# The JobSet alone: the audit reviews the kinds of the file it is given.
JOBSET_ONLY = """\
apiVersion: gpu-share.io/v1alpha1
kind: WorkloadKinds
spec:
  kinds:
    - group: jobset.x-k8s.io
      versions: [v1alpha2]
      kind: JobSet
      resource: jobsets
      templates:
        - spec.replicatedJobs[].template.spec.template
"""
NO_KINDS = "apiVersion: gpu-share.io/v1alpha1\nkind: WorkloadKinds\nspec:\n  kinds: []\n"


# --------------------------------------------------------------------------- the dump


def container(name: str, gpus: int = 0, resource: str = SHARED, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    if gpus:
        c["resources"] = {"limits": {resource: str(gpus)}, "requests": {resource: str(gpus)}}
    c.update(extra)
    return c


def spec(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"containers": list(containers), "restartPolicy": "Always", **extra}


class Cluster:
    """Builds the objects of a dump, with uids and controller references as the API server
    and the controllers set them."""

    def __init__(self) -> None:
        self.namespaces: list[dict[str, Any]] = []
        self.objects: list[dict[str, Any]] = []
        self._uid = 0

    def namespace(self, name: str, labels: dict[str, str]) -> None:
        self.namespaces.append({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {names.NAME_LABEL: name, **labels}},
        })

    def add(self, api: str, kind: str, name: str, ns: str, body: dict[str, Any], *,
            owner: dict[str, Any] | None = None) -> dict[str, Any]:
        self._uid += 1
        meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{self._uid}"}
        if owner is not None:
            meta["ownerReferences"] = [{
                "apiVersion": owner["apiVersion"], "kind": owner["kind"],
                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                "controller": True,
            }]
        obj = {"apiVersion": api, "kind": kind, "metadata": meta, **body}
        self.objects.append(obj)
        return obj

    def pod(self, name: str, ns: str, pod_spec: dict[str, Any],
            owner: dict[str, Any] | None = None,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
        obj = self.add("v1", "Pod", name, ns,
                       {"spec": copy.deepcopy(pod_spec), "status": {"phase": "Running"}},
                       owner=owner)
        if annotations:
            obj["metadata"]["annotations"] = dict(annotations)
        return obj

    def deployment(self, name: str, ns: str, pod_spec: dict[str, Any], replicas: int,
                   old: dict[str, Any] | None = None) -> None:
        """A Deployment, its current ReplicaSet, an old one scaled to 0 (of the `old` pod
        spec, else the same), and its pods."""
        template = {"metadata": {"labels": {"app": name}}, "spec": pod_spec}
        top = self.add("apps/v1", "Deployment", name, ns,
                       {"spec": {"replicas": replicas, "template": template}})
        before = {"metadata": template["metadata"], "spec": old or pod_spec}
        self.add("apps/v1", "ReplicaSet", f"{name}-6b7c8d", ns,
                 {"spec": {"replicas": 0, "template": before}}, owner=top)
        current = self.add("apps/v1", "ReplicaSet", f"{name}-5d4f8b", ns,
                           {"spec": {"replicas": replicas, "template": template}},
                           owner=top)
        for i in range(replicas):
            self.pod(f"{name}-5d4f8b-{i:05d}", ns, pod_spec, current)

    def cronjob(self, name: str, ns: str, pod_spec: dict[str, Any]) -> None:
        template = {"spec": pod_spec}
        top = self.add("batch/v1", "CronJob", name, ns, {"spec": {
            "schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": template}}}})
        job = self.add("batch/v1", "Job", f"{name}-29110", ns, {"spec": {"template": template}},
                       owner=top)
        self.pod(f"{name}-29110-x7k2p", ns, pod_spec, job)

    def jobset(self, name: str, ns: str, driver: dict[str, Any], workers: dict[str, Any]) -> None:
        top = self.add("jobset.x-k8s.io/v1alpha2", "JobSet", name, ns, {"spec": {
            "replicatedJobs": [
                {"name": "driver", "replicas": 1,
                 "template": {"spec": {"template": {"spec": driver}}}},
                {"name": "workers", "replicas": 1,
                 "template": {"spec": {"template": {"spec": workers}}}},
            ]}})
        for part, pod_spec in (("driver", driver), ("workers", workers)):
            job = self.add("batch/v1", "Job", f"{name}-{part}-0", ns,
                           {"spec": {"template": {"spec": pod_spec}}}, owner=top)
            self.pod(f"{name}-{part}-0-0-abcde", ns, pod_spec, job)


INFERENCE = spec(container("server", 1), container("log"))
TRAINER = spec(container("train", 2))
PRIVILEGED = spec(container("shell", 1, securityContext={"privileged": True}))
LEAKY = spec(container("tool", env=[{"name": names.VISIBLE_DEVICES, "value": "all"}]))
BATCH = spec(container("batch", 1), restartPolicy="Never")


def admitted(pod_spec: dict[str, Any], policy: policies.Policy) -> dict[str, Any]:
    """A pod as the webhook left it at CREATE (made after the webhook was installed): its
    spec and annotations."""
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
           "spec": copy.deepcopy(pod_spec)}
    decision = reviewing.review_object(obj, policy=policy)
    assert decision.allowed
    assert decision.patch
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, decision.patch)
    return {"pod_spec": patched["spec"], "annotations": patched["metadata"]["annotations"]}


def cluster() -> Cluster:
    shipped = policies.load_directory(REPO / "policies")
    default = shipped.get("default")
    assert default is not None
    c = Cluster()
    c.namespace("team-a", OPTED_IN)
    c.namespace("legacy", {**OPTED_IN, names.POLICY_LABEL: "not-renamed"})
    c.namespace("rollout", {**OPTED_IN, names.POLICY_LABEL: "rollout"})
    c.namespace("typo", {**OPTED_IN, names.POLICY_LABEL: "larg"})
    c.namespace("batch", {})
    c.namespace("empty", {})
    c.namespace(names.SYSTEM_NAMESPACE, OPTED_IN)
    c.namespace(names.DEFAULT_NAMESPACE, OPTED_IN)

    # Its previous revision had no log container.
    c.deployment("inference", "team-a", INFERENCE, replicas=3, old=spec(container("server", 1)))
    # A pod the webhook admitted already: nothing left to change.
    c.pod("inference-5d4f8b-admitted", "team-a",
          owner=next(o for o in c.objects if o["metadata"]["name"] == "inference-5d4f8b"),
          **admitted(INFERENCE, default))
    c.deployment("trainer", "team-a", TRAINER, replicas=2)
    c.cronjob("nightly", "team-a", BATCH)
    c.jobset("sweep", "team-a", spec(container("driver"), restartPolicy="Never"),
             spec(container("worker", 2), restartPolicy="Never"))
    c.pod("notebook", "team-a", PRIVILEGED)
    c.pod("quiet", "team-a", spec(container("cpu", env=[
        {"name": names.VISIBLE_DEVICES, "value": "void"}])))
    c.add("v1", "Service", "inference", "team-a", {"spec": {"ports": [{"port": 80}]}})

    # Bare pods with one verdict: one entry.
    for name in ("render", "render-2"):
        c.pod(name, "legacy", spec(container("render", 1, resource="nvidia.com/gpu")))

    c.pod("debug", "rollout", PRIVILEGED)
    c.pod("leaky", "rollout", LEAKY)
    c.pod("batch", "rollout", BATCH)

    c.pod("gpu", "typo", spec(container("main", 1)))
    c.pod("cpu", "typo", spec(container("main")))

    for ns in ("batch", names.SYSTEM_NAMESPACE, names.DEFAULT_NAMESPACE):
        c.pod("privileged", ns, PRIVILEGED)
    # Its Namespace is not among the files: not judged.
    c.pod("stray", "ghost", PRIVILEGED)
    return c


