"""The webhook configurations for a set of policies: what `render` prints and deploy/ holds.

The server makes no API call to learn a namespace's policy: the API server does the
matching, through one webhook entry per way a namespace can be labelled. Every entry that
reviews pods and workloads requires `gpu-share.io/enabled: "true"` and leaves out
kube-system and the webhook's own namespace (`kubernetes.io/metadata.name NotIn`); on top
of that, by two more labels of the namespace:

    entry                                  gpu-share.io/policy   PS     path
    default.gpu-share.io                   absent                other  default
    default.baseline.gpu-share.io          absent                b/r    default/baseline
    <name>.policies.gpu-share.io           <name> (default: "")  other  <name>
    <name>.baseline.policies.gpu-share.io  <name> (default: "")  b/r    <name>/baseline
    unknown-policy.gpu-share.io            names no policy       other  _unknown
    unknown-policy.baseline.gpu-share.io   names no policy       b/r    _unknown/baseline

PS is the namespace's `pod-security.kubernetes.io/enforce`: "b/r" is `In [baseline,
restricted]`, "other" `NotIn [baseline, restricted]`, which namespaces without the label
match too (their level is the cluster's default, `privileged` unless the API server's
PodSecurity configuration says otherwise: the webhook checks host access itself there).
The path is what follows `/mutate/` or `/validate/`; `<name>/baseline` tells the server that
Pod Security enforces baseline's host-access checks in the namespace, so that rule
`host-access` is left to it (unless the policy's `hostAccess.trustPodSecurity` is false).

`namespaces.policy_name` reads an empty label as the default policy; the `default` entry
takes it too so that the cluster and the offline `mutate` agree. The selectors are disjoint
and cover every opted-in namespace: a pod or workload reaches exactly one entry of each
configuration. One more validating entry, `namespace-labels.gpu-share.io`
(`namespace_entry`), reviews Namespaces themselves, only to warn of near misses of these
labels. Entry names cannot collide: the special entries have three labels, or four with
`baseline` second; policy entries have four with `policies` third, or five with
`baseline.policies` second and third (a policy name is one DNS label).

`matchConditions` (CEL, evaluated by the API server before it calls anyone) keep everything
else away from the webhook, which is what makes `failurePolicy: Fail` safe for the rest of
the cluster. Never a mirror pod (the kubelet's static pods cannot be changed, and refusing one
only hides it from the API). Then an entry is called for:

- a Pod UPDATE (no subresource: labels, annotations, the few mutable spec fields; or of
  `pods/status`, which keeps the metadata it is sent with) only when it adds or changes an
  annotation of `names.CDI_ANNOTATION_PREFIXES`, and a `pods/binding` (whose annotations are
  copied onto the pod) only when it carries one; only where the policy's
  `denyCdiAnnotations` is on (route 8): no other Pod update ever waits on the webhook;
- every Pod CREATE, when its policy's `voidVisibleDevicesWithoutGpu` is on (escape route 2:
  each container that asks for no GPU gets NVIDIA_VISIBLE_DEVICES=void), and every update
  of a pod's ephemeral containers (`kubectl debug`, route 3);
- otherwise, and for workloads, only a pod spec (a Pod's, or a template of a workload) that
  one of the rules can refuse: a container that asks for a GPU, sets an NVIDIA_* or
  CUDA_MPS_* variable, is privileged or mounts something at a path with
  `nvidia-container-devices` in it; a hostPath volume; resource claims; a `cdi.k8s.io/`
  annotation; and where rule `host-access` applies (its switch `denyHostAccess` on, and the
  namespace not enforcing Pod Security baseline, or the policy not trusting it): hostPID,
  hostIPC, hostNetwork, added capabilities (route 9).

The catch-all entry applies the rules that need no policy (`rules.Rule.always`), so it is
called as a policy with the default switches (route 2 on) would be.

The conditions must hold on any object the rules send: every field is guarded with has(),
since a CEL error counts as a failure and, with Fail, would refuse the request. That includes
`request`: the API server builds it from the AdmissionRequest as JSON with its `omitempty`
fields left out, so `request.subResource` is absent when there is none; `oldObject` is null
on CREATE.

`describe` reads back, from rendered configurations, what each entry is sent and so what
waits on the webhook while it cannot answer (docs/install.md lists it from `SENT`).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from webhook.engine import namespaces, rules
from webhook.policy import kinds as workload_kinds
from webhook.policy import names
from webhook.policy.policies import DEFAULT_POLICY, PolicySet, join_path
from webhook.server import codec

ADMISSION_API_VERSION = "admissionregistration.k8s.io/v1"
MUTATING_KIND = "MutatingWebhookConfiguration"
VALIDATING_KIND = "ValidatingWebhookConfiguration"

DOMAIN = names.DOMAIN
# Entry names (fully qualified, unique within a configuration; see the module docstring).
DEFAULT_ENTRY = f"{DEFAULT_POLICY}.{DOMAIN}"
UNKNOWN_ENTRY = f"unknown-policy.{DOMAIN}"
# The label that sets the entries of namespaces enforcing Pod Security baseline or
# restricted apart (their paths end in it too).
BASELINE = names.POD_SECURITY_SEGMENT
DEFAULT_BASELINE_ENTRY = f"{DEFAULT_POLICY}.{BASELINE}.{DOMAIN}"
UNKNOWN_BASELINE_ENTRY = f"unknown-policy.{BASELINE}.{DOMAIN}"
# The validating entry that warns of near misses of the namespace labels (`namespace_entry`).
NAMESPACE_ENTRY = f"namespace-labels.{DOMAIN}"

SERVICE_PORT = 443

FailurePolicy = Literal["Fail", "Ignore"]
FAILURE_POLICIES: tuple[FailurePolicy, ...] = ("Fail", "Ignore")
# Short: the API server waits this long on every GPU-sharing create, and a review takes
# milliseconds. Kubernetes allows 1..30 (default 10).
DEFAULT_TIMEOUT_SECONDS = names.WEBHOOK_TIMEOUT_SECONDS
TIMEOUT_RANGE = range(1, 31)

# matchCondition names (qualified names, shown in API server logs).
CONDITION_NOT_MIRROR = "not-a-mirror-pod"
CONDITION_EVERY_POD = "every-pod-or-what-a-rule-can-refuse"
CONDITION_RULES = "what-a-rule-can-refuse"
CONDITION_NAMESPACE_LABELS = "a-label-like-gpu-shares"

_DNS_LABEL = re.compile(names.DNS1123_LABEL)
_DNS_SUBDOMAIN = re.compile(names.DNS1123_SUBDOMAIN)
_PLAIN_CEL_STRING = re.compile(r"[A-Za-z0-9./_+-]*")

LABELS = names.COMMON_LABELS


def policy_entry(name: str, *, pod_security: bool = False) -> str:
    """The name of the entry for namespaces labelled `gpu-share.io/policy: <name>` (and
    enforcing Pod Security baseline or restricted, with `pod_security`)."""
    return f"{name}.{BASELINE}.policies.{DOMAIN}" if pod_security else f"{name}.policies.{DOMAIN}"


def pod_security_requirement(*, enforced: bool) -> dict[str, Any]:
    """The namespace selector requirement of the entries for namespaces that enforce Pod
    Security baseline or restricted (`enforced`), or of the others (absent label included)."""
    return {
        "key": names.POD_SECURITY_ENFORCE_LABEL,
        "operator": "In" if enforced else "NotIn",
        "values": list(names.POD_SECURITY_HOST_ACCESS_LEVELS),
    }


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
    kinds: Sequence[workload_kinds.Kind] | None = None,
) -> list[dict[str, Any]]:
    """The MutatingWebhookConfiguration and ValidatingWebhookConfiguration for `policies`.

    `ca_bundle` is the PEM of the CA that signed the serving certificate; leave it out when
    something else fills `caBundle` in (cert-manager's CA injector for
    `cert_manager_certificate` "NAMESPACE/NAME", or `gpu-share-webhook certs --inject-ca`).
    `kinds` are the workload kinds whose pod templates the validating webhook reviews (the
    built-in ones and those of the shipped WorkloadKinds file when None).
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

    if kinds is None:
        kinds = workload_kinds.all_kinds()

    def settings(endpoint: codec.Endpoint, rules: list[dict[str, Any]]) -> _Settings:
        return _Settings(
            endpoint=endpoint,
            rules=rules,
            kinds=tuple(kinds) if endpoint == "validate" else (),
            service=service,
            namespace=namespace,
            ca_bundle=ca_bundle,
            failure_policy=failure_policy,
            timeout_seconds=timeout_seconds,
        )

    # Pods alone for mutation (workload templates are not changed: their pods are, when
    # created); validation also refuses workloads whose template breaks a rule.
    mutating_entries = _entries(policies, settings("mutate", _pod_rules() + claim_rules()))
    validating_entries = _entries(
        policies, settings("validate", _pod_rules() + claim_rules() + _workload_rules(kinds))
    )
    validating_entries.append(namespace_entry(settings("validate", [])))
    metadata: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if cert_manager_certificate:
        metadata["annotations"] = {names.CERT_MANAGER_ANNOTATION: cert_manager_certificate}
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

    endpoint: codec.Endpoint
    rules: list[dict[str, Any]]
    # The workload kinds the entries review (none for the mutating configuration).
    kinds: tuple[workload_kinds.Kind, ...]
    service: str
    namespace: str
    ca_bundle: bytes | None
    failure_policy: FailurePolicy
    timeout_seconds: int


