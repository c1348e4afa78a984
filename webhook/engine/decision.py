"""What a review decides: allowed or not, the patch, and what people should be told.

A refusal is a list of `Violation`s, each as Kubernetes' own validation reports a field
error (k8s.io/apimachinery `field.Error`): the rule, the kind of error, the field path and
the container it concerns, and the words. The message a user reads is built from them.
"""

from __future__ import annotations

import enum
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple

from webhook.policy import names

# Kubernetes asks for warnings of at most 120 characters where possible: a plain warning is
# cut there. The API server may cut one past 256 characters, and drops the rest once a
# request's warnings (every webhook's and its own) add up to 4,096 (k8s.io/apiserver's
# warning recorder): a refusal the policy only warns of keeps its fix within 256.
MAX_WARNING = 120
MAX_LONG_WARNING = 256
# What one answer's warnings add up to at most: half the API server's 4,096, since a Pod
# create is answered by both configurations. And how many it sends at most. Past either,
# one last line says how many more there were.
MAX_WARNINGS_TOTAL = 2000
MAX_WARNINGS = 30
# Room kept for that last line ("and N more warnings like these").
_MORE_LINE = 48
MALFORMED = names.MALFORMED_RULE


def shown(value: object, *, keep: Literal["start", "end"] = "start") -> str:
    """A value of the object for a message: quoted, and cut short (messages are bounded,
    inputs are not), keeping its start, or with `keep="end"` its end: a path's last
    segments say what it reaches (`/srv/<200 characters>/../../dev/nvidia0`)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, dict):
        # Not its repr: a value nested a thousand deep would exceed the recursion limit,
        # and a large one would be copied whole to be cut short.
        text = f"an object of {len(value)} keys"
    elif isinstance(value, list):
        text = f"a list of {len(value)} items"
    else:
        text = repr(value)
    if len(text) > 40:
        kept = f"...{text[-32:]}" if keep == "end" else f"{text[:32]}..."
        text = f"{kept} ({len(text)} characters)"
    return f'"{text}"'


def short_warning(text: str, limit: int = MAX_WARNING) -> str:
    """A warning as it is sent: printable (`printable`), and cut at `limit`."""
    text = printable(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# The start of a message's last sentence, which is its fix (`Violation.message`).
_SENTENCE = re.compile(r"\. (?=[A-Z])")
# What a warning keeps of the start of a long message at least (what is refused, where).
_HEAD = 60
# What it keeps of the end of a message in which no sentence starts.
_TAIL = 100
# How far back the start is cut to the end of a word.
_WORD = 20


def refusal_warning(violation: Violation) -> str:
    """A refusal that the policy only warns of (its mode is warn), as the user is told it:
    `would be refused (rule R): ` and the message, at most MAX_LONG_WARNING characters.
    A longer message gives up its middle (the explanation), never its start (what is wrong
    and where) or its last sentence (the fix)."""
    prefix = f"would be refused (rule {violation.rule}): "
    return prefix + keep_ends(printable(violation.message), MAX_LONG_WARNING - len(prefix))


def keep_ends(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: whole when it fits, else its start, "... " and
    its last sentence (its last `_TAIL` characters when no sentence starts in it; a last
    sentence too long for the room left after `_HEAD` characters is cut at its end)."""
    if len(text) <= limit:
        return text
    starts = [m.end() for m in _SENTENCE.finditer(text)]
    tail = text[starts[-1] :] if starts else text[-_TAIL:]
    room = limit - _HEAD - len(" ... ")
    if len(tail) > room:
        tail = tail[: room - 3] + "..."
    head = text[: limit - len(tail) - len(" ... ")]
    # At the end of a word, when one ends near.
    space = head.rfind(" ", len(head) - _WORD)
    head = (head[:space] if space > 0 else head).rstrip()
    return f"{head} ... {tail}"


def printable(text: str) -> str:
    """`text` with every character that is not printable (newlines, terminal escapes, bidi
    overrides, zero-width characters: what a name in a pod can hold before the API server
    validates it) written as `\\uXXXX`: what the webhook echoes of an object cannot start a
    line of its own or rewrite one in a terminal or a log."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def _escaped(c: str) -> str:
    code = ord(c)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


class ErrorType(enum.Enum):
    """What is wrong with a field, by the names Kubernetes gives its field errors
    (`field.ErrorType`); those the rules use."""

    REQUIRED = "FieldValueRequired"
    INVALID = "FieldValueInvalid"
    NOT_SUPPORTED = "FieldValueNotSupported"
    FORBIDDEN = "FieldValueForbidden"
    TYPE_INVALID = "FieldValueTypeInvalid"
    TOO_MANY = "FieldValueTooMany"


class Place(NamedTuple):
    """Where a pod spec stands in the reviewed object."""

    pointer: str  # its JSON Pointer: "" for a Pod, "/spec/template" for a Deployment
    field: str  # its field path: "" for a Pod, "spec.template" for a Deployment
    # How a message names it: "" for a Pod and the built-in kinds (one template, no doubt
    # which), "RayCluster spec.workerGroupSpecs[0].template" for the others.
    label: str

    def at(self, path: str) -> str:
        """The field path of `path` (relative to the pod spec) in the reviewed object."""
        if not self.field:
            return path or "(object)"
        return f"{self.field}.{path}" if path else self.field


OBJECT = Place("", "", "")


class Marker(enum.Enum):
    FIELD = "field"


# In a violation's words, where the message shows the path of the field at fault.
FIELD: Final = Marker.FIELD
Words = tuple[str | Marker, ...]


@dataclass(frozen=True, slots=True)
class Violation:
    """A rule that refuses the object: which, what kind of error, where, and the words.

    `field` is the path of the field at fault relative to the pod (or pod template) it is
    in, `place` where that pod stands in the object; so the violations of a Deployment's
    template and of its pods compare equal field by field. `words` is what the message
    says, with `FIELD` where it shows the field's path in the object. `message` names the
    container (when there is one) and ends with the fix; `text` adds the rule's name, which
    is also the metric label, the audit annotation and the docs' entry.
    """

    rule: str
    type: ErrorType
    field: str
    words: Words
    container: str | None = None
    place: Place = OBJECT

    @property
    def message(self) -> str:
        path = self.place.at(self.field)
        body = "".join(path if word is FIELD else word for word in self.words)
        label = self.place.label
        return f"{label}: {body}" if label else body

    @property
    def text(self) -> str:
        return f"{self.message} (rule {self.rule})"


class Addition(NamedTuple):
    """What a rule's patch adds, in the rule's words, made where the operation is made: the
    place (`env of container "log"`, `tolerations`, `config of request "gpu"`) and what
    (`NVIDIA_VISIBLE_DEVICES=void`). `audit` says it."""

    rule: str
    topic: str
    text: str


# What an addition's words show of a value at most.
_SHOWN_VALUE: Final = 80


def added_value(value: object) -> str:
    """A value a patch adds, in an addition's words: a string as it is, others as compact
    JSON; cut at `_SHOWN_VALUE` characters."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= _SHOWN_VALUE else text[: _SHOWN_VALUE - 3] + "..."


