"""Without the published manifests, pytest stops before collecting, with one line that says
where it looked and how to fix it: exit code 4 (usage error), no traceback, no INTERNALERROR.

Each case runs pytest on a copy of this checkout's test setup (pyproject.toml, tests/conftest.py,
tests/kube.py) and one trivial test, in a directory with no shared/ beside it; had the check gone,
that test would pass and the run would end 0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kube import REAL_WORLD_VARIABLE, REPO

# Slow: each test runs pytest in another interpreter.
pytestmark = pytest.mark.slow

FIX = f"set {REAL_WORLD_VARIABLE} to the directory of the manifests"


def _checkout_without_shared(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    (checkout / "tests").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", checkout)
    for name in ("__init__.py", "conftest.py", "kube.py"):
        shutil.copy(REPO / "tests" / name, checkout / "tests")
    (checkout / "tests" / "test_tiny.py").write_text("def test_tiny() -> None:\n    pass\n")
    return checkout


@pytest.mark.parametrize("variable", [False, True], ids=["variable-unset", "variable-set"])
def test_missing_real_world_stops_pytest_with_one_clear_line(
    tmp_path: Path, variable: bool
) -> None:
    checkout = _checkout_without_shared(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in (REAL_WORLD_VARIABLE, "PYTEST_ADDOPTS")}
    beside = tmp_path / "shared" / "real-world"
    looked = tmp_path / "nowhere" / "real-world" if variable else beside
    if variable:
        env[REAL_WORLD_VARIABLE] = str(looked)

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_tiny.py"],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=60, check=False,
    )

    output = result.stdout + result.stderr
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert "INTERNALERROR" not in output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    line = lines[0]
    assert line.startswith("ERROR: real-world GPU manifests not found: "), line
    assert f"looked in {looked} " in line
    assert REAL_WORLD_VARIABLE in line
    assert FIX in line
    assert "next to shared/" in line
    if variable:
        assert f"(from {REAL_WORLD_VARIABLE}; without it, {beside})" in line
    else:
        assert f"({REAL_WORLD_VARIABLE} is not set)" in line
