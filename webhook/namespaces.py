"""How a namespace reaches its policy: the opt-in label, the policy label and the Pod
Security enforce label.

In a cluster the API server does this matching (the webhook configurations' namespace
selectors, two entries per policy, see `rendering`); the offline `mutate` command makes the
same choice here from the labels it is given.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from webhook import policies
from webhook.names import ANNOTATION_MUTATIONS as MUTATIONS_ANNOTATION
from webhook.names import ANNOTATION_PROFILE as PROFILE_ANNOTATION
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
    "label_near_misses",
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


# Values people write for "yes" that a label selector does not take for "true".
_TRUE_LOOKING = frozenset({"true", "yes", "y", "on", "1", "enabled", "enable"})
_OUR_LABELS = (ENABLED_LABEL, POLICY_LABEL)
_DOMAIN_PREFIX = ENABLED_LABEL.partition("/")[0] + "/"
_OUR_NAMES = tuple(label.removeprefix(_DOMAIN_PREFIX) for label in _OUR_LABELS)


def label_near_misses(labels: Mapping[str, str]) -> list[str]:
    """What in a namespace's labels looks like the opt-in or the policy label but is not
    (label keys and values are matched exactly by the webhook configurations' selectors):
    one line each, saying what the namespace gets instead and what to write. At most
    `_MOST_LINES` lines and `_MOST_LOOKS` fuzzy matches, whatever the labels hold."""
    out: list[str] = []
    value = labels.get(ENABLED_LABEL)
    if value is not None and value != "true" and value.strip().lower() in _TRUE_LOOKING:
        out.append(
            f'label {ENABLED_LABEL}={value} does not opt in: only "true" does (label values'
            " are case-sensitive)"
        )
    looks = [_MOST_LOOKS]
    for key in labels:
        meant = meant_label(key, looks)
        if meant is None:
            continue
        if len(out) == _MOST_LINES:
            out.append("more labels look like gpu-share's but are not; the first are above")
            break
        shown = key if len(key) <= 48 else key[:45] + "..."
        if meant in _POD_ANNOTATIONS:
            out.append(
                f"{meant} is a pod annotation, not a namespace label: label {shown} is not read"
            )
        elif meant == OPT_OUT_LABEL:
            out.append(
                f"a namespace without {ENABLED_LABEL}=true is left alone: label {shown} is not read"
            )
        elif meant == UNKNOWN_LABEL:
            out.append(
                f"gpu-share reads {ENABLED_LABEL} and {POLICY_LABEL}: label {shown} is not read"
            )
        else:
            out.append(f"did you mean {meant}? Label {shown} is not read")
    return out


# What `meant_label` says of a key under gpu-share.io/ that is close to none of ours, and of
# one that says the opposite of the opt-in.
UNKNOWN_LABEL = "(unknown)"
OPT_OUT_LABEL = "(opt-out)"
_OPT_OUT = re.compile(r"disab|exempt|exclu|ignor|skip|opt-?out|^off$|^no-|bypass")
# The pod annotations of ours, which people also put on namespaces.
_POD_ANNOTATIONS = (PROFILE_ANNOTATION, MUTATIONS_ANNOTATION)


_MOST_LINES = 6
_MOST_LOOKS = 64


def meant_label(key: str, looks: list[int] | None = None) -> str | None:
    """The label of ours a key that is none of them is a misspelling of; one of our pod
    annotations when it is that (put on a namespace); `UNKNOWN_LABEL` for another key under
    `gpu-share.io/`; None when it looks like none. `looks`: fuzzy matches left, counted
    down."""
    if key in _OUR_LABELS or key == NAME_LABEL:
        return None
    lower = key.lower()
    if "share" not in lower and "gpu" not in lower:
        return None
    if lower in _POD_ANNOTATIONS:
        return lower
    if _OPT_OUT.search(lower.rpartition("/")[2]):
        # gpu-share.io/disabled is close to gpu-share.io/enabled by spelling, and the very
        # opposite by meaning: never tell an admin to opt such a namespace in.
        return OPT_OUT_LABEL
    # Much longer than both labels: no misspelling of them (difflib's ratio stays low).
    close: list[str] = []
    if len(lower) <= 2 * len(ENABLED_LABEL) and (looks is None or looks[0] > 0):
        if looks is not None:
            looks[0] -= 1
        if lower.startswith(_DOMAIN_PREFIX):
            # Under our domain the names alone are compared: the shared prefix would make
            # gpu-share.io/team look like gpu-share.io/enabled.
            found = difflib.get_close_matches(
                lower.removeprefix(_DOMAIN_PREFIX), _OUR_NAMES, n=1, cutoff=0.75
            )
            close = [_DOMAIN_PREFIX + n for n in found]
        else:
            close = difflib.get_close_matches(lower, _OUR_LABELS, n=1, cutoff=0.8)
    if close:
        return close[0]
    if key.startswith(_DOMAIN_PREFIX):
        # No guess: gpu-share.io/exempt or gpu-share.io/disabled is no misspelling of the
        # opt-in, and taking it for one would tell an admin to opt the namespace in.
        return UNKNOWN_LABEL
    return None
