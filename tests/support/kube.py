"""Playing the API server's part in tests: build pods, apply patches, validate the results.

There is no kube-apiserver here. What it would do with our answer, these helpers do with the
real parts: jsonpatch applies the patch to the object as sent, `kubernetes-validate` checks the
result against the OpenAPI schema of two Kubernetes versions, the official `kubernetes` client
deserialises it into its model, and `check_pod_rules` applies the semantic checks of Pod
validation (apiserver `ValidatePod`) that a schema cannot express and a patch of ours could
break.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes
import kubernetes_validate
import yaml

from webhook.engine import claims, reviewing, view
from webhook.engine.decision import Decision
from webhook.policy import kinds, policies

REPO = Path(__file__).resolve().parents[2]
VERSIONS = ("1.30", kubernetes_validate.latest_version())
# Objects of dynamic resource allocation: resource.k8s.io/v1 is served from 1.34, where DRA is
# GA (the webhook's rules name v1 only), and a pod's `resources.claims[].request` is newer
# than 1.30 too; a pod that uses claims is checked against these versions.
DRA_VERSIONS = ("1.34", kubernetes_validate.latest_version())

# Node classes and profiles the core's tests share.
T4_MPS = {"name": "t4-mps", "product": "Tesla-T4", "strategy": "mps", "replicas": 4,
          "memoryMiB": 15360}
A10G_TS = {"name": "a10g-ts", "product": "NVIDIA-A10G", "strategy": "time-slicing",
           "replicas": 4, "memoryMiB": 23028}
PROFILES = {"small": {"activeThreadPercentage": 10, "pinnedMemoryMiB": 1536},
            "medium": {"activeThreadPercentage": 25, "pinnedMemoryMiB": 3840}}
# PyYAML's C parser and emitter (libyaml): the manifests and tables the tests read are large,
# and the pure-Python ones cost ten times as much. Both read and write YAML 1.1 alike (the
# resolver and the constructor are the same Python code).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load_yaml(text: str) -> Any:
    """The one document of `text`, as yaml.safe_load reads it."""
    return yaml.load(text, Loader=_YAML_LOADER)


def load_yaml_all(text: str) -> list[Any]:
    """The documents of `text`, as yaml.safe_load_all reads them."""
    return list(yaml.load_all(text, Loader=_YAML_LOADER))


_MODEL = {
    "Pod": "V1Pod",
    "Deployment": "V1Deployment",
    "ReplicaSet": "V1ReplicaSet",
    "StatefulSet": "V1StatefulSet",
    "DaemonSet": "V1DaemonSet",
    "Job": "V1Job",
    "CronJob": "V1CronJob",
    "ReplicationController": "V1ReplicationController",
    "ResourceClaim": "ResourceV1ResourceClaim",
    "ResourceClaimTemplate": "V1ResourceClaimTemplate",
}
_API_CLIENT = kubernetes.client.ApiClient()
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def load_policy_text(text: str) -> policies.Policy:
    found, problems = policies.parse_documents(text, "<test>")
    assert not problems, problems
    assert len(found) == 1
    return policies.build_set(found).policies[found[0].name]


def make_policy(
    classes: list[dict[str, Any]],
    *,
    name: str = "test",
    profiles: dict[str, Any] | None = None,
    default_profile: str | None = None,
    **spec: Any,
) -> policies.Policy:
    """A compiled policy from plain data, through the same loader as files."""
    body: dict[str, Any] = {"nodeClasses": classes, **spec}
    if profiles is not None:
        body["profiles"] = profiles
        body["defaultProfile"] = default_profile or next(iter(profiles))
    doc = {
        "apiVersion": policies.API_VERSION,
        "kind": policies.KIND,
        "metadata": {"name": name},
        "spec": body,
    }
    return load_policy_text(yaml.dump(doc, Dumper=_YAML_DUMPER))


def shipped() -> policies.PolicySet:
    return policies.load_directory(REPO / "policies")


def container(
    name: str = "main",
    *,
    limits: Mapping[str, Any] | None = None,
    requests: Mapping[str, Any] | None = None,
    env: Iterable[Mapping[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = dict(limits)
    if requests is not None:
        resources["requests"] = dict(requests)
    if resources:
        c["resources"] = resources
    if env is not None:
        c["env"] = [dict(e) for e in env]
    c.update(extra)
    return c


def shared(n: Any = 1, resource: str = "nvidia.com/gpu.shared", **extra: Any) -> dict[str, Any]:
    """A container that asks for `n` of a shared GPU."""
    return container(limits={resource: n}, **extra)


def pod(*containers: dict[str, Any], name: str = "p", annotations: Mapping[str, str] | None = None,
        init: Iterable[dict[str, Any]] = (), **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "team-a"}
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    body: dict[str, Any] = {"containers": list(containers) or [shared()]}
    init = list(init)
    if init:
        body["initContainers"] = init
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body}


def workload(kind: str, template: dict[str, Any]) -> dict[str, Any]:
    """A workload of `kind` whose pod template is `template`'s metadata and spec."""
    tmpl = {"metadata": {"labels": {"app": "x"}}, "spec": copy.deepcopy(template["spec"])}
    if "annotations" in template.get("metadata", {}):
        tmpl["metadata"]["annotations"] = dict(template["metadata"]["annotations"])
    api = {"Job": "batch/v1", "CronJob": "batch/v1", "ReplicationController": "v1"}.get(
        kind, "apps/v1")
    meta = {"name": "w", "namespace": "team-a"}
    if kind in ("Job", "CronJob"):
        tmpl["spec"].setdefault("restartPolicy", "Never")
    if kind == "CronJob":
        return {"apiVersion": api, "kind": kind, "metadata": meta,
                "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": tmpl}}}}
    spec: dict[str, Any] = {"template": tmpl}
    if kind == "ReplicationController":
        spec["selector"] = {"app": "x"}
    elif kind != "Job":
        spec["selector"] = {"matchLabels": {"app": "x"}}
    if kind == "StatefulSet":
        spec["serviceName"] = "w"
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}