def _entries(policies: PolicySet, settings: _Settings) -> list[dict[str, Any]]:
    return [
        _entry(name, path, expressions, entry_condition(policies, path, settings.kinds), settings)
        for name, path, expressions in _selectors(policies, settings.namespace)
    ]


def _selectors(
    policies: PolicySet, webhook_namespace: str
) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """The entries that review pods and workloads, in order, as (entry name, policy path,
    the requirements of its namespace selector): what both configurations select alike."""
    known = policies.names
    has_default = DEFAULT_POLICY in known
    # Label values that namespaces.policy_name reads as a policy: the names, and "" for the
    # default policy. Any other value is the catch-all's.
    known_values = [*known, ""] if has_default else list(known)

    # (entry name, its name under Pod Security, the policy name in the path, the
    # gpu-share.io/policy requirements)
    bases: list[tuple[str, str, str, list[dict[str, Any]]]] = [
        (
            DEFAULT_ENTRY,
            DEFAULT_BASELINE_ENTRY,
            DEFAULT_POLICY,
            [{"key": names.POLICY_LABEL, "operator": "DoesNotExist"}],
        )
    ]
    for policy_name in known:
        values = [policy_name, ""] if policy_name == DEFAULT_POLICY else [policy_name]
        bases.append(
            (
                policy_entry(policy_name),
                policy_entry(policy_name, pod_security=True),
                policy_name,
                [{"key": names.POLICY_LABEL, "operator": "In", "values": values}],
            )
        )
    bases.append(
        (
            UNKNOWN_ENTRY,
            UNKNOWN_BASELINE_ENTRY,
            names.UNKNOWN_POLICY_PATH,
            # NotIn alone also matches namespaces without the label: those are the default's.
            [
                {"key": names.POLICY_LABEL, "operator": "Exists"},
                {"key": names.POLICY_LABEL, "operator": "NotIn", "values": known_values},
            ],
        )
    )
    out = []
    for entry_name, baseline_name, policy_name, policy_label in bases:
        for enforced in (False, True):
            expressions: list[dict[str, Any]] = [
                {"key": names.ENABLED_LABEL, "operator": "In", "values": ["true"]},
                {
                    "key": names.NAME_LABEL,
                    "operator": "NotIn",
                    "values": sorted({names.SYSTEM_NAMESPACE, webhook_namespace}),
                },
                *policy_label,
                pod_security_requirement(enforced=enforced),
            ]
            out.append(
                (
                    baseline_name if enforced else entry_name,
                    join_path(policy_name, pod_security=enforced),
                    expressions,
                )
            )
    return out


