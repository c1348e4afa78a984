"""What a review decides: allowed or not, the patch, and what people should be told."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Kubernetes shows warnings to the user as they are; longer ones may be cut by clients.
MAX_WARNING = 120
# The rule of shape errors: a field whose type no Kubernetes object has (HTTP status 400).
MALFORMED = "malformed-object"


@dataclass(frozen=True, slots=True)
class Violation:
    """A rule that refuses the object: what is wrong, where, and the fix.

    `message` names the container (when there is one) and ends with the fix; `text` adds the
    rule's name, which is also the metric label, the audit annotation and the docs' entry.
    """

    rule: str
    message: str
    container: str | None = None

    @property
    def text(self) -> str:
        return f"{self.message} (rule {self.rule})"


@dataclass(slots=True)
class Decision:
    """The outcome of a review. `patch` is an RFC 6902 JSON Patch against the object as sent.

    Everything in it is made for this review alone: no part of it is shared with the policy
    or with another decision, so a caller may change it freely.
    """

    violations: list[Violation] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audit: dict[str, str] = field(default_factory=dict)
    # The rules that contributed operations to `patch`, in the order they ran.
    mutations: list[str] = field(default_factory=list)
    # Violations the policy does not enforce (its mode, or the rule's, is warn or dry-run):
    # (mode, violation). Warn ones are also among `warnings` and `audit`.
    would_refuse: list[tuple[str, Violation]] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.violations

    @property
    def malformed(self) -> bool:
        """The object has a shape no Kubernetes object has (bad input, not a broken rule)."""
        return any(v.rule == MALFORMED for v in self.violations)

    @property
    def code(self) -> int:
        """The HTTP-like status of a denial: 400 for a malformed object, else 403."""
        return 400 if self.malformed else 403

    @property
    def message(self) -> str:
        """Every violation, each with its rule, in one line (the API server shows one)."""
        if len(self.violations) == 1:
            return self.violations[0].text
        return f"{len(self.violations)} problems: " + "; ".join(
            f"({i}) {v.text}" for i, v in enumerate(self.violations, 1)
        )

    @property
    def rules(self) -> list[str]:
        """The names of the rules that refused, each once, sorted."""
        return sorted({v.rule for v in self.violations})

    def warn(self, text: str) -> None:
        if len(text) > MAX_WARNING:
            text = text[: MAX_WARNING - 3] + "..."
        if text not in self.warnings:
            self.warnings.append(text)
