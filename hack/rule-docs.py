#!/usr/bin/env python3
"""Write the docs' rule tables from the table of rules (`RULES` in webhook/engine/rules.py).

    python hack/rule-docs.py            # rewrite the tables
    python hack/rule-docs.py --check    # write nothing; exit 1 naming the stale documents
                                        # (tests/test_registry.py fails the same way)

Run it from the repository root with the project's virtualenv. Each table stands between two
marker comments in its document, and everything between them is this script's:

    <!-- BEGIN rule-docs NAME: ... -->
    ...
    <!-- END rule-docs NAME -->

What a table says of a rule (its scope, what it refuses or adds, its switch, what reports
class it as) is in the rule's row: change the row, then run this. A script, not a command
of the package: it writes the documents of a checkout, which an installed package has not.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from webhook.engine import rules  # noqa: E402
from webhook.engine.rules import Concern, Rule, Scope  # noqa: E402
from webhook.policy import names  # noqa: E402
from webhook.tools import reporting  # noqa: E402

COMMAND = "python hack/rule-docs.py"
# The width of the documents' prose lines.
WIDTH = 95
NONE = "—"


def _code(name: str) -> str:
    return f"`{name}`"


def _listed(items: Sequence[str]) -> str:
    """`a`, `b` and `c`."""
    quoted = [_code(i) for i in items]
    return f"{', '.join(quoted[:-1])} and {quoted[-1]}" if len(quoted) > 1 else quoted[0]


def _wrap(text: str, first: str = "", rest: str = "") -> list[str]:
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )


def scope(rule: Rule) -> str:
    """The pods (and claims) a rule looks at, as the table of docs/policies.md says it."""
    words = rule.scope.value
    if rule.claims:
        words += ", claims"
    if rule.pod_security:
        levels = " or ".join(_code(level) for level in names.POD_SECURITY_HOST_ACCESS_LEVELS)
        words += f", where the namespace does not enforce Pod Security {levels}"
    return words


def _row(*cells: str) -> str:
    return f"| {' | '.join(cells)} |"


def policies_rules() -> list[str]:
    """docs/policies.md, "Rules and their switches": every rule, and those that apply where
    a namespace's policy is not in force."""
    lines = [_row("rule", "scope", "refuses, or adds", "switch"), "|---|---|---|---|"]
    for rule in rules.RULES:
        switch = rule.switch or rule.changed_by
        lines.append(
            _row(_code(rule.name), scope(rule), rule.summary, _code(switch) if switch else NONE)
        )
    # The rules that refuse the GPU pods of such a namespace are not among those it gets.
    standing_in = (names.UNKNOWN_POLICY_RULE, names.POLICY_NOT_LOADED_RULE)
    kept = [r.name for r in rules.RULES if r.always and r.name not in standing_in]
    lines.append("")
    lines += _wrap(
        "In a namespace whose policy is not in force (an unknown name, a file that does not"
        " load) a pod that asks for a GPU is refused, and every other pod still gets the rules"
        f" that do not depend on a policy: {_listed(kept)}, with the default switches."
    )
    return lines


def _claim_rules() -> list[Rule]:
    """The rules of claims, then the other rules that also refuse claims."""
    own = [r for r in rules.RULES if r.scope is Scope.CLAIM]
    return own + [r for r in rules.RULES if r.claims and r.scope is not Scope.CLAIM]


def dra_rules() -> list[str]:
    """docs/dra.md, "The rules": every rule that refuses claims."""
    lines = [_row("rule", "refuses, or adds"), "|---|---|"]
    lines += [_row(_code(r.name), r.summary) for r in _claim_rules()]
    return lines


def security_dra_rules() -> list[str]:
    """docs/security.md, "Dynamic resource allocation": the rules of claims, as a list in
    the list item of what the webhook does."""
    own = [r for r in rules.RULES if r.scope is Scope.CLAIM]
    lines: list[str] = []
    for i, rule in enumerate(own):
        end = "." if i == len(own) - 1 else ";"
        lines += _wrap(f"{_code(rule.name)}: {rule.summary}{end}", "  - ", "    ")
    return lines


# What each class of rules guards, as docs/audit.md says it.
_GUARDS = {
    Concern.ISOLATION: "what keeps a container from more GPU than its policy grants, or from"
    " the node's GPUs and their sharing machinery",
    Concern.SCHEDULING: "what decides whether a pod runs where and as it should (one that"
    " would fail on its node, or land on the wrong one)",
}


def audit_severities() -> list[str]:
    """docs/audit.md, "A rule's severity and category": the rules of each, and the severity
    of warnings (`reporting.LOW`)."""
    lines: list[str] = []
    for concern in Concern:
        members = [r.name for r in rules.RULES if r.concern is concern]
        lines += _wrap(
            f"{_code(concern.severity)}, category {_code(concern.category)}:"
            f" {_GUARDS[concern]}: {_listed(members)};",
            "- ",
            "  ",
        )
    lines.append(f"- {_code(reporting.LOW)}: warnings only.")
    return lines


# Each table: its document, its name in the markers, what it holds.
TABLES: tuple[tuple[str, str, Callable[[], list[str]]], ...] = (
    ("docs/policies.md", "rules", policies_rules),
    ("docs/security.md", "dra-rules", security_dra_rules),
    ("docs/dra.md", "rules", dra_rules),
    ("docs/audit.md", "severities", audit_severities),
)


def begin(name: str) -> str:
    return (
        f"<!-- BEGIN rule-docs {name}: written from webhook/engine/rules.py by"
        f" hack/rule-docs.py -->"
    )


def end(name: str) -> str:
    return f"<!-- END rule-docs {name} -->"


def rewrite(text: str, name: str, body: Iterable[str], doc: str = "") -> str:
    """`text` with the lines between the markers of `name` replaced by `body` (the markers
    keep their indentation)."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == begin(name)]
    ends = [i for i, line in enumerate(lines) if line.strip() == end(name)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise SystemExit(
            f"{doc or 'the document'}: no single pair of markers {begin(name)!r} ..."
            f" {end(name)!r}"
        )
    return "\n".join([*lines[: starts[0] + 1], *body, *lines[ends[0] :]])


def documents() -> dict[Path, str]:
    """Every document with a table, as it should be."""
    out: dict[Path, str] = {}
    for doc, name, table in TABLES:
        path = REPO / doc
        text = out.get(path) or path.read_text(encoding="utf-8")
        out[path] = rewrite(text, name, table(), doc)
    return out


def stale() -> list[str]:
    """The documents whose tables are not what the rules' rows say (relative paths)."""
    return [
        str(path.relative_to(REPO))
        for path, text in documents().items()
        if path.read_text(encoding="utf-8") != text
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    found = stale()
    if args.check:
        if found:
            print(f"stale rule tables in {', '.join(found)}: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    for path, text in documents().items():
        if str(path.relative_to(REPO)) in found:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