def entry_condition(
    policies: PolicySet, path: str, kinds: Sequence[workload_kinds.Kind]
) -> dict[str, str]:
    """The condition of the entry at `path` (`<name>` or `<name>/baseline`): what the
    policy the server applies there can refuse or change. A namespace whose policy is not in
    force is guarded as if by a policy with the default switches (see `rules.Rule.always`)."""
    policy = policies.governing(path)
    switches = policy.rules
    return match_condition(
        kinds,
        policy.shared_resources,
        every_pod=policy.unavailable is not None or switches.void_visible_devices_without_gpu,
        host_access=switches.deny_host_access and not policy.pod_security,
        cdi_updates=switches.deny_cdi_annotations,
        # Every entry is sent the claims of every GPU class of the set: a policy with a dra
        # section judges them; one without it, or one not in force, refuses them (a claim
        # made there now would serve pods once the namespace's policy governs DRA).
        claim_classes=policies.gpu_classes,
    )


def _entry(
    entry_name: str,
    path: str,
    expressions: list[dict[str, Any]],
    condition: dict[str, str],
    settings: _Settings,
) -> dict[str, Any]:
    client = _client_config(settings, f"/{settings.endpoint}/{path}")
    entry: dict[str, Any] = {
        "name": entry_name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client,
        "failurePolicy": settings.failure_policy,
        "matchPolicy": "Equivalent",
        "namespaceSelector": {"matchExpressions": expressions},
        "rules": _own_rules(settings.rules),
        "sideEffects": "None",
        "timeoutSeconds": settings.timeout_seconds,
        "matchConditions": [not_mirror_condition(), condition],
    }
    if settings.endpoint == "mutate":
        # The webhook is idempotent, so it may see a pod again after later
        # mutating webhooks changed it, and re-check what they added.
        entry["reinvocationPolicy"] = "IfNeeded"
    return entry


