"""How a namespace reaches its policy: the opt-in label, the policy label and the Pod
Security enforce label.

In a cluster the API server does this matching (the webhook configurations' namespace
selectors, two entries per policy, see `rendering`); the offline `mutate` command makes the
same choice here from the labels it is given.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook import policies
from webhook.names import (
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
    "opted_in",
    "policy_name",
    "policy_path",
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


def policy_path(labels: Mapping[str, str]) -> str | None:
    """The webhook path (after `/<endpoint>/`) that the entry selecting a namespace with these
    labels names when the policy exists: `<name>` or `<name>/baseline`; None when it has not
    opted in."""
    name = policy_name(labels)
    if name is None:
        return None
    return policies.policy_path(name, pod_security=enforces_pod_security(labels))