def apply(obj: Mapping[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply a JSON Patch as the API server does: to the object as sent, failing loudly."""
    # Through JSON text, like the wire: the patch must survive serialisation too.
    ops = json.loads(json.dumps(patch))
    return jsonpatch.JsonPatch(ops).apply(copy.deepcopy(dict(obj)))


def check_valid(obj: Mapping[str, Any]) -> None:
    """The object validates against the schema of every version (those that serve dynamic
    resource allocation, for a claim or a pod that uses one), as the client's model, and
    passes Pod validation's semantic rules."""
    for version in DRA_VERSIONS if uses_dra(obj) else VERSIONS:
        kubernetes_validate.validate(dict(obj), version, strict=True)
    model = _MODEL.get(str(obj.get("kind")))
    if model is not None:
        wire = json.dumps(as_served(obj))
        parsed = _API_CLIENT.deserialize(wire, model, "application/json")
        assert _API_CLIENT.sanitize_for_serialization(parsed)["kind"] == obj["kind"]
    for template in templates_of(obj):
        check_pod_rules(template)


def uses_dra(obj: Mapping[str, Any]) -> bool:
    """A ResourceClaim or ResourceClaimTemplate, or an object whose pods name claims."""
    return claims.of_object(obj) or any(
        (t.get("spec") or {}).get("resourceClaims") for t in templates_of(obj)
    )


def as_served(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` as the API server serialises it: quantities are strings (`1` -> "1")."""
    out = copy.deepcopy(dict(obj))
    for template in templates_of(out):
        spec = template.get("spec")
        if not isinstance(spec, dict):
            continue
        for group in view.CONTAINER_GROUPS:
            for c in spec.get(group) or []:
                for part in ("limits", "requests"):
                    values = (c.get("resources") or {}).get(part) or {}
                    for k, v in values.items():
                        values[k] = str(v)
    return out


def templates_of(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pod specs `obj` carries (the Pod itself; a workload's templates)."""
    found, _ = view.templates(obj)
    return [t.generic() for t in found]


def review(obj: Mapping[str, Any], policy: policies.Policy, **options: Any) -> Decision:
    """The core's decision for `obj` (a fresh one, as every review makes)."""
    return reviewing.review_object(obj, policy=policy, **options)


def same_decision(a: Decision, b: Decision) -> None:
    """Two decisions say the same, word for word."""
    assert (a.allowed, a.patch, a.warnings, a.audit, a.mutations, a.message) == (
        b.allowed, b.patch, b.warnings, b.audit, b.mutations, b.message)
    assert [(m, v.text) for m, v in a.would_refuse] == [(m, v.text) for m, v in b.would_refuse]


def check_pod_rules(template: Mapping[str, Any]) -> None:
    """Rules of the API server's Pod validation that matter for what the webhook adds."""
    spec = template["spec"]
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    for key, value in annotations.items():
        assert _QUALIFIED.match(key.split("/")[-1]), key
        assert isinstance(value, str), key
    for t in spec.get("tolerations") or []:
        if t.get("operator") == "Exists":
            assert not t.get("value"), f"value must be empty when operator is 'Exists': {t}"
        if not t.get("key"):
            assert t.get("operator") == "Exists", f"operator must be Exists when key is empty: {t}"
    for key, value in (spec.get("nodeSelector") or {}).items():
        assert _LABEL_VALUE.match(str(value)), f"nodeSelector {key}={value}"
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is not None:
        terms = required.get("nodeSelectorTerms") or []
        assert terms, "nodeSelectorTerms: Required value"
        for term in terms:
            for e in term.get("matchExpressions") or []:
                if e["operator"] in ("In", "NotIn"):
                    assert e.get("values"), f"values required for {e}"
                    assert all(_LABEL_VALUE.match(v) for v in e["values"]), e
    runtime = spec.get("runtimeClassName")
    if runtime is not None:
        assert re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", runtime), runtime
    for group in view.CONTAINER_GROUPS:
        for c in spec.get(group) or []:
            names = [e["name"] for e in c.get("env") or []]
            assert all(_ENV_NAME.match(n) for n in names), names
            res = c.get("resources") or {}
            limits = res.get("limits") or {}
            for k, v in (res.get("requests") or {}).items():
                if "/" in k and not k.startswith("kubernetes.io/") and k in limits:
                    assert str(limits[k]) == str(v), f"{k}: must be equal to limit"


def admit(
    obj: Mapping[str, Any], policy: policies.Policy
) -> tuple[Decision, dict[str, Any] | None]:
    """Review `obj` and, when allowed, apply the patch, validate the result and check that a
    second pass (reinvocation) wants nothing more. Returns the decision and the result."""
    decision = reviewing.review_object(obj, policy=policy)
    if not decision.allowed:
        assert decision.patch == [], "a denial carries no patch"
        return decision, None
    result = apply(obj, decision.patch)
    check_valid(result)
    again = reviewing.review_object(result, policy=policy)
    assert again.allowed, again.message
    assert again.patch == [], f"not idempotent: second pass wants {again.patch}"
    if result.get("kind") == "Pod" or claims.of_object(result):
        # What the validating webhook sees after the mutating one: nothing missing.
        checked = reviewing.review_object(result, policy=policy, mutate=False, require=True)
        assert checked.allowed, checked.message
    return decision, result


def env_of(
    result: Mapping[str, Any], name: str = "main", group: str = "containers"
) -> dict[str, str]:
    found = templates_of(result)
    assert found
    for c in found[0]["spec"].get(group) or []:
        if c["name"] == name:
            return {e["name"]: e.get("value") for e in c.get("env") or []}
    raise AssertionError(f"no container {name}")


_PLURALS = {"Pod": "pods", "Deployment": "deployments", "ReplicaSet": "replicasets",
            "StatefulSet": "statefulsets", "DaemonSet": "daemonsets", "Job": "jobs",
            "CronJob": "cronjobs", "ReplicationController": "replicationcontrollers",
            "ResourceClaim": "resourceclaims", "ResourceClaimTemplate": "resourceclaimtemplates"}


def plural(kind: str) -> str:
    """The resource name of a kind, as webhook rules name it."""
    return _PLURALS.get(kind, kind.lower() + "s")


def admission_review(
    obj: Mapping[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: Mapping[str, Any] | None = None,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
    sub_resource: str | None = None,
) -> dict[str, Any]:
    """An AdmissionReview v1 request as the API server sends it for `obj`."""
    source = obj if obj is not None else old
    assert source is not None
    group, _, version = str(source["apiVersion"]).rpartition("/")
    kind = str(source["kind"])
    resource = {"group": group, "version": version, "resource": plural(kind)}
    meta = source.get("metadata") or {}
    options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions",
                    "DELETE": "DeleteOptions"}.get(operation)
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": resource,
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": resource,
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", "team-a"),
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": as_served(obj) if obj is not None else None,
        "oldObject": as_served(old) if old is not None else None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind} if options_kind else None,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


WORKLOAD_KINDS = sorted(k.kind for k in kinds.BUILTIN_KINDS)


_POD_FIELD = re.compile(r"(?<![\w.\[])(spec|metadata)\.")


def in_template(message: str, kind: str) -> str:
    """A pod's message as the same rule words it for the pod template of a `kind`: each
    field named where it is in the workload."""
    prefix = "spec.jobTemplate.spec.template." if kind == "CronJob" else "spec.template."
    return _POD_FIELD.sub(lambda m: prefix + m.group(0), message)
