"""The record a pod keeps of the webhook: which policy and profile govern it, and the rules
that changed it (annotations), and the same for the audit log (audit annotations).

`record` runs after every patch of the table, on the operations they made: it is what the
webhook says about the others' work, so it is not a rule of the table.
"""

from __future__ import annotations

from typing import Any

from webhook import names
from webhook.core import pods
from webhook.core.rules import ANNOTATIONS, Pass


def record(r: Pass, ops: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The operations that write the annotations of a pod the webhook changed (merged with
    what an earlier pass recorded); its audit annotations go to `r`."""
    pod, policy, known = r.pod, r.policy, r.facts
    shared = known.classes is not None and known.resource is not None
    if not ops and (not shared or policy.mode == names.DRY_RUN):
        return []
    steps: list[str] = []
    for rule, _ in ops:
        if rule not in steps:
            steps.append(rule)
    wanted: dict[str, str] = {}
    if pod.annotation(names.ANNOTATION_POLICY) != policy.name:
        wanted[names.ANNOTATION_POLICY] = policy.name
    # The profile governs the pod once its limits are applied (not in dry-run).
    profile = known.profile if shared else None
    if (
        profile is not None
        and policy.mode_of("mps-limits") != names.DRY_RUN
        and not pod.has_annotation(names.ANNOTATION_PROFILE)
    ):
        wanted[names.ANNOTATION_PROFILE] = profile.name
    if steps:
        before = pod.annotation(names.ANNOTATION_MUTATIONS)
        done = set(str(before).split(",")) if before else set()
        done.discard("")
        merged = ",".join(sorted(done.union(steps)))
        if merged != before:
            wanted[names.ANNOTATION_MUTATIONS] = merged
    if shared:
        r.note(ANNOTATIONS, "policy", policy.name)
        if known.profile is not None:
            r.note(ANNOTATIONS, "profile", known.profile.name)
        r.note(ANNOTATIONS, "classes", ",".join(c.name for c in known.classes or ()))
    if steps:
        r.note(ANNOTATIONS, "mutations", ",".join(steps))
    if not wanted:
        return []
    if not pod.has_metadata:
        return [(ANNOTATIONS, _add(pod.pointer("/metadata"), {"annotations": wanted}))]
    if not pod.has_annotations:
        return [(ANNOTATIONS, _add(pod.pointer("/metadata/annotations"), wanted))]
    base = pod.pointer("/metadata/annotations/")
    return [(ANNOTATIONS, _add(base + pods.escape(k), v)) for k, v in wanted.items()]


def _add(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}
