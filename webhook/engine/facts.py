"""What a review knows of a pod before any rule runs, worked out once: `gather(pod, policy)`.

In this order, each step reading only the view and the steps before it:

1. **GPU usage**, per container: the replicas of each shared resource it asks for, the
   exclusive GPU resources, and what is wrong with the quantities (not a whole number,
   requests that differ from limits, a `.shared` resource the policy does not list).
2. **The shared resource** the pod asks for (`resource`: None when none, or several).
3. **The profile** (annotation `gpu-share.io/profile`, else the policy's default), or why
   the annotation names none the policy offers.
4. **The placement** (`placing.place`): the node classes the pod may land on, narrowed by
   its own node selection, then by replicas, then by MPS ceilings, with the reason at each
   step where none is left.

What is wrong is kept as `Finding`s, each under the name of the rule that reports it: the
rules only report what is found here (and what they read of the view themselves), and the
patches only add; none of them changes what another reads, so the order of the table
changes no answer (a test runs it shuffled). Nothing here can be changed once made: the
named tuples cannot, and the other classes have Final attributes, which mypy refuses to see
assigned and the compiled core refuses at run time.

Steps 3 and 4 are worked out for pods that ask for one of the policy's shared resources,
and not on an ephemeral-containers update (which cannot change the pod's placement).
"""

from __future__ import annotations

import re
from typing import Any, Final

from webhook.engine import placing, view
from webhook.engine.decision import FIELD, ErrorType, Violation, shown
from webhook.engine.placing import Finding
from webhook.policy import names, quantities
from webhook.policy.policies import NodeClass, Policy, Profile

# `names` the loops below read, as Final constants the compiled core reads directly.
_DRA_EXTENDED_RESOURCE_PREFIX: Final = names.DRA_EXTENDED_RESOURCE_PREFIX
_SHARED_SUFFIX: Final = names.SHARED_SUFFIX
_ANNOTATION_PROFILE: Final = names.ANNOTATION_PROFILE

__all__ = ["Facts", "Finding", "Usage", "gather"]


# Plain classes with Final attributes, not named tuples: made for every review, they are
# native classes of the compiled core (hatch_build.py), which are many times cheaper to make
# and read; Final makes mypy refuse any assignment after __init__, and the compiled class
# refuses it at run time too.


class Usage:
    """What one container asks of GPUs."""

    __slots__ = ("exclusive", "exclusive_count", "gpu", "shared")

    def __init__(
        self,
        shared: tuple[tuple[str, int], ...] = (),
        exclusive: tuple[str, ...] = (),
        exclusive_count: int = 0,
    ) -> None:
        # Shared resource -> replicas, in the order the container names them.
        self.shared: Final = shared
        # Other GPU resources (exclusive GPUs), in the order the container names them, and
        # how many devices of them it asks for in all.
        self.exclusive: Final = exclusive
        self.exclusive_count: Final = exclusive_count
        self.gpu: Final = bool(shared or exclusive)

    def replicas(self, resource: str) -> int:
        for name, count in self.shared:
            if name == resource:
                return count
        return 0

    @property
    def shared_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.shared)

    def __repr__(self) -> str:
        return f"Usage(shared={self.shared!r}, exclusive={self.exclusive!r})"


NO_USAGE = Usage()


class Facts:
    """What is known of one pod under one policy before the rules run (see the module)."""

    __slots__ = (
        "containers",
        "findings",
        "gpu",
        "judged",
        "place",
        "placement",
        "pod",
        "profile",
        "requested",
        "resource",
    )

    def __init__(
        self,
        pod: view.Pod,
        usage: tuple[Usage, ...],
        *,
        gpu: bool,
        requested: tuple[str, ...],
        resource: str | None,
        profile: Profile | None,
        placement: placing.Placement | None,
        findings: tuple[Finding, ...],
    ) -> None:
        self.pod: Final = pod
        self.place: Final = pod.place
        # Whether any container asks for a GPU: shared, exclusive, or a `.shared` resource
        # the policy does not list (which `Usage` leaves out); or uses a resource claim.
        self.gpu: Final = gpu
        # The policy's shared resources the pod asks for, sorted.
        self.requested: Final = requested
        # The one shared resource the pod asks for (None: none, or several).
        self.resource: Final = resource
        self.profile: Final = profile
        self.placement: Final = placement
        self.findings: Final = findings
        # Each container with its usage (`usage`: one per container, in their order); and
        # those the rules judge (all, but on an ephemeral-containers update).
        containers = pod.containers
        if len(usage) != len(containers):
            raise ValueError("one usage per container")
        # (Not zip(..., strict=True): a call with keywords is a generic call in the compiled
        # core.)
        pairs = tuple([(containers[i], usage[i]) for i in range(len(containers))])
        self.containers: Final = pairs
        self.judged: Final = (
            tuple(p for p in pairs if p[0].judged) if pod.ephemeral_update else pairs
        )

    @property
    def classes(self) -> tuple[NodeClass, ...] | None:
        """The classes the pod is pinned to (`Placement.pinned_to`); None when placement did
        not start, or the pod's own selection admits none."""
        return None if self.placement is None else self.placement.pinned_to