def _own_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of `rules` (strings and lists of strings) for one entry: entries sharing a list
    would be written as YAML aliases, and a change to one would change the others."""
    return [{k: list(v) if isinstance(v, list) else v for k, v in rule.items()} for rule in rules]


def _client_config(settings: _Settings, path: str) -> dict[str, Any]:
    """How the API server reaches the webhook at `path`: the Service, and the CA when given."""
    client: dict[str, Any] = {
        "service": {
            "name": settings.service,
            "namespace": settings.namespace,
            "path": path,
            "port": SERVICE_PORT,
        }
    }
    if settings.ca_bundle is not None:
        client["caBundle"] = base64.b64encode(settings.ca_bundle).decode("ascii")
    return client


def namespace_entry(settings: _Settings) -> dict[str, Any]:
    """The entry that tells whoever labels a namespace about a near miss of the opt-in or
    policy label (`gpu-share.io/enabled=True`), or a policy label that names no policy: the
    API server matches those labels exactly, so such a namespace never reaches the other
    entries, and its pods pass or are refused with nobody told why. Warnings only, and
    `failurePolicy: Ignore` whatever the others say: no namespace write ever waits on it."""
    client = _client_config(settings, f"/validate/{DEFAULT_POLICY}")
    return {
        "name": NAMESPACE_ENTRY,
        **namespace_entry_fields(),
        "clientConfig": client,
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": names.NAME_LABEL,
                    "operator": "NotIn",
                    "values": sorted({names.SYSTEM_NAMESPACE, settings.namespace}),
                }
            ]
        },
        "timeoutSeconds": settings.timeout_seconds,
    }


def namespace_entry_fields() -> dict[str, Any]:
    """What the namespace-labels entry has whatever the options (the chart takes it whole)."""
    return {
        "admissionReviewVersions": ["v1"],
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["namespaces"],
                "scope": "Cluster",
            }
        ],
        "sideEffects": "None",
        "matchConditions": [namespace_condition()],
    }


def namespace_condition() -> dict[str, str]:
    """CEL: a label whose key has "share" or "gpu" in it (any case), other than the opt-in
    label with its right value: what `namespaces.label_near_misses` and the policy-label
    check can have something to say about. Any other namespace write never reaches the
    webhook."""
    enabled = cel_string(names.ENABLED_LABEL)
    return {
        "name": CONDITION_NAMESPACE_LABELS,
        "expression": (
            "has(object.metadata) && has(object.metadata.labels) &&\n"
            "object.metadata.labels.exists(k,\n"
            "  k.matches('(?i)share|gpu') &&\n"
            f"  !(k == {enabled} && object.metadata.labels[k] == 'true'))"
        ),
    }


def _pod_rules() -> list[dict[str, Any]]:
    return [
        # Pods on CREATE: their containers, resources and scheduling are immutable after.
        # UPDATE only for the CDI annotations a runtime may read when it starts the pod
        # (route 8); the matchConditions leave every other Pod update out.
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        },
        # ...except for ephemeral containers, which `kubectl debug` adds by updating this
        # subresource (escape route 3).
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": [f"pods/{codec.EPHEMERAL_CONTAINERS}"],
            "scope": "Namespaced",
        },
        # Two more ways to a Pod's annotations (route 8): a status update keeps the metadata
        # it is sent with, and a Binding's annotations are copied onto the pod it binds.
        # The matchConditions send only those that add or change a CDI annotation.
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": [f"pods/{codec.STATUS}"],
            "scope": "Namespaced",
        },
        # (`bindings` is the older endpoint for the same: POST .../namespaces/NS/bindings.)
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": [f"pods/{codec.BINDING}", "bindings"],
            "scope": "Namespaced",
        },
    ]


def claim_rules() -> list[dict[str, Any]]:
    """ResourceClaims and ResourceClaimTemplates on CREATE: their spec cannot change after
    (the API server refuses any update of it). Only v1 is named: with `matchPolicy:
    Equivalent` a write through an older version (v1beta1, v1beta2) is converted and sent
    as v1."""
    return [
        {
            "apiGroups": [names.DRA_GROUP],
            "apiVersions": [names.DRA_VERSION],
            "operations": ["CREATE"],
            "resources": list(names.CLAIM_RESOURCES),
            "scope": "Namespaced",
        }
    ]


def _workload_rules(kinds: Sequence[workload_kinds.Kind]) -> list[dict[str, Any]]:
    """Workloads on CREATE and UPDATE: a template that breaks a rule is refused at `kubectl
    apply`, not later as events on a controller nobody watches. One rule per API group and
    version set, resources in the order the kinds are listed."""
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for kind in kinds:
        grouped.setdefault((kind.group, kind.versions), []).append(kind.resource)
    return [
        {
            "apiGroups": [group],
            "apiVersions": list(versions),
            "operations": ["CREATE", "UPDATE"],
            "resources": resources,
            "scope": "Namespaced",
        }
        for (group, versions), resources in grouped.items()
    ]


# --------------------------------------------------------------------------- CEL


def not_mirror_condition() -> dict[str, str]:
    """Skip mirror pods: the kubelet makes them for static pods, which no webhook can change.
    Only Pods: on any other object (a ResourceClaim, a workload) the annotation is one any
    user may write, and means nothing."""
    return {
        "name": CONDITION_NOT_MIRROR,
        "expression": (
            f"!({_IS_POD}) ||\n"
            "!has(object.metadata) || !has(object.metadata.annotations) ||\n"
            f"!({cel_string(names.MIRROR_ANNOTATION)} in object.metadata.annotations)"
        ),
    }


def match_condition(
    kinds: Sequence[workload_kinds.Kind],
    resources: Iterable[str],
    *,
    every_pod: bool,
    host_access: bool,
    cdi_updates: bool,
    claim_classes: Sequence[str] = (),
) -> dict[str, str]:
    """What an entry is called for (see the module docstring): `every_pod` for a policy with
    the route 2 switch on; `host_access` where rule host-access applies (route 9);
    `cdi_updates` where rule cdi-annotations does (Pod updates, route 8); `resources` are
    the policy's shared resources (any NVIDIA GPU resource counts anyway); `kinds` the
    workload kinds whose templates are reviewed; `claim_classes` the GPU device classes of
    the policy's `dra` section (none: no claim is sent)."""
    if every_pod:
        pods_clause = f"({_IS_POD})"
        name = CONDITION_EVERY_POD
    else:
        pods_clause = _sub_resource_is(codec.EPHEMERAL_CONTAINERS)
        name = CONDITION_RULES
    # A Pod update (of the pod or its status) and a Binding go their own way: only route 8
    # wants them.
    pod_update = (
        f"{_IS_POD} && request.operation == 'UPDATE' &&\n"
        f"  ({_NO_SUB_RESOURCE} || {_sub_resource_is(codec.STATUS)})"
    )
    updates = _cdi_annotation_changed() if cdi_updates else "  false"
    bound = _cdi_annotation_present() if cdi_updates else "  false"
    return {
        "name": name,
        "expression": f"({_IS_CLAIM}) ? (\n{claim_condition(claim_classes)}\n) : "
        f"({pod_update}) ? (\n{updates}\n) : ({_IS_BINDING}) ? (\n{bound}\n) : (\n"
        f"{pods_clause} ||\n"
        f"{_templates(kinds)}.exists(t,\n"
        f"{_refusable(sorted(set(resources)), host_access=host_access)})\n)",
    }


