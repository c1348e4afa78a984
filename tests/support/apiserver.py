"""Playing the API server's admission chain against rendered webhook configurations.

For one request (an object, the labels of its namespace, an operation, a subresource), as
the API server does it: every entry whose namespaceSelector matches the namespace, one of
whose rules matches the resource, subresource and operation, and all of whose matchConditions
(CEL, evaluated with cel-python, with `object`, `oldObject` and `request` bound as the API
server binds them: see `deploy_helpers.Conditions`) hold, is called; mutating entries first,
in order, each patch applied to the object as sent to that entry; then the patched object is
validated as Kubernetes validates it (schema of two versions, the client's model, Pod rules;
a ResourceClaim or ResourceClaimTemplate by the schema of the versions that serve it);
then the built-in PodSecurity admission plugin judges pods where the namespace enforces a
level (`pod_security_refusal`: baseline's host-access checks); then the validating entries
see the final object. Any denial stops the chain.

How an entry is called is the test's choice (`Send`): straight into the codec
(`codec.review`), or over HTTPS into the real application.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.support import deploy_helpers as dh
from tests.support import kube
from webhook.engine import claims
from webhook.policy import kinds, names, policies
from webhook.server import codec
from webhook.tools import rendering

# (path with query, request body) -> the AdmissionReview the webhook answered.
Send = Callable[[str, bytes], Awaitable[dict[str, Any]]]


@dataclass
class Call:
    configuration: str  # MutatingWebhookConfiguration or ValidatingWebhookConfiguration
    entry: str
    path: str
    response: dict[str, Any]


@dataclass(frozen=True)
class Webhook:
    """Another project's mutating webhook, called after ours (its configuration's name sorts
    later): `mutate` returns the object it would store; `reinvoke` is its
    `reinvocationPolicy: IfNeeded`."""

    name: str
    mutate: Callable[[dict[str, Any]], dict[str, Any]]
    reinvoke: bool = True


@dataclass
class Outcome:
    """What the user sees: allowed (and what is stored) or refused (and why)."""

    allowed: bool
    stored: dict[str, Any] | None
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)

    @property
    def entries(self) -> list[tuple[str, str]]:
        return [(c.configuration, c.entry) for c in self.calls]


def in_process(loaded: policies.PolicySet, kinds: kinds.Kinds = kinds.BUILTIN) -> Send:
    """Entries answered by the codec in-process, as the server would answer them."""

    async def send(path: str, body: bytes) -> dict[str, Any]:
        endpoint, _, policy_name = path.split("?", maxsplit=1)[0].strip("/").partition("/")
        outcome = codec.review(
            body,
            policies=loaded,
            policy_name=policy_name or "default",
            endpoint="mutate" if endpoint == "mutate" else "validate",
            kinds=kinds,
        )
        return json.loads(outcome.body)  # type: ignore[no-any-return]

    return send


def _rule_matches(rule: Mapping[str, Any], group: str, resource: str, operation: str) -> bool:
    return (
        (group in rule["apiGroups"] or "*" in rule["apiGroups"])
        and (resource in rule["resources"] or "*" in rule["resources"])
        and (operation in rule["operations"] or "*" in rule["operations"])
    )


@dataclass(frozen=True)
class _Request:
    labels: Mapping[str, str]
    operation: str
    sub_resource: str
    old: Mapping[str, Any] | None


class ApiServer:
    """The admission chain of one cluster, configured with `configurations`."""

    def __init__(
        self,
        configurations: Sequence[Mapping[str, Any]],
        send: Send,
        *,
        later: Sequence[Webhook] = (),
    ) -> None:
        by_kind = {c["kind"]: c for c in configurations}
        self.mutating = by_kind[rendering.MUTATING_KIND]["webhooks"]
        self.validating = by_kind[rendering.VALIDATING_KIND]["webhooks"]
        self.send = send
        self.later = later
        self._conditions: dict[tuple[str, str], dh.Conditions] = {}

    def called(
        self,
        kind: str,
        entry: Mapping[str, Any],
        obj: Mapping[str, Any],
        labels: Mapping[str, str],
        *,
        operation: str,
        sub_resource: str,
        old: Mapping[str, Any] | None,
    ) -> bool:
        """Whether the API server calls `entry` for this request."""
        if not dh.selector_matches(entry["namespaceSelector"], labels):
            return False
        group = str(obj["apiVersion"]).rpartition("/")[0]
        resource = kube.plural(str(obj["kind"])) + (f"/{sub_resource}" if sub_resource else "")
        if not any(_rule_matches(r, group, resource, operation) for r in entry["rules"]):
            return False
        key = (kind, entry["name"])
        if key not in self._conditions:
            self._conditions[key] = dh.Conditions(entry)
        return self._conditions[key].match(
            obj, operation=operation, sub_resource=sub_resource, old=old
        )

    async def admit(
        self,
        obj: Mapping[str, Any],
        *,
        labels: Mapping[str, str],
        operation: str = "CREATE",
        old: Mapping[str, Any] | None = None,
        sub_resource: str = "",
    ) -> Outcome:
        outcome = Outcome(allowed=True, stored=None)
        request = _Request(labels, operation, sub_resource, old)
        current: dict[str, Any] | None = await self._mutate(
            kube.as_served(obj), request, outcome
        )
        if current is None:
            return outcome
        if kube.templates_of(current) or claims.of_object(current):
            # Between the two: the object as patched must be valid, or nothing is stored (a
            # claim's configuration the mutating webhook added too).
            kube.check_valid(current)
        # The built-in validating plugins run before the validating webhooks.
        refusal = pod_security_refusal(
            current, labels, operation=operation, sub_resource=sub_resource, old=old
        )
        if refusal is not None:
            outcome.allowed = False
            outcome.message = refusal
            return outcome
        for entry in self.validating:
            if not self._called(rendering.VALIDATING_KIND, entry, current, request):
                continue
            kind = rendering.VALIDATING_KIND
            if await self._call(kind, entry, current, request, outcome) is None:
                return outcome
        # The API server keeps each text once, and 4,096 characters of them in all.
        assert sum(map(len, dict.fromkeys(outcome.warnings))) <= 4096, outcome.warnings
        outcome.stored = current
        return outcome

    def _called(
        self, kind: str, entry: Mapping[str, Any], obj: Mapping[str, Any], request: _Request
    ) -> bool:
        return self.called(
            kind,
            entry,
            obj,
            request.labels,
            operation=request.operation,
            sub_resource=request.sub_resource,
            old=request.old,
        )

    async def _mutate(
        self, current: dict[str, Any], request: _Request, outcome: Outcome
    ) -> dict[str, Any] | None:
        """The mutating webhooks, ours then the `later` ones, with reinvocation as the API
        server does it: a change marks every `IfNeeded` webhook called before it, and one more
        pass calls the marked ones, in the same order. None: refused."""
        order: list[Mapping[str, Any] | Webhook] = [*self.mutating, *self.later]
        invoked: set[int] = set()
        marked: set[int] = set()
        for reinvocation in (False, True):
            if reinvocation and not marked:
                break
            for i, hook in enumerate(order):
                if reinvocation and i not in marked:
                    continue
                marked.discard(i)
                if isinstance(hook, Webhook):
                    after = hook.mutate(copy.deepcopy(current))
                    changed, current = after != current, after
                    reinvocable = hook.reinvoke
                else:
                    if not self._called(rendering.MUTATING_KIND, hook, current, request):
                        continue
                    patched = await self._call(
                        rendering.MUTATING_KIND, hook, current, request, outcome
                    )
                    if patched is None:
                        return None
                    changed, current = patched != current, patched
                    reinvocable = hook.get("reinvocationPolicy") == "IfNeeded"
                if changed:
                    marked |= invoked - {i}
                if reinvocable:
                    invoked.add(i)
        return current

    async def _call(
        self,
        kind: str,
        entry: Mapping[str, Any],
        current: dict[str, Any],
        request: _Request,
        outcome: Outcome,
    ) -> dict[str, Any] | None:
        """Call one of our entries: the object after its patch, or None when it refuses."""
        uid = str(uuid.uuid4())
        body = kube.admission_review(
            current,
            operation=request.operation,
            old=request.old,
            uid=uid,
            sub_resource=request.sub_resource,
        )
        path = entry["clientConfig"]["service"]["path"]
        review = await self.send(
            f"{path}?timeout={entry['timeoutSeconds']}s", json.dumps(body).encode()
        )
        response = answer(review, uid)
        outcome.calls.append(Call(kind, entry["name"], path, response))
        outcome.warnings += response.get("warnings") or []
        if not response["allowed"]:
            outcome.allowed = False
            outcome.message = response["status"]["message"]
            return None
        if "patch" in response:
            assert kind == rendering.MUTATING_KIND, "a validating webhook patched"
            return kube.apply(current, json.loads(base64.b64decode(response["patch"])))
        return current


# --------------------------------------------------------------------------- PodSecurity

# Pod Security baseline's allowed added capabilities (k8s.io/pod-security-admission,
# policy/check_capabilities_baseline.go), compared exactly as written: "CAP_CHOWN" or "chown"
# is not in the set.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
_CONTAINER_GROUPS = ("initContainers", "containers", "ephemeralContainers")


def pod_security_refusal(
    obj: Mapping[str, Any],
    labels: Mapping[str, str],
    *,
    operation: str = "CREATE",
    sub_resource: str = "",
    old: Mapping[str, Any] | None = None,
) -> str | None:
    """The built-in PodSecurity admission plugin's refusal of a Pod in a namespace with
    `labels`, or None. Played: its enforce label at baseline or restricted (the label's
    absence is the cluster default, `privileged` here), and baseline's host-access checks
    (privileged containers, hostPID/hostIPC/hostNetwork, hostPath volumes, capabilities added
    beyond baseline's set), on every kind of container. Not played: the other baseline checks
    (host ports, sysctls, SELinux, /proc mount, seccomp, AppArmor, Windows host process) and
    restricted's own, which these tests do not need, nor exemptions.

    Judged as the plugin judges: a Pod on CREATE, an update of its ephemeral containers, and a
    Pod UPDATE that changes the spec (other than images); no other subresource."""
    if labels.get(names.POD_SECURITY_ENFORCE_LABEL) not in names.POD_SECURITY_HOST_ACCESS_LEVELS:
        return None
    if obj.get("kind") != "Pod" or str(obj.get("apiVersion")) != "v1":
        return None
    if sub_resource not in ("", codec.EPHEMERAL_CONTAINERS):
        return None
    if operation == "UPDATE" and not sub_resource:
        if old is not None and _without_images(old) == _without_images(obj):
            return None
    elif operation not in ("CREATE", "UPDATE"):
        return None
    spec = obj.get("spec") or {}
    problems: list[str] = []
    hosts = [f"{flag}=true" for flag in ("hostNetwork", "hostPID", "hostIPC") if spec.get(flag)]
    if hosts:
        problems.append(f"host namespaces ({', '.join(hosts)})")
    containers = [c for group in _CONTAINER_GROUPS for c in spec.get(group) or []]
    privileged = [
        str(c.get("name")) for c in containers if (c.get("securityContext") or {}).get("privileged")
    ]
    if privileged:
        problems.append(
            f"privileged ({_quoted('container', privileged)} must not set"
            " securityContext.privileged=true)"
        )
    host_paths = [str(v.get("name")) for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        problems.append(f"hostPath volumes ({_quoted('volume', host_paths)})")
    wide: dict[str, list[str]] = {}
    for c in containers:
        added = ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        for capability in added:
            if capability not in BASELINE_CAPABILITIES:
                wide.setdefault(str(c.get("name")), []).append(str(capability))
    if wide:
        problems.append(
            "non-default capabilities ("
            + ", ".join(
                f'container "{name}" must not include '
                + ", ".join(f'"{cap}"' for cap in caps)
                + " in securityContext.capabilities.add"
                for name, caps in wide.items()
            )
            + ")"
        )
    if not problems:
        return None
    name = (obj.get("metadata") or {}).get("name", "")
    level = labels[names.POD_SECURITY_ENFORCE_LABEL]
    return f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": ' + ", ".join(
        problems
    )


def _quoted(what: str, items: Sequence[str]) -> str:
    plural = "s" if len(items) > 1 else ""
    return f"{what}{plural} " + ", ".join(f'"{i}"' for i in items)


def _without_images(pod: Mapping[str, Any]) -> Any:
    spec = json.loads(json.dumps(pod.get("spec") or {}))
    for group in _CONTAINER_GROUPS:
        for c in spec.get(group) or []:
            c.pop("image", None)
    return spec


def answer(review: Mapping[str, Any], uid: str) -> dict[str, Any]:
    """The AdmissionResponse, after the checks the API server makes of every answer."""
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    response: dict[str, Any] = review["response"]
    assert response["uid"] == uid
    assert isinstance(response["allowed"], bool)
    # Together or not at all, and only on an allowed review.
    assert ("patch" in response) == ("patchType" in response)
    if "patch" in response:
        assert response["allowed"]
        assert response["patchType"] == "JSONPatch"
    if not response["allowed"]:
        assert isinstance(response["status"]["code"], int)
        assert response["status"]["message"]
    for warning in response.get("warnings") or []:
        # The API server may cut one longer (plain warnings are held to 120, a refusal the
        # policy warns of to 256 with its fix: decisions.MAX_LONG_WARNING).
        assert len(warning) <= 256, warning
        assert not warning.lower().startswith("warning"), warning
    return response
