"""How a namespace reaches its policy: the opt-in label, the policy label and the Pod
Security enforce label.

In a cluster the API server does this matching (the webhook configurations' namespace
selectors, two entries per policy, see `rendering`); the offline `mutate` command makes the
same choice here from the labels it is given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from webhook.engine import hints
from webhook.policy import policies
from webhook.policy.names import ANNOTATION_MUTATIONS as MUTATIONS_ANNOTATION
from webhook.policy.names import ANNOTATION_PROFILE as PROFILE_ANNOTATION
from webhook.policy.names import (
    DEFAULT_POLICY,
    ENABLED_LABEL,
    NAME_LABEL,
    POD_SECURITY_ENFORCE_LABEL,
    POD_SECURITY_HOST_ACCESS_LEVELS,
    POLICY_LABEL,
)

__all__ = [
    "ENABLED_LABEL",
    "NAME_LABEL",
    "POLICY_LABEL",
    "enforces_pod_security",
    "label_near_misses",
    "labelled_path",
    "opted_in",
    "policy_name",
]


def opted_in(labels: Mapping[str, str]) -> bool:
    return labels.get(ENABLED_LABEL) == "true"


def policy_name(labels: Mapping[str, str]) -> str | None:
    """The policy that governs a namespace with these labels; None when it has not opted in."""
    if not opted_in(labels):
        return None
    return labels.get(POLICY_LABEL) or DEFAULT_POLICY


def enforces_pod_security(labels: Mapping[str, str]) -> bool:
    """Whether a namespace with these labels enforces Pod Security baseline or restricted
    (and so baseline's host-access checks) by its own label."""
    return labels.get(POD_SECURITY_ENFORCE_LABEL) in POD_SECURITY_HOST_ACCESS_LEVELS


def labelled_path(labels: Mapping[str, str]) -> str | None:
    """The webhook path (after `/<endpoint>/`) that the entry selecting a namespace with these
    labels names when the policy exists: `<name>` or `<name>/baseline`; None when it has not
    opted in."""
    name = policy_name(labels)
    if name is None:
        return None
    return policies.join_path(name, pod_security=enforces_pod_security(labels))


# Values people write for "yes" that a label selector does not take for "true".
_TRUE_LOOKING = frozenset({"true", "yes", "y", "on", "1", "enabled", "enable"})
_OUR_LABELS = (ENABLED_LABEL, POLICY_LABEL)
# The pod annotations of ours, which people also put on namespaces.
_POD_ANNOTATIONS = (PROFILE_ANNOTATION, MUTATIONS_ANNOTATION)
# What `meant_label` says of a key that says the opposite of the opt-in.
OPT_OUT_LABEL = "(opt-out)"
_OPT_OUT = re.compile(r"disab|exempt|exclu|ignor|skip|opt-?out|^off$|^no-|bypass")


def label_near_misses(labels: Mapping[str, str]) -> list[str]:
    """What in a namespace's labels looks like the opt-in or the policy label but is not
    (label keys and values are matched exactly by the webhook configurations' selectors):
    one line each, the advice first; as many as a review's `hints.Budget` allows."""
    out: list[str] = []
    budget = hints.Budget()
    value = labels.get(ENABLED_LABEL)
    if value is not None and value != "true" and value.strip().lower() in _TRUE_LOOKING:
        case = " (label values are case-sensitive)" if value.strip().lower() == "true" else ""
        budget.put(
            out,
            f'only "true" opts in. Label {ENABLED_LABEL}={hints.echo(value)} is ignored{case}',
        )
    for key in labels:
        if budget.spent:
            break
        found = meant_label(key, budget)
        if found is None:
            continue
        shown = hints.echo(key)
        if found in _POD_ANNOTATIONS:
            line = f"{found} is a pod annotation. Label {shown} on a namespace is ignored"
        elif found == OPT_OUT_LABEL:
            line = (
                f"a namespace without {ENABLED_LABEL}=true is left alone. Label {shown} is ignored"
            )
        elif found == hints.UNKNOWN:
            line = f"gpu-share reads {ENABLED_LABEL} and {POLICY_LABEL}. Label {shown} is ignored"
        else:
            line = f"did you mean {found}? Label {shown} is ignored"
        budget.put(out, line)
    return out


def meant_label(key: str, budget: hints.Budget | None = None) -> str | None:
    """The label of ours a key that is none of them is a misspelling of (`hints.meant`);
    one of our pod annotations when it is that (put on a namespace); `OPT_OUT_LABEL` for a
    key of ours that says the opposite of the opt-in; `hints.UNKNOWN` for another key
    under `gpu-share.io/`; None when it looks like none."""
    if key in _OUR_LABELS or key == NAME_LABEL:
        return None
    lower = key.lower()
    if "share" not in lower and "gpu" not in lower:
        return None
    if lower in _POD_ANNOTATIONS:
        return lower
    if lower.startswith(hints.DOMAIN_PREFIX) and _OPT_OUT.search(
        lower.removeprefix(hints.DOMAIN_PREFIX)
    ):
        # gpu-share.io/disabled is close to gpu-share.io/enabled by spelling, and the very
        # opposite by meaning: never tell an admin to opt such a namespace in.
        return OPT_OUT_LABEL
    return hints.meant(key, _OUR_LABELS, budget or hints.Budget())


def label_warnings(labels: Mapping[str, str], policies_in_force: policies.PolicySet) -> list[str]:
    """What a namespace created or relabelled is told (the `namespace-labels` entry): near
    misses of its labels, and, where it opted in, a policy label that names no policy in
    force. Which policies exist is not told: whoever may create a namespace may not read the
    webhook's configuration."""
    out = label_near_misses(labels)
    wanted = labels.get(POLICY_LABEL)
    if not opted_in(labels) or not wanted or policies_in_force.get(wanted) is not None:
        return out
    shown = hints.echo(wanted)
    if wanted in policies_in_force.broken:
        out.append(
            f'policy "{shown}" is not in force (its file does not load): GPU pods of this'
            " namespace are refused until the admin fixes it"
        )
    else:
        out.append(f'no policy is named "{shown}": GPU pods of this namespace are refused')
    return out
