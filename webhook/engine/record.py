"""The record a pod keeps of the webhook: which policy and profile govern it, and the rules
that changed it (annotations); and the same for the audit log (audit annotations).

`record` runs after every patch of the table, on the operations they made: it is what the
webhook says about the others' work, so it is not a rule of the table.
"""

from __future__ import annotations

from typing import Any, Final

from webhook.engine import view
from webhook.engine.decision import Addition
from webhook.engine.rules import ANNOTATIONS, MPS_LIMITS, PodPass
from webhook.policy import names

# `names` the loops below read, as Final constants the compiled core reads directly.
_DRY_RUN: Final = names.DRY_RUN
_ANNOTATION_POLICY: Final = names.ANNOTATION_POLICY
_ANNOTATION_PROFILE: Final = names.ANNOTATION_PROFILE
_ANNOTATION_MUTATIONS: Final = names.ANNOTATION_MUTATIONS


def record(
    r: PodPass, ops: list[tuple[str, dict[str, Any]]]
) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, str], Addition | None]:
    """The operations that write the annotations of a pod the webhook changed (merged with
    what an earlier pass recorded), its audit annotations, and what they add in words."""
    pod, policy, known = r.facts.pod, r.policy, r.facts
    classes = known.classes
    shared = classes is not None and known.resource is not None
    if not ops and (not shared or policy.mode == _DRY_RUN):
        return [], {}, None
    steps: list[str] = []
    for rule, _ in ops:
        if rule not in steps:
            steps.append(rule)
    # (A dict, as the view holds it: its lookups are dict lookups in the compiled core.)
    annotations = (pod.meta.annotations if pod.meta is not None else None) or {}
    recorded_policy = annotations.get(_ANNOTATION_POLICY)
    has_profile = _ANNOTATION_PROFILE in annotations
    recorded_steps = annotations.get(_ANNOTATION_MUTATIONS)
    wanted: dict[str, str] = {}
    if recorded_policy != policy.name:
        wanted[_ANNOTATION_POLICY] = policy.name
    # The profile governs the pod once its limits are applied (not in dry-run).
    profile = known.profile
    if (
        shared
        and profile is not None
        and not has_profile
        and policy.mode_of(MPS_LIMITS.name) != _DRY_RUN
    ):
        wanted[_ANNOTATION_PROFILE] = profile.name
    if steps:
        # What an earlier pass recorded, and nothing else: a name that is no rule's was
        # written by someone else, not by the webhook.
        steps_text = str(recorded_steps) if recorded_steps else ""
        # (Longer than every rule's name at once, it is not the webhook's: not split.)
        done = (
            set(steps_text.split(",")) & _RULES if 0 < len(steps_text) <= _RECORDED else set()
        )
        merged = ",".join(sorted(done.union(steps)))
        if merged != recorded_steps:
            wanted[_ANNOTATION_MUTATIONS] = merged
    audit: dict[str, str] = {}
    if shared:
        audit["policy"] = policy.name
        if profile is not None:
            audit["profile"] = profile.name
        audit["classes"] = ",".join(c.name for c in classes or ())
    if steps:
        audit["mutations"] = ",".join(steps)
    if not wanted:
        return [], audit, None
    words = None
    if r.in_words:
        said = ", ".join(f"{k}={v}" for k, v in wanted.items())
        words = Addition(ANNOTATIONS, "annotations", said)
    pointer = pod.place.pointer
    if pod.meta is None:
        op = _add(f"{pointer}/metadata", {"annotations": wanted})
        return [(ANNOTATIONS, op)], audit, words
    if pod.meta.annotations is None:
        return [(ANNOTATIONS, _add(f"{pointer}/metadata/annotations", wanted))], audit, words
    base = f"{pointer}/metadata/annotations/"
    recorded = [(ANNOTATIONS, _add(base + _ESCAPED[k], v)) for k, v in wanted.items()]
    return recorded, audit, words


_RULES = frozenset(names.RULES)
# What the annotation of the rules that mutated holds at most: every rule's name.
_RECORDED: Final = len(",".join(names.RULES))
# The annotations recorded, as JSON Pointer reference tokens.
_ESCAPED: Final = {
    k: view.escape(k) for k in (_ANNOTATION_POLICY, _ANNOTATION_PROFILE, _ANNOTATION_MUTATIONS)
}


def _add(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}
