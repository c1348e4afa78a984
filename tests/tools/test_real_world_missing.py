"""Without the published manifests: where GPU_SHARE_REAL_WORLD names them, pytest stops before
collecting, with one line that says where it looked and how to fix it (exit code 4, no
traceback, no INTERNALERROR); where it is unset and nothing is beside the checkout (a fresh
clone alone), the tests that read them are skipped and the run says why in one line.

Each case runs pytest on a copy of this checkout's test setup (pyproject.toml, tests/conftest.py,
tests/support/real_world.py), one trivial test and one that reads the manifests, in a directory
with no shared/ beside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.real_world import REAL_WORLD_VARIABLE, REPO

# Slow: each test runs pytest in another interpreter.
pytestmark = pytest.mark.slow

FIX = f"set {REAL_WORLD_VARIABLE} to the directory of the manifests"


def _checkout_without_shared(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    (checkout / "tests").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", checkout)
    (checkout / "tests" / "support").mkdir()
    copied = ("__init__.py", "conftest.py", "support/__init__.py", "support/real_world.py")
    copied += ("support/loop.py",)
    for name in copied:
        shutil.copy(REPO / "tests" / name, checkout / "tests" / name)
    # conftest.py marks slow what the fast loop's table names.
    shutil.copy(REPO / "tests" / "support" / "fast_loop.py", checkout / "tests" / "support")
    (checkout / "tests" / "test_tiny.py").write_text("def test_tiny() -> None:\n    pass\n")
    (checkout / "tests" / "test_reads.py").write_text(
        "from tests.support import real_world\n\n\ndef test_reads() -> None:\n"
        "    assert real_world.real_world_manifests()\n"
    )
    return checkout


def _pytest(checkout: Path, env: dict[str, str]) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    output = result.stdout + result.stderr
    assert "INTERNALERROR" not in output
    assert "Traceback" not in output
    return result.returncode, output


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in (REAL_WORLD_VARIABLE, "PYTEST_ADDOPTS")}


def test_a_named_directory_that_is_missing_stops_pytest_with_one_clear_line(
    tmp_path: Path,
) -> None:
    checkout = _checkout_without_shared(tmp_path)
    env = _environment()
    beside = tmp_path / "shared" / "real-world"
    looked = tmp_path / "nowhere" / "real-world"
    env[REAL_WORLD_VARIABLE] = str(looked)
    code, output = _pytest(checkout, env)
    assert code == pytest.ExitCode.USAGE_ERROR, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    line = lines[0]
    assert line.startswith("ERROR: real-world GPU manifests not found: "), line
    assert f"looked in {looked} " in line
    assert FIX in line
    assert f"(from {REAL_WORLD_VARIABLE}; without it, {beside})" in line


def test_a_fresh_clone_alone_skips_the_tests_that_read_them_and_says_why(tmp_path: Path) -> None:
    checkout = _checkout_without_shared(tmp_path)
    code, output = _pytest(checkout, _environment())
    assert code == pytest.ExitCode.OK, output
    assert "1 passed, 1 skipped" in output, output
    beside = tmp_path / "shared" / "real-world"
    why = [line for line in output.splitlines()
           if line.startswith("real-world GPU manifests not found: ")]
    assert len(why) == 1, output
    assert f"looked in {beside} ({REAL_WORLD_VARIABLE} is not set)" in why[0]
    assert FIX in why[0]
    assert "next to shared/" in why[0]
    assert "skipped" in why[0]
