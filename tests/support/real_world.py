"""Where the published GPU manifests are: ../shared/real-world beside this checkout, or where
GPU_SHARE_REAL_WORLD points. real_world() is the one place that finds them.

Apart from tests/support/kube.py (which names them too) so that tests/conftest.py reads them
without importing the Kubernetes client: xdist's controller only checks them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REAL_WORLD_VARIABLE = "GPU_SHARE_REAL_WORLD"
REAL_WORLD_BESIDE = REPO.parent / "shared" / "real-world"


class RealWorldMissing(Exception):
    """The published manifests are not where real_world() looks; str() is one line saying so."""


def real_world() -> Path:
    """The directory of the published GPU manifests.

    GPU_SHARE_REAL_WORLD when it is set (and not empty), else ../shared/real-world beside this
    checkout. When GPU_SHARE_REAL_WORLD names a directory that is not there, raises
    RealWorldMissing (the session stops with its one line: a corpus asked for must be read).
    When it is unset and nothing is beside the checkout, skips what asked (a test, or a whole
    module that reads the corpus as it is collected), with that line as the reason: a test
    must not pass on an empty corpus, and a fresh clone alone must still run the rest.
    """
    variable = os.environ.get(REAL_WORLD_VARIABLE)
    path = Path(variable) if variable else REAL_WORLD_BESIDE
    if path.is_dir():
        return path
    missing = RealWorldMissing(_not_found(path, variable))
    if variable:
        raise missing
    pytest.skip(str(missing), allow_module_level=True)


def _not_found(path: Path, variable: str | None) -> str:
    if variable:
        looked = (f"looked in {path} (from {REAL_WORLD_VARIABLE}; without it, "
                  f"{REAL_WORLD_BESIDE}); set {REAL_WORLD_VARIABLE} to the directory of the "
                  "manifests, or unset it and place this checkout next to shared/")
    else:
        looked = (f"looked in {path} ({REAL_WORLD_VARIABLE} is not set); set "
                  f"{REAL_WORLD_VARIABLE} to the directory of the manifests, or place this "
                  "checkout next to shared/ (../shared/real-world)")
    return f"real-world GPU manifests not found: {looked}"


def real_world_missing() -> str | None:
    """Why the tests that read the published manifests are skipped; None when they are there
    (or when GPU_SHARE_REAL_WORLD names them: then a missing directory stops the session)."""
    if os.environ.get(REAL_WORLD_VARIABLE) or REAL_WORLD_BESIDE.is_dir():
        return None
    return _not_found(REAL_WORLD_BESIDE, None)


def real_world_manifests() -> list[Path]:
    """The published manifests (*.yaml in real_world()), sorted by name."""
    return sorted(real_world().glob("*.yaml"))