def gather(pod: view.Pod, policy: Policy) -> Facts:
    """The facts of `pod` under `policy` (see the module)."""
    findings: list[Finding] = []
    usage, requested, gpu = _usage(pod, policy, findings)
    resource = requested[0] if len(requested) == 1 else None
    profile: Profile | None = None
    placement: placing.Placement | None = None
    if requested and not pod.ephemeral_update:
        profile = _profile(pod, policy, findings)
        # A pod that asks for several shared resources is refused for it; where that rule is
        # relaxed it is still pinned, to the classes of the first.
        pinned = resource or requested[0]
        replicas = tuple(u.replicas(pinned) for u in usage)
        placement = placing.place(pod, policy, replicas, pinned, profile)
        if resource is not None:
            findings.extend(placement.findings)
    return Facts(
        pod,
        usage,
        gpu=gpu,
        requested=requested,
        resource=resource,
        profile=profile,
        placement=placement,
        findings=tuple(findings),
    )


# Resource names the usage looks at: the NVIDIA GPU resources, and DRA device classes asked
# for by extended resource name (found for rule resource-claims).
_LOOKED_AT: Final[tuple[str, ...]] = (
    *names.GPU_RESOURCE_PREFIXES,
    names.DRA_EXTENDED_RESOURCE_PREFIX,
)


def _is_gpu_resource(
    name: object, shared: frozenset[str], passthrough: re.Pattern[str] | None
) -> bool:
    """Whether the usage looks at resource `name`, under a policy that shares `shared` and
    whose `exclusiveGpus` passthrough patterns are `passthrough` (`ExclusiveGpus`)."""
    if not isinstance(name, str):
        return False
    # (One prefix at a time: startswith of a tuple is a generic method call in the compiled
    # core, of a string a direct one.)
    for prefix in _LOOKED_AT:
        if name.startswith(prefix):
            return True
    return name in shared or (passthrough is not None and passthrough.fullmatch(name) is not None)


def _usage(
    pod: view.Pod, policy: Policy, findings: list[Finding]
) -> tuple[tuple[Usage, ...], tuple[str, ...], bool]:
    """Each container's GPU resources: shared replicas, exclusive, not allowed; the problems
    of quantities and of requests and limits, for their rules. Also the shared resources
    asked for, and whether any GPU is."""
    shared_names = policy.shared_resources
    passthrough = policy.exclusive_gpus.passthrough_match
    requested: set[str] = set()
    gpu = False
    out: list[Usage] = []
    for c in pod.containers:
        limits = c.limits
        requests = c.requests
        if not limits and not requests:
            out.append(NO_USAGE)
            continue
        wanted = [k for k in limits if _is_gpu_resource(k, shared_names, passthrough)]
        if requests:
            wanted += [
                k
                for k in requests
                if k not in limits and _is_gpu_resource(k, shared_names, passthrough)
            ]
        if not wanted:
            out.append(NO_USAGE)
            continue
        shared: list[tuple[str, int]] = []
        exclusive: list[str] = []
        exclusive_count = 0
        for name in wanted:
            if name.startswith(_DRA_EXTENDED_RESOURCE_PREFIX):
                findings.append(_dra_extended(pod, policy, c, name, in_limits=name in limits))
                continue
            limit, request = limits.get(name, _ABSENT), requests.get(name, _ABSENT)
            in_limits: int | None = None
            in_requests: int | None = None
            bad = False
            if limit is not _ABSENT:
                try:
                    in_limits = quantities.count(limit)
                except quantities.QuantityError as exc:
                    bad = True
                    findings.append(_invalid_quantity(pod, c, "limits", name, value=limit, exc=exc))
            if request is not _ABSENT:
                try:
                    in_requests = quantities.count(request)
                except quantities.QuantityError as exc:
                    bad = True
                    findings.append(
                        _invalid_quantity(pod, c, "requests", name, value=request, exc=exc)
                    )
            is_shared = name in shared_names
            if bad:
                # Counted as one replica so that the other rules still say what they see.
                in_limits, in_requests = 1, None
            elif is_shared and in_requests is not None and in_limits is None:
                findings.append(
                    _mismatch(
                        pod,
                        c,
                        f"requests {name}: {request} with no limit, and an extended"
                        f" resource is asked for in limits. Set limits {name}: {request}"
                        " (requests may then be left out)",
                    )
                )
            elif is_shared and in_requests is not None and in_requests != in_limits:
                findings.append(
                    _mismatch(
                        pod,
                        c,
                        f"{name} requests {request}, limits {limit}; they must be"
                        f" equal. Set both to {limit}, or set only limits",
                    )
                )
            count = in_limits if in_limits is not None else in_requests or 0
            if not count:
                continue
            gpu = True
            if is_shared:
                shared.append((name, count))
                requested.add(name)
            elif name.endswith(_SHARED_SUFFIX):
                findings.append(_not_allowed(pod, policy, c, name))
            else:
                exclusive.append(name)
                exclusive_count += count
        out.append(
            Usage(tuple(shared), tuple(exclusive), exclusive_count)
            if shared or exclusive
            else NO_USAGE
        )
    # A container that uses a resource claim counts as a GPU container for the rules that
    # treat those apart (capabilities, host namespaces, envFrom): its claim may hold GPUs,
    # which the webhook cannot see from the pod (docs/dra.md).
    gpu = gpu or any(c.uses_claims for c in pod.containers)
    return tuple(out), tuple(sorted(requested)), gpu