# `request` is the AdmissionRequest as JSON: kind.group, kind.kind and operation are always
# there; subResource (omitempty) only when there is one.
_IS_POD = "request.kind.group == '' && request.kind.kind == 'Pod'"
_IS_BINDING = "request.kind.group == '' && request.kind.kind == 'Binding'"
_NO_SUB_RESOURCE = "(!has(request.subResource) || request.subResource == '')"
_IS_CLAIM = f"request.kind.group == '{names.DRA_GROUP}'"


def claim_condition(classes: Sequence[str]) -> str:
    """CEL: a ResourceClaim or ResourceClaimTemplate with a request (or a `firstAvailable`
    subrequest) of one of `classes`, the GPU classes of the policy set (never none: NVIDIA's
    are among them): what rules dra-* judge, and entries whose policy has no `dra` section
    refuse. Requests of other classes never wait on the webhook."""
    listed = ", ".join(cel_string(c) for c in classes)
    template = cel_string(names.CLAIM_TEMPLATE_KIND)
    return (
        f"  (request.kind.kind == {template} ?\n"
        "    (has(object.spec) && has(object.spec.spec) && has(object.spec.spec.devices) &&\n"
        "      has(object.spec.spec.devices.requests) ? object.spec.spec.devices.requests : [])"
        " :\n"
        "    (has(object.spec) && has(object.spec.devices) &&\n"
        "      has(object.spec.devices.requests) ? object.spec.devices.requests : [])\n"
        "  ).exists(r,\n"
        "    (has(r.exactly) && has(r.exactly.deviceClassName) &&\n"
        f"      r.exactly.deviceClassName in [{listed}]) ||\n"
        "    (has(r.firstAvailable) && r.firstAvailable.exists(s,\n"
        f"      has(s.deviceClassName) && s.deviceClassName in [{listed}])))"
    )


def _sub_resource_is(name: str) -> str:
    return f"(has(request.subResource) && request.subResource == {cel_string(name)})"


def _cdi_annotation_changed() -> str:
    """CEL: the update (`object` new, `oldObject` as it was) adds a CDI annotation or changes
    one's value. `exists` over the keys, each compared by itself: no list built from a map
    (whose order is random) is compared."""
    cdi = " || ".join(f"k.startsWith({cel_string(p)})" for p in names.CDI_ANNOTATION_PREFIXES)
    old = "oldObject.metadata.annotations"
    return (
        "  has(object.metadata) && has(object.metadata.annotations) &&\n"
        f"  object.metadata.annotations.exists(k, ({cdi}) &&\n"
        f"    !(has(oldObject.metadata) && has({old}) && k in {old} &&\n"
        f"      {old}[k] == object.metadata.annotations[k]))"
    )


def _cdi_annotation_present() -> str:
    """CEL: the object (a Binding) carries a CDI annotation, which the API server copies onto
    the pod it binds."""
    cdi = " || ".join(f"k.startsWith({cel_string(p)})" for p in names.CDI_ANNOTATION_PREFIXES)
    return (
        "  has(object.metadata) && has(object.metadata.annotations) &&\n"
        f"  object.metadata.annotations.exists(k, {cdi})"
    )


def _templates(kinds: Sequence[workload_kinds.Kind]) -> str:
    """A CEL list of the pod templates of the object, whatever its kind: a Pod itself, and
    each template of each kind at its paths. Each part is guarded; only one kind matches."""
    parts = ["(request.kind.group == '' && request.kind.kind == 'Pod' ? [object] : [])"]
    for kind in kinds:
        is_kind = (
            f"request.kind.group == {cel_string(kind.group)} &&"
            f" request.kind.kind == {cel_string(kind.kind)}"
        )
        for path in kind.paths:
            parts.append(f"({is_kind} ?\n    {_path_list('object', path)} : [])")
    return "(\n  " + " +\n  ".join(parts) + "\n)"


