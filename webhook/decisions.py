"""What a review decides: allowed or not, the patch, and what people should be told."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Kubernetes shows warnings to the user as they are; longer ones may be cut by clients.
MAX_WARNING = 120


@dataclass(frozen=True, slots=True)
class Violation:
    """A rule that refuses the object, with a message that names the rule and the fix."""

    rule: str
    message: str
    container: str | None = None


@dataclass(slots=True)
class Decision:
    """The outcome of a review. `patch` is an RFC 6902 JSON Patch against the object as sent."""

    violations: list[Violation] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audit: dict[str, str] = field(default_factory=dict)
    # HTTP-like status of a denial (403: refused by a rule).
    code: int = 403

    @property
    def allowed(self) -> bool:
        return not self.violations

    @property
    def message(self) -> str:
        return "; ".join(v.message for v in self.violations)

    def warn(self, text: str) -> None:
        if len(text) > MAX_WARNING:
            text = text[: MAX_WARNING - 3] + "..."
        if text not in self.warnings:
            self.warnings.append(text)

    def deny(self, rule: str, message: str, container: str | None = None) -> None:
        self.violations.append(Violation(rule, message, container))
