"""The layering README.md describes holds: imports point one way, down.

    tools (and cli)  ->  server  ->  engine  ->  policy  ->  errors

A module may import from its own layer or any below it, never from one above; `errors`
imports nothing of the project, and no module of the engine imports one that imports it.

The tests have two layers too: test modules (tests/<area>/test_*.py) import the helpers of
tests/support/ and the cases beside them, and nothing imports a test module, neither another
test module, nor a helper, nor a benchmark: what two modules share lives in a helper, where
it is found.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from tests.support.kube import REPO

PACKAGE = REPO / "webhook"

# Each layer, from the bottom, and what it may import of the project besides itself.
LAYERS: dict[str, tuple[str, ...]] = {
    "webhook.errors": (),
    "webhook.policy": ("webhook.errors",),
    "webhook.engine": ("webhook.policy", "webhook.errors"),
    "webhook.server": ("webhook.engine", "webhook.policy", "webhook.errors"),
}
# The top: the commands, and what runs them.
TOP = ("webhook.tools", "webhook.cli", "webhook.__main__")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # each module parsed once per run, for every test that asks
def imports(path: Path) -> frozenset[str]:
    """The project's modules `path` imports, anywhere in it (type checking too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from webhook.engine import rules` imports the module webhook.engine.rules.
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(name for name in found if name.startswith("webhook."))


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "_embedded" not in p.parts)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(name: str) -> str | None:
    """The layer of module `name` (None: the top)."""
    return next((layer for layer in LAYERS if within(name, layer)), None)


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_imports_point_down(path: Path) -> None:
    name = module_name(path)
    layer = layer_of(name)
    if layer is None:
        return
    allowed = (layer, *LAYERS[layer])
    wrong = sorted(i for i in imports(path) if not any(within(i, a) for a in allowed))
    assert not wrong, f"{name} ({layer}) imports {wrong}"


def test_every_module_is_in_a_layer_or_at_the_top() -> None:
    for path in MODULES:
        name = module_name(path)
        top = name == "webhook" or any(within(name, t) for t in TOP)
        assert layer_of(name) is not None or top, name


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


def test_no_module_of_the_engine_imports_one_that_imports_it() -> None:
    """Every import counts, those only for type checking too: one module of the engine reads
    what another makes, never the other way round as well."""
    engine = {module_name(p): p for p in MODULES if within(module_name(p), "webhook.engine")}
    graph = {
        name: {i for i in imports(path) if i in engine and i != name}
        for name, path in engine.items()
    }
    assert _circle(graph) is None, _circle(graph)
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_layers_exist() -> None:
    names = {module_name(p) for p in MODULES}
    for layer in (*LAYERS, "webhook.tools"):
        assert any(within(n, layer) for n in names), layer


def imported_test_modules(source: str) -> set[str]:
    """The test modules (a `test_*` module of the tests' package, or a relative one) the
    Python `source` imports, anywhere in it (inside functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            # `from tests.engine import test_x` and `from . import test_x` import test_x.
            sep = "." if node.module else ""
            names = [base, *(f"{base}{sep}{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            relative = name.startswith(".")
            parts = name.lstrip(".").split(".")
            if not (relative or parts[0] == "tests" or parts[0].startswith("test_")):
                continue  # another package's (aiohttp.test_utils)
            for i, part in enumerate(parts):
                if part.startswith("test_"):
                    found.add(".".join(parts[: i + 1]))
                    break
    return found


def test_the_import_check_sees_every_way_to_import_a_test_module() -> None:
    sources = {
        "from tests.tools.test_discover import node": {"tests.tools.test_discover"},
        "from tests.engine import cases, test_rules": {"tests.engine.test_rules"},
        "import tests.engine.test_rules as t": {"tests.engine.test_rules"},
        "from . import test_rules": {"test_rules"},
        "from .test_rules import CASES": {"test_rules"},
        "def f():\n    from tests.engine import test_rules": {"tests.engine.test_rules"},
        "from tests.support import kube, strategies\nimport testing": set(),
        "from aiohttp.test_utils import TestClient": set(),
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
    assert not wrong, f"test modules imported (move what they share to a helper): {wrong}"