def _present(node: str, path: workload_kinds.TemplatePath) -> str:
    """CEL: every field of `path` (keys only) is present under `node`."""
    tests, at = [], node
    for step in path:
        at = f"{at}.{step}"
        tests.append(f"has({at})")
    return " && ".join(tests) or "true"


def _path_list(node: str, path: workload_kinds.TemplatePath) -> str:
    """CEL: the list of what `path` (at most one "[]" or "{}" step) reaches from `node`;
    the items where a field is missing are left out."""
    for i, step in enumerate(path):
        if step not in (workload_kinds.EACH_ITEM, workload_kinds.EACH_VALUE):
            continue
        head, rest = path[:i], path[i + 1 :]
        at = ".".join((node, *head))
        tail = "".join(f".{s}" for s in rest)
        guard = _present(node, head)
        if step == workload_kinds.EACH_ITEM:
            items = f"{at}.filter(x, {_present('x', rest)}).map(x, x{tail})"
        else:
            # A map's macros go over its keys.
            items = f"{at}.filter(k, {_present(f'{at}[k]', rest)}).map(k, {at}[k]{tail})"
        return f"({guard} ? {items} : [])"
    return f"({_present(node, path)} ? [{'.'.join((node, *path))}] : [])"


# RE2 (the API server's) and Python's `re` (the tests') read it alike.
_ANY_CASE_GPU = (
    "(?i)^(" + "|".join(p.replace(".", "\\.") for p in names.GPU_RESOURCE_PREFIXES) + ")"
)


# The pod spec fields that send a pod where rule host-access applies (with added
# capabilities).
_HOST_NAMESPACE_FLAGS = ("hostPID", "hostIPC", "hostNetwork")


def _refusable(resources: Sequence[str], *, host_access: bool) -> str:
    """The CEL test of a pod template `t` that one of the rules could refuse or change
    (`host_access`: rule host-access too)."""
    # Every NVIDIA resource: the device plugin's GPUs, and those of passthrough and vGPU
    # device plugins, which a policy may count as GPUs (`exclusiveGpus`).
    tests = [
        f"k.startsWith({cel_string(p)})"
        for p in (names.NVIDIA_RESOURCE_PREFIX, names.DRA_EXTENDED_RESOURCE_PREFIX)
    ]
    # Any case of them too: `nvidia.com/GPU.shared` is no resource a node offers, but its pod
    # (or template) comes to the webhook, whose warning says what was meant.
    tests.append(f"k.matches({cel_string(_ANY_CASE_GPU)})")
    extra = [r for r in resources if not r.startswith(names.GPU_RESOURCE_PREFIXES)]
    if extra:
        tests.insert(0, f"k in [{', '.join(cel_string(n) for n in extra)}]")
    gpu_key = " || ".join(tests)
    cdi = " || ".join(f"k.startsWith({cel_string(p)})" for p in names.CDI_ANNOTATION_PREFIXES)
    # What Pod Security baseline's host-access checks refuse, beyond what every entry sends
    # (privileged containers, hostPath volumes).
    added_capabilities = (
        "      (has(c.securityContext) && has(c.securityContext.capabilities) &&\n"
        "        has(c.securityContext.capabilities.add) &&"
        " size(c.securityContext.capabilities.add) > 0) ||\n"
        if host_access
        else ""
    )
    host_namespaces = (
        "".join(
            f"    (has(t.spec.{flag}) && t.spec.{flag} == true) ||\n"
            for flag in _HOST_NAMESPACE_FLAGS
        )
        if host_access
        else ""
    )
    return (
        "  (has(t.spec) && (\n"
        "    ((has(t.spec.containers) ? t.spec.containers : []) +\n"
        "     (has(t.spec.initContainers) ? t.spec.initContainers : []) +\n"
        "     (has(t.spec.ephemeralContainers) ? t.spec.ephemeralContainers : [])).exists(c,\n"
        "      (has(c.resources) && has(c.resources.limits) &&\n"
        f"        c.resources.limits.exists(k, {gpu_key})) ||\n"
        "      (has(c.resources) && has(c.resources.requests) &&\n"
        f"        c.resources.requests.exists(k, {gpu_key})) ||\n"
        "      (has(c.env) && c.env.exists(e, has(e.name) &&\n"
        f"        (e.name.startsWith({cel_string(names.NVIDIA_PREFIX)}) ||"
        f" e.name.startsWith({cel_string(names.MPS_PREFIX)})))) ||\n"
        "      (has(c.securityContext) && has(c.securityContext.privileged) &&\n"
        "        c.securityContext.privileged == true) ||\n"
        f"{added_capabilities}"
        "      (has(c.volumeMounts) && c.volumeMounts.exists(m, has(m.mountPath) &&\n"
        f"        m.mountPath.contains({cel_string(names.DEVICE_LIST_ROOT.rsplit('/', 1)[1])}))))"
        " ||\n"
        f"{host_namespaces}"
        "    (has(t.spec.resourceClaims) && size(t.spec.resourceClaims) > 0) ||\n"
        "    (has(t.spec.volumes) && t.spec.volumes.exists(v, has(v.hostPath))))) ||\n"
        "  (has(t.metadata) && has(t.metadata.annotations) &&\n"
        f"    t.metadata.annotations.exists(k, {cdi}))"
    )


