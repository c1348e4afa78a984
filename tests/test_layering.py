"""The layering README.md describes holds: imports point one way, down.

command line -> transport -> watching -> codec (reviews) -> core -> names. A module may import
from its own layer or any below it, never from one above; `webhook.policy.names` imports nothing of
the project.

The tests have two layers too: test modules (tests/test_*.py) import the helpers (the shared
cases of tests/support/corpus.py and tests/support/strategies.py, tests/support/kube.py, ...), and nothing imports a
test module, neither another test module, nor a helper, nor a benchmark: what two modules
share lives in a helper, where it is found.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.kube import REPO

PACKAGE = REPO / "webhook"

# What each layer must not import (by module prefix).
FORBIDDEN = {
    "webhook.policy.names": ("webhook",),
    "webhook.engine": (
        "webhook.server",
        "webhook.server.reload",
        "webhook.server.codec",
        "webhook.tools",
        "webhook.cli",
        "webhook.tools.rendering",
        "webhook.tools.cabundle",
        "webhook.tools.auditing",
    ),
    "webhook.server.codec": ("webhook.server", "webhook.server.reload", "webhook.tools", "webhook.cli"),
    "webhook.server.reload": ("webhook.server", "webhook.tools", "webhook.cli"),
    "webhook.server": ("webhook.tools", "webhook.cli"),
}
# Besides: only the command line imports the command line.
COMMAND_LINE = ("webhook.tools", "webhook.cli", "webhook.__main__")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from webhook import reviews` imports the module webhook.server.codec.
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "webhook" or name.startswith("webhook.")}


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "_embedded" not in p.parts)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_imports_point_down(path: Path) -> None:
    name = module_name(path)
    imported = imports(path)
    for layer, forbidden in FORBIDDEN.items():
        if within(name, layer):
            wrong = sorted(
                i
                for i in imported
                for f in forbidden
                if within(i, f) and not (f == "webhook" and i == "webhook")
            )
            if layer == "webhook.policy.names":
                wrong = sorted(imported)
            assert not wrong, f"{name} ({layer}) imports {wrong}"
    if not any(within(name, c) for c in COMMAND_LINE):
        upward = sorted(i for i in imported if any(within(i, c) for c in COMMAND_LINE))
        assert not upward, f"{name} imports the command line: {upward}"


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` (a module and the modules it imports), or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    for node in sorted(graph):
        found = visit(node, [])
        if found:
            return found
    return None


def test_no_module_of_the_core_imports_one_that_imports_it() -> None:
    """Every import counts, those only for type checking too: one module of the core reads
    what another makes, never the other way round as well."""
    core = {module_name(p): p for p in MODULES if within(module_name(p), "webhook.engine")}
    graph = {
        name: {i for i in imports(path) if i in core and i != name}
        for name, path in core.items()
    }
    assert _circle(graph) is None, _circle(graph)
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_layers_exist() -> None:
    names = {module_name(p) for p in MODULES}
    for layer in (*FORBIDDEN, "webhook.tools"):
        assert any(within(n, layer) for n in names), layer


def imported_test_modules(source: str) -> set[str]:
    """The test modules (tests.test_*, test_*, .test_*) the Python `source` imports,
    anywhere in it (inside functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            # `from tests import test_x` and `from . import test_x` import the module test_x.
            sep = "." if node.module else ""
            names = [base, *(f"{base}{sep}{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            parts = name.lstrip(".").split(".")
            if parts[0].startswith("test_") or (
                parts[0] == "tests" and len(parts) > 1 and parts[1].startswith("test_")
            ):
                found.add(".".join(parts[:2] if parts[0] == "tests" else parts[:1]))
    return found


def test_the_import_check_sees_every_way_to_import_a_test_module() -> None:
    sources = {
        "from tests.tools.test_discover import node": {"tests.tools.test_discover"},
        "from tests import corpus, test_rules": {"tests.engine.test_rules"},
        "import tests.engine.test_rules as t": {"tests.engine.test_rules"},
        "from . import test_rules": {"test_rules"},
        "from .test_rules import CASES": {"test_rules"},
        "def f():\n    from tests import test_rules": {"tests.engine.test_rules"},
        "from tests import corpus, kube, strategies\nimport testing": set(),
    }
    for source, found in sources.items():
        assert imported_test_modules(source) == found, source


def test_no_module_of_the_tests_or_the_benchmarks_imports_a_test_module() -> None:
    paths = sorted((REPO / "tests").rglob("*.py")) + sorted((REPO / "bench").rglob("*.py"))
    assert sum(p.name.startswith("test_") for p in paths) > 30
    wrong = {
        str(p.relative_to(REPO)): sorted(found)
        for p in paths
        if (found := imported_test_modules(p.read_text()))
    }
    assert not wrong, (
        f"test modules imported (move what they share to a helper such as tests/support/corpus.py): "
        f"{wrong}"
    )
