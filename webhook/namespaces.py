"""How a namespace reaches its policy: the opt-in label and the policy label.

In a cluster the API server does this matching (the webhook configurations' namespace
selectors, one entry per policy, see `rendering`); the offline `mutate` command makes the
same choice here from the labels it is given.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.names import DEFAULT_POLICY, ENABLED_LABEL, NAME_LABEL, POLICY_LABEL

__all__ = ["ENABLED_LABEL", "NAME_LABEL", "POLICY_LABEL", "opted_in", "policy_name"]


def opted_in(labels: Mapping[str, str]) -> bool:
    return labels.get(ENABLED_LABEL) == "true"


def policy_name(labels: Mapping[str, str]) -> str | None:
    """The policy that governs a namespace with these labels; None when it has not opted in."""
    if not opted_in(labels):
        return None
    return labels.get(POLICY_LABEL) or DEFAULT_POLICY