def cel_string(value: str) -> str:
    """A CEL string literal for `value`."""
    if _PLAIN_CEL_STRING.fullmatch(value):
        return f"'{value}'"
    # JSON string syntax is a subset of CEL's double-quoted strings.
    return json.dumps(value)


# --------------------------------------------------------------------------- what is sent

# What an entry of the rendered configurations can be sent, as docs/install.md's "When the
# webhook is down" lists it (a test holds the doc to these words and to `describe`).
SENT: dict[str, str] = {
    "every-pod": "every Pod create",
    "gpu-pods": (
        "a Pod create whose spec asks for an NVIDIA resource (any `nvidia.com/*` name;"
        " `nvidia.com/gpu*` and `nvidia.com/mig-*` in any case) or a"
        " `deviceclass.resource.kubernetes.io/*` one, sets an `NVIDIA_*` or `CUDA_MPS_*`"
        " variable, has a privileged container, a mount at a path"
        " with `nvidia-container-devices` in it, a hostPath volume, resource claims or a CDI"
        " annotation (`cdi.k8s.io/*`, `nvidia.cdi.k8s.io/*`, `io.kubernetes.cri-o.Devices`)"
    ),
    rules.HOST_ACCESS.name: (
        "beyond those, a Pod create (or workload template) with hostPID, hostIPC, hostNetwork"
        " or added capabilities"
    ),
    "ephemeral-containers": "an update of a pod's ephemeral containers (`kubectl debug`)",
    "cdi-updates": (
        "a Pod update or `pods/status` update that adds or changes a CDI annotation, and a"
        " binding (`pods/binding`, `bindings`) that carries one"
    ),
    "claims": (
        "a ResourceClaim or ResourceClaimTemplate create with a request of a GPU device class"
        " (`gpu.nvidia.com`, `mig.nvidia.com`, ..., and those of the policies' `dra` sections)"
    ),
    "workloads": (
        "a create or update of a Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob"
        " or ReplicationController, or of a kind of the WorkloadKinds file (JobSet,"
        " LeaderWorkerSet, RayCluster, RayJob, RayService, PyTorchJob by default), whose pod"
        " template has what the second row (and, where it applies, the third) says"
    ),
    "namespace-labels": (
        "a Namespace create or update with a label whose key has `gpu` or `share` in it (in"
        " any case), other than `gpu-share.io/enabled: \"true\"`"
    ),
}


@dataclass(frozen=True, slots=True)
class Reach:
    """What one entry of the rendered configurations is sent (`describe`): `sent`, keys of
    `SENT` in its order; `workloads`, the resources ("group/resource") whose pod templates
    it is sent. `failure_policy` says what becomes of them while the webhook cannot answer
    (Fail: refused; Ignore: admitted)."""

    configuration: str
    entry: str
    failure_policy: str
    sent: tuple[str, ...]
    workloads: tuple[str, ...] = ()


def describe(
    configurations: Sequence[Mapping[str, Any]], kinds: Sequence[workload_kinds.Kind] | None = None
) -> list[Reach]:
    """What each entry of `configurations` (as `render` makes them, or as deployed) is sent,
    read from its rules, the names of its matchConditions and the parts `match_condition`
    puts in them for a policy's switches. `kinds` are the workload kinds the configurations
    were rendered with (the built-in ones and the shipped WorkloadKinds file's when None).
    ValueError for a rule or condition this does not know: a description must not leave
    out what an entry is sent."""
    known = {
        (k.group, k.resource)
        for k in (workload_kinds.all_kinds() if kinds is None else kinds)
    }
    out = []
    for configuration in configurations:
        for entry in configuration["webhooks"]:
            out.append(_reach(str(configuration["kind"]), entry, known))
    return out


