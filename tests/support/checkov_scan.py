"""checkov, the admin's scanner, over what the deploy tests hand it, in one run: each
`kubectl kustomize` build of deploy/ and the Dockerfile (tests/deploy/test_deploy.py), and
the audit's objects as the chart renders them and as the kustomize component adds them
(tests/deploy/test_audit_deploy.py).

Most of a run is checkov starting, so both are checked by the same run, each part in a
directory of its own; a run over both finds, file for file, what a run over each finds.
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support import audit_deploy as ad
from tests.support import deploy_helpers as dh

# The parts: each a directory of the run.
INSTALLS = "installs"
AUDIT = "audit"
# What checkov reports of each file, by kind of finding.
FINDINGS = ("passed_checks", "failed_checks", "skipped_checks")


def _manifest(objects: Sequence[Mapping[str, Any]]) -> str:
    return "---\n".join(json.dumps(o) + "\n" for o in objects)


def _files() -> dict[str, dict[str, str]]:
    """The files of each part, by name."""
    installs = {f"{name}.yaml": _manifest(dh.kustomize(path)) for name, path in dh.BUILDS.items()}
    installs["Dockerfile"] = (dh.REPO / "Dockerfile").read_text(encoding="utf-8")
    audit = {
        "chart.yaml": ad.audit_objects(ad.render(ad.audit_values())),
        "chart-custom.yaml": ad.audit_objects(ad.render(ad.CUSTOM)),
        "kustomize.yaml": ad.audit_objects(ad.kustomized("cert-manager")),
    }
    return {INSTALLS: installs, AUDIT: {name: _manifest(o) for name, o in audit.items()}}


@functools.cache
def _reports() -> tuple[dict[str, Any], ...]:
    """checkov's reports (kubernetes, dockerfile) over every part, once per test run."""
    with tempfile.TemporaryDirectory() as tmp:
        for part, files in _files().items():
            (Path(tmp) / part).mkdir()
            for name, text in files.items():
                (Path(tmp) / part / name).write_text(text, encoding="utf-8")
        done = dh.run(
            [
                dh.tool("checkov"),
                "--directory",
                tmp,
                "--framework",
                "kubernetes",
                "dockerfile",
                "--output",
                "json",
                # Offline: no guideline links or severities from the vendor's service.
                "--skip-download",
            ]
        )
    assert done.returncode in (0, 1), f"checkov did not run:\n{done.stderr[-3000:]}"
    reports = json.loads(done.stdout)
    return tuple(reports if isinstance(reports, list) else [reports])


def report(part: str, check_type: str) -> dict[str, Any]:
    """What checkov's `check_type` report says of the files of `part`: each kind of finding
    (FINDINGS); and `parsing_errors`, the count of files of the run it could not parse (of
    every part: a file left unread fails them all)."""
    (found,) = [r for r in _reports() if r.get("check_type") == check_type]
    # A file's path is given from the directory of the run: /<part>/<file>.
    out: dict[str, Any] = {
        kind: [r for r in found["results"][kind] if Path(r["file_path"]).parent.name == part]
        for kind in FINDINGS
    }
    out["parsing_errors"] = found["summary"]["parsing_errors"]
    return out
