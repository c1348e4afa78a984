"""The fast loop: whether this run leaves the `slow` tests out (`pytest -m "not slow"`), and
how many examples a property test draws in it.

A property test asks for `examples(n)`: n in a run that includes the slow tests (`pytest`,
CI), a few in the fast loop, which then still runs every property once over a handful of
cases. tests/conftest.py tells this module the run's mark expression before any test module
is imported.
"""

from __future__ import annotations

import ast

# Examples a property test draws in the fast loop, unless it asks for fewer.
FAST_EXAMPLES = 10

_fast = False


def configure(markexpr: str) -> None:
    """Take the run's `-m` expression (empty without one)."""
    global _fast  # noqa: PLW0603 - set once, before the test modules are imported
    _fast = leaves_out_slow(markexpr)


def fast() -> bool:
    """Whether this run is the fast loop."""
    return _fast


def examples(n: int) -> int:
    """The examples a property test that draws `n` in a full run draws in this one."""
    return min(n, FAST_EXAMPLES) if _fast else n


def leaves_out_slow(markexpr: str) -> bool:
    """Whether `-m markexpr` deselects a test marked `slow` and nothing else. An expression
    this cannot read counts as a full run (more examples, never fewer)."""
    if not markexpr.strip():
        return False
    try:
        tree = ast.parse(markexpr, mode="eval").body
    except SyntaxError:
        return False

    def value(node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id == "slow"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not value(node.operand)
        if isinstance(node, ast.BoolOp):
            values = [value(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        raise ValueError(node)

    try:
        return not value(tree)
    except ValueError:
        return False
