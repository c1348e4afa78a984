"""Build hook: compile the admission core with mypyc when a wheel is built.

The request path (the AdmissionReview codec and `webhook/engine`) takes about a quarter fewer
instructions per review compiled, and `serve` answers 15-35 % more distinct pods a second
(bench/README.md, "The compiled build"). The compiled modules are the same source, type-checked by
mypy --strict; the wheel keeps the .py files beside the extensions.

- Editable installs (`pip install -e .`, the development and test set-up) stay pure Python,
  so that an edited file is the code that runs.
- A compile that fails (no C compiler, say) warns and builds a pure-Python wheel: the
  webhook behaves the same either way, it is only slower.
- `GPU_SHARE_WEBHOOK_PURE_PYTHON=1` skips the compile.
- Nothing is written into the source tree: mypyc works on a copy in a temporary directory.

hatch-mypyc, the plugin for this, compiles in place (leaving extensions beside the sources
that then shadow edits in an editable install) and fails the install when no compiler is
there; hence this hook.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# The modules of the request path. Their imports outside this list (pydantic models,
# msgspec, orjson) stay ordinary Python. msgspec Structs stay uncompiled (the view's in
# webhook/engine/structs.py, the codec's in webhook/server/envelope.py): mypyc gives the
# classes it compiles annotations msgspec cannot read, and every review would take the
# generic reading.
COMPILED = (
    "webhook/server/codec.py",
    "webhook/engine/decision.py",
    "webhook/policy/quantities.py",
    "webhook/engine/view.py",
    "webhook/engine/selection.py",
    "webhook/engine/placing.py",
    "webhook/engine/facts.py",
    "webhook/engine/rules.py",
    "webhook/engine/record.py",
    "webhook/engine/hints.py",
    "webhook/engine/claims.py",
    "webhook/engine/reviewing.py",
)

_SETUP = """
from setuptools import setup
from mypyc.build import mypycify

setup(
    name="gpu-share-webhook-core",
    ext_modules=mypycify(
        ["--ignore-missing-imports", *{modules!r}], opt_level="3", debug_level="0"
    ),
    script_args=["build_ext", "--inplace"],
)
"""


def compile_core(root: Path, work: Path) -> tuple[list[Path], str]:
    """Compile `COMPILED` from a copy of `root`'s package in `work`; the extensions made
    (beside their sources in `work`, and the library they share at its top) and mypyc's
    output. None made: the compile failed."""
    shutil.copytree(root / "webhook", work / "webhook",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "_embedded"))
    (work / "setup.py").write_text(_SETUP.format(modules=list(COMPILED)))
    done = subprocess.run(
        [sys.executable, "setup.py"], cwd=work, capture_output=True, text=True, check=False
    )
    # setuptools' build/ keeps copies of the extensions that are not wanted.
    built = sorted(p for p in work.rglob("*.so") if p.relative_to(work).parts[0] != "build")
    return (built if done.returncode == 0 else []), done.stdout + done.stderr


class CompileCore(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        self._work: str | None = None
        if self.target_name != "wheel" or version == "editable":
            return
        if os.environ.get("GPU_SHARE_WEBHOOK_PURE_PYTHON", "").lower() in ("1", "true", "yes"):
            self.app.display_info("GPU_SHARE_WEBHOOK_PURE_PYTHON is set: a pure-Python wheel")
            return
        work = tempfile.mkdtemp(prefix="gpu-share-webhook-mypyc-")
        self.app.display_info("compiling the admission core with mypyc (about half a minute)")
        built, output = compile_core(Path(self.root), Path(work))
        if not built:
            shutil.rmtree(work, ignore_errors=True)
            tail = "\n".join(output.splitlines()[-15:])
            self.app.display_warning(
                "mypyc could not compile the admission core; building a pure-Python wheel"
                f" (same behaviour, slower):\n{tail}"
            )
            return
        self._work = work
        for path in built:
            build_data["force_include"][str(path)] = str(path.relative_to(work))
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if getattr(self, "_work", None):
            shutil.rmtree(self._work, ignore_errors=True)  # type: ignore[arg-type]
