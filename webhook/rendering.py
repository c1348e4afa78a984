"""The webhook configurations for a set of policies: what `render` prints and deploy/ holds.

The server makes no API call to learn a namespace's policy: the API server does the
matching, through one webhook entry per way a namespace can be labelled. Every entry
requires `gpu-share.io/enabled: "true"` and leaves out kube-system and the webhook's own
namespace (`kubernetes.io/metadata.name NotIn`); on top of that:

    entry                           gpu-share.io/policy of the namespace        path
    default.gpu-share.io            absent                                      default
    <name>.policies.gpu-share.io    <name>  (the default policy also: "")       <name>
    unknown-policy.gpu-share.io     present, and no policy has that name        _unknown

`namespaces.policy_name` reads an empty label as the default policy; the `default` entry
takes it too so that the cluster and the offline `mutate` agree. The selectors are disjoint
and cover every opted-in namespace: a request reaches exactly one entry of each
configuration. The special entries have three-part names and policy entries four, so no
policy name can collide with them.

`matchConditions` (CEL, evaluated by the API server before it calls anyone) keep everything
else away from the webhook, which is what makes `failurePolicy: Fail` safe for the rest of
the cluster: an entry is called only for a Pod or pod template (a workload's
`spec.template`, a CronJob's `spec.jobTemplate.spec.template`) with a container or init
container that asks for one of the policy's shared resources (requests or limits) or sets
NVIDIA_VISIBLE_DEVICES or a CUDA_MPS_* variable; never for a mirror pod (the kubelet's
static pods cannot be changed, and refusing one only hides it from the API). The catch-all
entry cannot know which names the namespace meant as shared, so it takes every NVIDIA GPU
resource: a GPU workload in a namespace whose label is wrong is refused and told why; a
workload without GPUs there goes on as anywhere else.

The conditions must hold on any object the rules send: every field is guarded with has(),
since a CEL error counts as a failure and, with Fail, would refuse the request.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from webhook import mutating, namespaces, reviews
from webhook.policies import DEFAULT_POLICY, PolicySet

ADMISSION_API_VERSION = "admissionregistration.k8s.io/v1"
MUTATING_KIND = "MutatingWebhookConfiguration"
VALIDATING_KIND = "ValidatingWebhookConfiguration"

DOMAIN = "gpu-share.io"
# Entry names (fully qualified, unique within a configuration; see the module docstring).
DEFAULT_ENTRY = f"{DEFAULT_POLICY}.{DOMAIN}"
UNKNOWN_ENTRY = f"unknown-policy.{DOMAIN}"

CERT_MANAGER_ANNOTATION = "cert-manager.io/inject-ca-from"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
SYSTEM_NAMESPACE = "kube-system"
SERVICE_PORT = 443

FailurePolicy = Literal["Fail", "Ignore"]
FAILURE_POLICIES: tuple[FailurePolicy, ...] = ("Fail", "Ignore")
# Short: the API server waits this long on every GPU-sharing create, and a review takes
# milliseconds. Kubernetes allows 1..30 (default 10).
DEFAULT_TIMEOUT_SECONDS = 5
TIMEOUT_RANGE = range(1, 31)

# The workload kinds whose pod templates the validating webhook reviews (resource names as
# the rules want them), by API group; their kinds are the keys of mutating.TEMPLATE_PATHS.
WORKLOAD_RESOURCES: dict[str, tuple[str, ...]] = {
    "apps": ("deployments", "replicasets", "statefulsets", "daemonsets"),
    "batch": ("jobs", "cronjobs"),
}

# matchCondition names (qualified names, shown in API server logs).
CONDITION_NOT_MIRROR = "not-a-mirror-pod"
CONDITION_SHARED_GPU = "asks-for-a-shared-gpu-or-sets-gpu-env"
CONDITION_ANY_GPU = "asks-for-a-gpu-or-sets-gpu-env"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_PLAIN_CEL_STRING = re.compile(r"[A-Za-z0-9./_+-]*")

LABELS = {
    "app.kubernetes.io/name": "gpu-share-webhook",
    "app.kubernetes.io/part-of": "gpu-share-webhook",
}


def policy_entry(name: str) -> str:
    """The name of the entry for namespaces labelled `gpu-share.io/policy: <name>`."""
    return f"{name}.policies.{DOMAIN}"


def render(
    policies: PolicySet,
    *,
    service: str,
    namespace: str,
    name: str,
    ca_bundle: bytes | None = None,
    failure_policy: FailurePolicy = "Fail",
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    cert_manager_certificate: str | None = None,
) -> list[dict[str, Any]]:
    """The MutatingWebhookConfiguration and ValidatingWebhookConfiguration for `policies`.

    `ca_bundle` is the PEM of the CA that signed the serving certificate; leave it out when
    something else fills `caBundle` in (cert-manager's CA injector for
    `cert_manager_certificate` "NAMESPACE/NAME", or `gpu-share-webhook certs --inject-ca`).
    Raises ValueError for options Kubernetes would refuse.
    """
    _check(
        service=service,
        namespace=namespace,
        name=name,
        failure_policy=failure_policy,
        timeout_seconds=timeout_seconds,
        cert_manager_certificate=cert_manager_certificate,
        ca_bundle=ca_bundle,
    )

    def settings(endpoint: reviews.Endpoint, rules: list[dict[str, Any]]) -> _Settings:
        return _Settings(
            endpoint=endpoint,
            rules=rules,
            service=service,
            namespace=namespace,
            ca_bundle=ca_bundle,
            failure_policy=failure_policy,
            timeout_seconds=timeout_seconds,
        )

    # Pods alone for mutation (workload templates are not changed: their pods are, when
    # created); validation also refuses workloads whose template breaks a rule.
    mutating_entries = _entries(policies, settings("mutate", _pod_rules()))
    validating_entries = _entries(policies, settings("validate", _pod_rules() + _workload_rules()))
    metadata: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if cert_manager_certificate:
        metadata["annotations"] = {CERT_MANAGER_ANNOTATION: cert_manager_certificate}
    return [
        {
            "apiVersion": ADMISSION_API_VERSION,
            "kind": MUTATING_KIND,
            "metadata": copy.deepcopy(metadata),
            "webhooks": mutating_entries,
        },
        {
            "apiVersion": ADMISSION_API_VERSION,
            "kind": VALIDATING_KIND,
            "metadata": copy.deepcopy(metadata),
            "webhooks": validating_entries,
        },
    ]


def _check(
    *,
    service: str,
    namespace: str,
    name: str,
    failure_policy: str,
    timeout_seconds: int,
    cert_manager_certificate: str | None,
    ca_bundle: bytes | None,
) -> None:
    if not _is_dns_label(service):
        raise ValueError(f"service {service!r} is not a valid Service name (a DNS label)")
    if not _is_dns_label(namespace):
        raise ValueError(f"namespace {namespace!r} is not a valid namespace name")
    if not _is_dns_subdomain(name):
        raise ValueError(f"name {name!r} is not a valid object name (a DNS subdomain)")
    if failure_policy not in FAILURE_POLICIES:
        raise ValueError(f"failure policy {failure_policy!r} is not one of Fail, Ignore")
    if timeout_seconds not in TIMEOUT_RANGE:
        raise ValueError(f"timeout {timeout_seconds}s is outside what Kubernetes allows (1..30)")
    if cert_manager_certificate is not None:
        ns, sep, cert = cert_manager_certificate.partition("/")
        if not sep or not _is_dns_label(ns) or not _is_dns_subdomain(cert):
            raise ValueError(
                f"cert-manager certificate {cert_manager_certificate!r} is not NAMESPACE/NAME"
            )
        if ca_bundle is not None:
            # The CA injector would overwrite the bundle: two sources of truth, one silently lost.
            raise ValueError("give a CA bundle or a cert-manager certificate, not both")


def _is_dns_label(value: str) -> bool:
    return len(value) <= 63 and _DNS_LABEL.fullmatch(value) is not None


def _is_dns_subdomain(value: str) -> bool:
    return len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value) is not None


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True, slots=True)
class _Settings:
    """What every entry of one configuration shares."""

    endpoint: reviews.Endpoint
    rules: list[dict[str, Any]]
    service: str
    namespace: str
    ca_bundle: bytes | None
    failure_policy: FailurePolicy
    timeout_seconds: int


def _entries(policies: PolicySet, settings: _Settings) -> list[dict[str, Any]]:
    names = policies.names
    has_default = DEFAULT_POLICY in names
    # Label values that namespaces.policy_name reads as a policy: the names, and "" for the
    # default policy. Any other value is the catch-all's.
    known_values = [*names, ""] if has_default else list(names)
    # Namespaces without the label get the default policy even when no policy has that name:
    # the server then refuses GPU workloads there with "policy default does not exist".
    unlabelled = (
        shared_gpu_condition(policies.policies[DEFAULT_POLICY].shared_resources)
        if has_default
        else any_gpu_condition(())
    )
    out = [
        _entry(
            DEFAULT_ENTRY,
            DEFAULT_POLICY,
            {"key": namespaces.POLICY_LABEL, "operator": "DoesNotExist"},
            unlabelled,
            settings,
        )
    ]
    for policy_name in names:
        values = [policy_name, ""] if policy_name == DEFAULT_POLICY else [policy_name]
        out.append(
            _entry(
                policy_entry(policy_name),
                policy_name,
                {"key": namespaces.POLICY_LABEL, "operator": "In", "values": values},
                shared_gpu_condition(policies.policies[policy_name].shared_resources),
                settings,
            )
        )
    all_shared = {r for p in policies.policies.values() for r in p.shared_resources}
    out.append(
        _entry(
            UNKNOWN_ENTRY,
            reviews.UNKNOWN_POLICY,
            {"key": namespaces.POLICY_LABEL, "operator": "NotIn", "values": known_values},
            any_gpu_condition(all_shared),
            settings,
        )
    )
    return out


def _entry(
    entry_name: str,
    path: str,
    policy_label: dict[str, Any],
    condition: dict[str, str],
    settings: _Settings,
) -> dict[str, Any]:
    client: dict[str, Any] = {
        "service": {
            "name": settings.service,
            "namespace": settings.namespace,
            "path": f"/{settings.endpoint}/{path}",
            "port": SERVICE_PORT,
        }
    }
    if settings.ca_bundle is not None:
        client["caBundle"] = base64.b64encode(settings.ca_bundle).decode("ascii")
    expressions: list[dict[str, Any]] = [
        {"key": namespaces.ENABLED_LABEL, "operator": "In", "values": ["true"]},
        {
            "key": namespaces.NAME_LABEL,
            "operator": "NotIn",
            "values": sorted({SYSTEM_NAMESPACE, settings.namespace}),
        },
    ]
    if policy_label["operator"] == "NotIn":
        # NotIn alone also matches namespaces without the label: those are the default's.
        expressions.append({"key": namespaces.POLICY_LABEL, "operator": "Exists"})
    expressions.append(policy_label)
    entry: dict[str, Any] = {
        "name": entry_name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client,
        "failurePolicy": settings.failure_policy,
        "matchPolicy": "Equivalent",
        "namespaceSelector": {"matchExpressions": expressions},
        "rules": copy.deepcopy(settings.rules),
        "sideEffects": "None",
        "timeoutSeconds": settings.timeout_seconds,
        "matchConditions": [not_mirror_condition(), condition],
    }
    if settings.endpoint == "mutate":
        # The webhook is idempotent (SPEC.md), so it may see a pod again after later
        # mutating webhooks changed it, and re-check what they added.
        entry["reinvocationPolicy"] = "IfNeeded"
    return entry


def _pod_rules() -> list[dict[str, Any]]:
    # Pods only on CREATE: their containers, resources and scheduling are immutable after.
    return [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]


def _workload_rules() -> list[dict[str, Any]]:
    # Workloads on CREATE and UPDATE: a template that breaks a rule is refused at `kubectl
    # apply`, not later as events on a controller nobody watches.
    return [
        {
            "apiGroups": [group],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": list(resources),
            "scope": "Namespaced",
        }
        for group, resources in WORKLOAD_RESOURCES.items()
    ]


# --------------------------------------------------------------------------- CEL


def not_mirror_condition() -> dict[str, str]:
    """Skip mirror pods: the kubelet makes them for static pods, which no webhook can change."""
    return {
        "name": CONDITION_NOT_MIRROR,
        "expression": (
            "!has(object.metadata) || !has(object.metadata.annotations) ||\n"
            f"!({cel_string(MIRROR_ANNOTATION)} in object.metadata.annotations)"
        ),
    }


def shared_gpu_condition(resources: Iterable[str]) -> dict[str, str]:
    """Objects with a container that asks for one of `resources` or sets the GPU env vars."""
    return {
        "name": CONDITION_SHARED_GPU,
        "expression": _asks_expression(sorted(set(resources)), prefixes=()),
    }


def any_gpu_condition(resources: Iterable[str]) -> dict[str, str]:
    """Like `shared_gpu_condition`, for any NVIDIA GPU resource (and `resources` besides)."""
    prefixes = tuple(mutating.GPU_PREFIXES)
    extra = sorted(r for r in set(resources) if not r.startswith(prefixes))
    return {"name": CONDITION_ANY_GPU, "expression": _asks_expression(extra, prefixes=prefixes)}


# The pod specs an object carries, whatever its kind: a Pod's own spec, the template of a
# Deployment, ReplicaSet, StatefulSet, DaemonSet or Job, and a CronJob's job template.
# Built as a list so that one `exists` covers them all; each is guarded, since only one of
# them is there.
_POD_SPECS = (
    "(\n"
    "  (has(object.spec) && has(object.spec.containers) ? [object.spec] : []) +\n"
    "  (has(object.spec) && has(object.spec.template) && has(object.spec.template.spec)\n"
    "    ? [object.spec.template.spec] : []) +\n"
    "  (has(object.spec) && has(object.spec.jobTemplate) && has(object.spec.jobTemplate.spec)\n"
    "    && has(object.spec.jobTemplate.spec.template)\n"
    "    && has(object.spec.jobTemplate.spec.template.spec)\n"
    "    ? [object.spec.jobTemplate.spec.template.spec] : [])\n"
    ")"
)
_CONTAINERS = (
    "((has(s.containers) ? s.containers : []) +\n"
    "   (has(s.initContainers) ? s.initContainers : []))"
)


def _asks_expression(names: Sequence[str], *, prefixes: Sequence[str]) -> str:
    tests = []
    if names:
        tests.append(f"k in [{', '.join(cel_string(n) for n in names)}]")
    tests.extend(f"k.startsWith({cel_string(p)})" for p in prefixes)
    if not tests:
        raise ValueError("a resource condition needs resource names or prefixes")
    key_test = " || ".join(tests)
    visible = cel_string(mutating.VISIBLE_DEVICES)
    mps = cel_string("CUDA_MPS_")
    return (
        f"{_POD_SPECS}.exists(s,\n"
        f"  {_CONTAINERS}.exists(c,\n"
        "    (has(c.resources) && has(c.resources.limits) &&\n"
        f"      c.resources.limits.exists(k, {key_test})) ||\n"
        "    (has(c.resources) && has(c.resources.requests) &&\n"
        f"      c.resources.requests.exists(k, {key_test})) ||\n"
        "    (has(c.env) && c.env.exists(e, has(e.name) &&\n"
        f"      (e.name == {visible} || e.name.startsWith({mps}))))))"
    )


def cel_string(value: str) -> str:
    """A CEL string literal for `value`."""
    if _PLAIN_CEL_STRING.fullmatch(value):
        return f"'{value}'"
    # JSON string syntax is a subset of CEL's double-quoted strings.
    return json.dumps(value)