# How many violations a denial's message shows in full.
SHOWN_PROBLEMS = 20


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
    # Warnings past MAX_WARNINGS, counted, not kept.
    dropped: int = 0
    # The rules that contributed operations to `patch`, in the order they ran.
    mutations: list[str] = field(default_factory=list)
    # What `patch` adds, in its rules' words (where the review was asked for them: the
    # offline commands; the server sends the patch alone).
    additions: list[Addition] = field(default_factory=list)
    # Violations the policy does not enforce (its mode, or the rule's, is warn or dry-run):
    # (mode, violation). Warn ones are also among `warnings` and `audit`.
    would_refuse: list[tuple[str, Violation]] = field(default_factory=list)

    def __init__(
        self,
        *,
        violations: list[Violation] | None = None,
        patch: list[dict[str, Any]] | None = None,
        warnings: list[str] | None = None,
        audit: dict[str, str] | None = None,
        dropped: int = 0,
        mutations: list[str] | None = None,
        additions: list[Addition] | None = None,
        would_refuse: list[tuple[str, Violation]] | None = None,
    ) -> None:
        # Written out, where the dataclass's is made at run time and interpreted even in the
        # compiled core (a decision is made every review): each field left out is a new
        # list or dict, as its default factory makes it.
        self.violations = [] if violations is None else violations
        self.patch = [] if patch is None else patch
        self.warnings = [] if warnings is None else warnings
        self.audit = {} if audit is None else audit
        self.dropped = dropped
        self.mutations = [] if mutations is None else mutations
        self.additions = [] if additions is None else additions
        self.would_refuse = [] if would_refuse is None else would_refuse

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
        """Every violation, each with its rule, in one line (the API server shows one); past
        `SHOWN_PROBLEMS`, how many more of each rule (a pod with thousands of volumes gets an
        answer of kilobytes, not megabytes)."""
        violations = self.violations
        if len(violations) == 1:
            return printable(violations[0].text)
        text = f"{len(violations)} problems: " + "; ".join(
            f"({i}) {v.text}" for i, v in enumerate(violations[:SHOWN_PROBLEMS], 1)
        )
        if len(violations) > SHOWN_PROBLEMS:
            more = Counter(v.rule for v in violations[SHOWN_PROBLEMS:])
            text += "; and " + ", ".join(f"{n} more of rule {rule}" for rule, n in more.items())
        return printable(text)

    @property
    def rules(self) -> list[str]:
        """The names of the rules that refused, each once, sorted."""
        return sorted({v.rule for v in self.violations})

    def warn(self, text: str, limit: int = MAX_WARNING) -> None:
        """Tell the user `text` (printable, cut at `limit`), once; past `MAX_WARNINGS`
        warnings or `MAX_WARNINGS_TOTAL` characters the last line says how many more there
        were (kubectl prints each on a line of its own, and a pod of 2,000 containers would
        otherwise get thousands)."""
        text = short_warning(text, limit)
        warnings = self.warnings
        if text in warnings:
            return
        if (
            not self.dropped
            and len(warnings) < MAX_WARNINGS
            and sum(map(len, warnings)) + len(text) <= MAX_WARNINGS_TOTAL - _MORE_LINE
        ):
            warnings.append(text)
            return
        self.more(1)

    def more(self, count: int) -> None:
        """Count `count` warnings not sent, in the last line."""
        if count <= 0:
            return
        line = f"and {self.dropped + count} more warnings like these"
        if self.dropped:
            self.warnings[-1] = line
        else:
            self.warnings.append(line)
        self.dropped += count

    def warn_first(self, texts: list[str], limit: int) -> None:
        """Tell the user `texts` (each cut at `limit`) before what it was told so far: what
        the budget of warnings leaves out is then the rest."""
        told = self.warnings[:-1] if self.dropped else self.warnings
        dropped = self.dropped
        self.warnings, self.dropped = [], 0
        for text in texts:
            self.warn(text, limit)
        for text in told:
            self.warn(text)
        self.more(dropped)