def _reach(kind: str, entry: Mapping[str, Any], workloads: set[tuple[str, str]]) -> Reach:
    name = str(entry["name"])
    conditions = {str(c["name"]): str(c["expression"]) for c in entry.get("matchConditions") or []}
    expression = "\n".join(conditions.values())
    cdi = _cdi_annotation_changed() in expression and _cdi_annotation_present() in expression
    sent: set[str] = set()
    found: list[str] = []
    for rule in entry["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for operation in rule["operations"]:
                    key = _sent(conditions, group, resource, operation, cdi=cdi)
                    if key == "workloads":
                        if (group, resource) not in workloads:
                            raise ValueError(f"{name}: {group}/{resource} is no workload kind")
                        found.append(f"{group}/{resource}")
                    if key is None:
                        raise ValueError(f"{name}: no description of {operation} {resource}")
                    if key:
                        sent.add(key)
    if sent & {"gpu-pods", "workloads"} and f"t.spec.{_HOST_NAMESPACE_FLAGS[0]}" in (
        expression
    ):
        sent.add(rules.HOST_ACCESS.name)
    return Reach(
        configuration=kind,
        entry=name,
        failure_policy=str(entry["failurePolicy"]),
        sent=tuple(k for k in SENT if k in sent),
        workloads=tuple(dict.fromkeys(found)),
    )


def _sent(
    conditions: Mapping[str, str], group: str, resource: str, operation: str, *, cdi: bool
) -> str | None:
    """The key of `SENT` for one resource and operation of an entry's rules; "" when the
    conditions send none of it, None when it is unknown here."""
    if group == names.DRA_GROUP:
        return "claims" if resource in names.CLAIM_RESOURCES and operation == "CREATE" else None
    if group == "" and resource == "namespaces":
        return "namespace-labels" if CONDITION_NAMESPACE_LABELS in conditions else None
    if group == "" and resource == "pods" and operation == "CREATE":
        if CONDITION_EVERY_POD in conditions:
            return "every-pod"
        return "gpu-pods" if CONDITION_RULES in conditions else None
    if group == "" and resource == f"pods/{codec.EPHEMERAL_CONTAINERS}":
        return "ephemeral-containers" if operation == "UPDATE" else None
    cdi_ways = {
        ("pods", "UPDATE"),
        (f"pods/{codec.STATUS}", "UPDATE"),
        (f"pods/{codec.BINDING}", "CREATE"),
        ("bindings", "CREATE"),
    }
    if group == "" and (resource, operation) in cdi_ways:
        return "cdi-updates" if cdi else ""
    if "/" not in resource and operation in ("CREATE", "UPDATE"):
        return "workloads"
    return None


# --------------------------------------------------------------------------- routes


@dataclass(frozen=True, slots=True)
class Routes:
    """The namespace selectors of the rendered configurations, in order: which entry (and so
    which policy path) a namespace's labels reach, as the API server matches them. For the
    commands that stand in for a cluster (`mutate`, `audit`)."""

    entries: tuple[tuple[str, tuple[Mapping[str, Any], ...]], ...]
    webhook_namespace: str

    def selected_path(self, labels: Mapping[str, str]) -> str | None:
        """The policy path of the first entry that selects a namespace with `labels` (its
        `kubernetes.io/metadata.name` label included): what follows `/<endpoint>/`, `<name>`
        or `<name>/baseline` (see `policies.split_path`); None when none does."""
        for path, expressions in self.entries:
            if all(selector_holds(e, labels) for e in expressions):
                return path
        return None

    def not_sent(self, labels: Mapping[str, str]) -> Unsent | None:
        """Why a namespace with `labels` (its name label included) never reaches the
        webhook; None when an entry selects it."""
        return None if self.selected_path(labels) is not None else self.why_not_sent(labels)

    def why_not_sent(self, labels: Mapping[str, str]) -> Unsent:
        """Why a namespace that no entry selects (`selected_path` is None) is left out."""
        name = labels.get(names.NAME_LABEL)
        if name == names.SYSTEM_NAMESPACE:
            return Unsent(True, f"{names.SYSTEM_NAMESPACE} is never sent to the webhook")
        if name == self.webhook_namespace:
            return Unsent(
                True, "the webhook's own namespace is never sent to it; see --webhook-namespace"
            )
        if not namespaces.opted_in(labels):
            missed = namespaces.label_near_misses(labels)
            return Unsent(
                False, f"no label {names.ENABLED_LABEL}=true" + "".join(f"; {m}" for m in missed)
            )
        return Unsent(True, "no entry of the webhook configurations selects it")


@dataclass(frozen=True, slots=True)
class Unsent:
    """Why a namespace never reaches the webhook (`Routes.not_sent`). `left_out`: the
    configurations leave it out whatever it asks for; else it has not opted in."""

    left_out: bool
    reason: str

    def __str__(self) -> str:
        return f"{'never reviewed' if self.left_out else 'not opted in'} ({self.reason})"


def routes(policies: PolicySet, *, webhook_namespace: str) -> Routes:
    """The routes of the configurations `render` makes for `policies` (the namespace
    selectors of their entries, without the rest); ValueError for a namespace name
    Kubernetes would refuse."""
    if not _is_dns_label(webhook_namespace):
        raise ValueError(f"namespace {webhook_namespace!r} is not a valid namespace name")
    entries = tuple(
        (path, tuple(expressions))
        for _, path, expressions in _selectors(policies, webhook_namespace)
    )
    return Routes(entries, webhook_namespace)


def selector_holds(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector requirement as Kubernetes evaluates it (NotIn holds without the key)."""
    key, operator = expression["key"], expression["operator"]
    values = expression.get("values") or ()
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise ValueError(f"unknown selector operator {operator!r}")
