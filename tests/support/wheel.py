"""The wheel as `pip install .` and the image build make it: built by the pip of a fresh
virtual environment, in an isolated build with only the build-system requirements, where
hatch_build.py compiles the core with mypyc.

A fresh environment, as on a new machine or in the image's builder: mypy looks for the
packages it checks against in the environment of the interpreter that runs pip, so the
suite's own (which has pydantic) would hide a compile that fails without it.

    python -m tests.support.wheel DIR

builds it in DIR and prints the wheel's path (.ci/run does, before `pytest`, so that the
compile is timed apart); `GPU_SHARE_WHEEL` names such a wheel to
tests/server/test_compiled_core.py, which builds its own when the variable is not set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VARIABLE = "GPU_SHARE_WHEEL"
# pip's output (verbose: the build hook's warning, with mypyc's own lines, when it falls
# back to pure Python), beside the wheel.
LOG = "pip-wheel.log"
# Where the wheel puts the shipped policies (pyproject.toml's force-include).
EMBEDDED = "webhook/_embedded/policies/"


def build(directory: Path) -> Path | None:
    """Build the wheel in `directory` (the environment in venv/, the wheel in dist/, pip's
    output in LOG); the wheel, or None when pip made none."""
    directory.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "GPU_SHARE_WEBHOOK_PURE_PYTHON"}
    fresh = directory / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(fresh)], check=True, timeout=300)
    dist = directory / "dist"
    command = [str(fresh / "bin" / "python"), "-m", "pip", "wheel", "--no-deps", "-v"]
    command += ["--no-cache-dir", "-w", str(dist), str(REPO)]
    with (directory / LOG).open("wb") as log:
        done = subprocess.run(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=900, check=False
        )
    wheels = sorted(dist.glob("gpu_share_webhook-*.whl"))
    return wheels[0] if done.returncode == 0 and len(wheels) == 1 else None


def log_tail(wheel_or_directory: Path, characters: int = 3000) -> str:
    """The end of pip's output for the wheel (or the build directory) named."""
    directory = wheel_or_directory
    if directory.suffix == ".whl":
        directory = directory.parent.parent
    log = directory / LOG
    if not log.exists():
        return f"(no {LOG} beside the wheel)"
    return log.read_text(errors="replace")[-characters:]


def sources_not_of_this_checkout(wheel: Path) -> list[str]:
    """The package files in `wheel` that differ from this checkout's (or that it lacks, or
    that it has and the checkout does not): a wheel of other sources is not the one to test."""
    differ = []
    with zipfile.ZipFile(wheel) as archive:
        members = {
            name: archive.read(name)
            for name in archive.namelist()
            if name.startswith("webhook/") and not name.endswith(("/", ".so"))
        }
    for name, data in sorted(members.items()):
        source = REPO / (
            "policies/" + name.removeprefix(EMBEDDED) if name.startswith(EMBEDDED) else name
        )
        if not source.is_file() or source.read_bytes() != data:
            differ.append(name)
    for path in sorted((REPO / "webhook").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        if "__pycache__" not in name and name not in members:
            differ.append(name)
    return differ


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.wheel DIR", file=sys.stderr)
        return 2
    wheel = build(Path(argv[0]).resolve())
    if wheel is None:
        print(f"pip made no wheel:\n{log_tail(Path(argv[0]).resolve())}", file=sys.stderr)
        return 1
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
