"""The project's own tool settings hold: ruff passes on the package, the benchmarks and the
tests, and mypy --strict on the package."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.kube import REPO


def test_ruff_finds_nothing() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "webhook", "bench", "tests"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # mypy --strict over the package, in another interpreter
def test_mypy_strict_finds_nothing() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "webhook"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
