"""Shared fixtures. Test helpers that build pods and play the API server live in
tests/support/kube.py.

Only what xdist's controller needs is imported here (it hands out the tests and prints their
reports): the Kubernetes client, the package and tests/support/kube.py are the workers'.
(kubernetes-validate is patched here, before any test module imports it.)
"""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import kubernetes_validate.utils
import pytest
from hypothesis import settings

from tests.support import fast_loop, loop, real_world

if TYPE_CHECKING:
    from webhook.policy import policies

# kubernetes-validate lists its schema versions and reads the schema files (megabytes of
# JSON) again at every call: each is read once per run. Its validation runs as it is.
kubernetes_validate.utils.all_versions = functools.cache(kubernetes_validate.utils.all_versions)
kubernetes_validate.utils.schema_contents = functools.cache(
    kubernetes_validate.utils.schema_contents
)


def pytest_configure(config: pytest.Config) -> None:
    """The fast loop (`-m "not slow"`) draws fewer hypothesis examples: see loop.py."""
    loop.configure(config.getoption("markexpr") or "")
    if loop.fast():
        settings.register_profile("fast-loop", max_examples=loop.FAST_EXAMPLES)
        settings.load_profile("fast-loop")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast loop does not import a test module whose tests are all slow: it would
    deselect every test it collected (fast_loop.wholly_slow)."""
    if not loop.fast() or collection_path.suffix != ".py" or not collection_path.is_file():
        return None
    if not collection_path.name.startswith("test_") or not collection_path.is_relative_to(
        config.rootpath
    ):
        return None
    path = collection_path.relative_to(config.rootpath).as_posix()
    if fast_loop.wholly_slow(path, collection_path.read_text(encoding="utf-8")):
        return True
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks slow what tests/support/fast_loop.py's table leaves to the full run, before
    `-m` deselects by marks."""
    slow = fast_loop.slow_items(item.nodeid for item in items)
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (modules, cases, corpora) lives until the run ends: out of the
    collector's full passes, which walked it again and again (~2 s a worker)."""
    gc.freeze()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop before collecting when GPU_SHARE_REAL_WORLD names a directory that is not there,
    with one line: a UsageError ends the run with "ERROR: <the line>" and exit code 4, no
    traceback. (.ci/run sets it, so CI never runs without the published manifests.)

    Without the variable and with nothing beside the checkout (a fresh clone alone), the
    tests that read the manifests are skipped (`real_world.real_world`), and the run ends with one
    line saying why (`pytest_terminal_summary`)."""
    if real_world.real_world_missing() is None:
        try:
            real_world.real_world()
        except real_world.RealWorldMissing as missing:
            raise pytest.UsageError(str(missing)) from None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    why = real_world.real_world_missing()
    if why is not None:
        skipped = len(terminalreporter.stats.get("skipped", []))
        terminalreporter.write_line(
            f"{why} ({skipped} tests or modules that read them skipped)", yellow=True
        )


@pytest.fixture(scope="session")
def shipped_policies() -> policies.PolicySet:
    from tests.support import kube  # noqa: PLC0415 (the workers' import: see above)

    return kube.shipped()


@pytest.fixture(scope="session")
def default_policy(shipped_policies: policies.PolicySet) -> policies.Policy:
    policy = shipped_policies.get("default")
    assert policy is not None
    return policy


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """`serve` run in process points the root logger at the stderr of its test (capsys's,
    closed after it): every test gives the next one the root logger it had."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