# What a container's limits or requests give for a resource they do not name.
_ABSENT: Final = object()


def _dra_extended(
    pod: view.Pod, policy: Policy, c: view.Slot, name: str, *, in_limits: bool
) -> Finding:
    return Finding(
        "resource-claims",
        Violation(
            "resource-claims",
            ErrorType.FORBIDDEN,
            f"{c.field}.resources.{'limits' if in_limits else 'requests'}[{name}]",
            (
                f'container "{c.name}": ',
                FIELD,
                " asks for devices of a DRA device class by extended resource name: the"
                f' scheduler makes a resource claim for it, outside policy "{policy.name}".'
                f" Remove it, or ask for {policy.preferred_resource}" + _through_claims(policy),
            ),
            c.name,
            pod.place,
        ),
    )


def _invalid_quantity(
    pod: view.Pod, c: view.Slot, part: str, name: str, *, value: Any, exc: Exception
) -> Finding:
    return Finding(
        "invalid-quantity",
        Violation(
            "invalid-quantity",
            ErrorType.INVALID,
            f"{c.field}.resources.{part}[{name}]",
            (
                f'container "{c.name}": invalid quantity: ',
                FIELD,
                f": {shown(value)} {exc}. A GPU is asked for in whole devices: set the"
                " quantity to a whole number such as 1",
            ),
            c.name,
            pod.place,
        ),
    )


def _mismatch(pod: view.Pod, c: view.Slot, detail: str) -> Finding:
    return Finding(
        "requests-limits-mismatch",
        Violation(
            "requests-limits-mismatch",
            ErrorType.INVALID,
            f"{c.field}.resources",
            (f'container "{c.name}": requests and limits disagree: {detail}',),
            c.name,
            pod.place,
        ),
    )


def _not_allowed(pod: view.Pod, policy: Policy, c: view.Slot, name: str) -> Finding:
    allowed = ", ".join(sorted(policy.shared_resources))
    if allowed:
        advice = f"it allows: {allowed}). Ask for one of those, or"
    else:
        advice = "it shares none through the device plugin). Ask"
    return Finding(
        "resource-not-allowed",
        Violation(
            "resource-not-allowed",
            ErrorType.NOT_SUPPORTED,
            f"{c.field}.resources.limits[{name}]",
            (
                f'container "{c.name}": resource not allowed: {name} is not a shared GPU'
                f' policy "{policy.name}" allows ({advice} ask the cluster admin for a'
                " policy that shares it" + _through_claims(policy),
            ),
            c.name,
            pod.place,
        ),
    )


def _through_claims(policy: Policy) -> str:
    """How a pod of a policy with a `dra` section gets a GPU otherwise (for refusals)."""
    allowed = policy.dra.allowed if policy.dra is not None else ()
    if not allowed:
        return ""
    return f"; or use a ResourceClaim of device class {' or '.join(allowed)}"


PROFILE_FIELD = f"metadata.annotations[{names.ANNOTATION_PROFILE}]"


def _profile(pod: view.Pod, policy: Policy, findings: list[Finding]) -> Profile | None:
    """The profile the pod asks for, or the policy's default; None (with a finding) when
    the annotation names none the policy offers."""
    wanted = view.annotation(pod, _ANNOTATION_PROFILE)
    if wanted is None:
        return policy.profiles[policy.default_profile] if policy.default_profile else None
    name = str(wanted)
    found = policy.profiles.get(name)
    if found is not None:
        return found
    offered = ", ".join(sorted(policy.profiles))
    quoted = shown(name)
    if not offered:
        words = (
            f"unknown profile: {quoted} (annotation {_ANNOTATION_PROFILE}), and policy"
            f' "{policy.name}" defines no MPS profiles. Remove the annotation'
        )
    elif name in policy.foreign_profiles:
        words = (
            f"profile not allowed: {quoted} (annotation {_ANNOTATION_PROFILE}) is not one"
            f' policy "{policy.name}" allows; it offers: {offered}. Use one of them, or remove'
            f' the annotation for the default "{policy.default_profile}"'
        )
    else:
        words = (
            f"unknown profile: {quoted} (annotation {_ANNOTATION_PROFILE}); policy"
            f' "{policy.name}" offers: {offered}. Use one of them, or remove the annotation'
            f' for the default "{policy.default_profile}"'
        )
    findings.append(
        Finding(
            "profile",
            Violation("profile", ErrorType.NOT_SUPPORTED, PROFILE_FIELD, (words,), None, pod.place),
        )
    )
    return None
