"""checkov, the admin's scanner, over what an admin installs: each `kubectl kustomize` build
of deploy/ and the Dockerfile (the installs of tests/deploy/test_deploy.py), and the
background audit's objects as the chart renders them and as the kustomize component adds
them (tests/deploy/test_audit_deploy.py).

Most of a run is checkov starting, so one run checks both parts, each in a directory of its
own; a run over both finds, file for file, what a run over each finds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support import audit_deploy as ad
from tests.support import deploy_helpers as dh

# The parts: each a directory of the run.
INSTALLS = "installs"
AUDIT = "audit"
# What checkov reports of each file, by kind of finding.
FINDINGS = ("passed_checks", "failed_checks", "skipped_checks")

Reports = list[dict[str, Any]]


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


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Reports:
    """checkov's reports (kubernetes, dockerfile) over both parts, once."""
    directory = tmp_path_factory.mktemp("checkov")
    for part, files in _files().items():
        (directory / part).mkdir()
        for name, text in files.items():
            (directory / part / name).write_text(text, encoding="utf-8")
    done = dh.run(
        [
            dh.tool("checkov"),
            "--directory",
            str(directory),
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
    found = json.loads(done.stdout)
    return found if isinstance(found, list) else [found]


def _report(reports: Reports, part: str, check_type: str) -> dict[str, Any]:
    """What the `check_type` report says of the files of `part`: each kind of finding
    (FINDINGS); and `parsing_errors`, the count of files of the run it could not parse (of
    either part: a file left unread fails both)."""
    (found,) = [r for r in reports if r.get("check_type") == check_type]
    # A file's path is given from the directory of the run: /<part>/<file>.
    out: dict[str, Any] = {
        kind: [r for r in found["results"][kind] if Path(r["file_path"]).parent.name == part]
        for kind in FINDINGS
    }
    out["parsing_errors"] = found["summary"]["parsing_errors"]
    return out


def _failed(report: Mapping[str, Any]) -> list[str]:
    return [f"{r['check_id']} {r['resource']}: {r['check_name']}" for r in report["failed_checks"]]


def _unexplained(report: Mapping[str, Any]) -> list[str]:
    """The skips whose reason, beside the object, is not a sentence of eight words or more."""
    return [
        skipped["check_id"]
        for skipped in report["skipped_checks"]
        if len(skipped.get("check_result", {}).get("suppress_comment", "").split()) < 8
    ]


@pytest.mark.slow  # checkov runs over the manifests and the Dockerfile
@pytest.mark.parametrize("check_type", ["kubernetes", "dockerfile"])
def test_checkov_reports_no_failed_check(reports: Reports, check_type: str) -> None:
    """Every build of deploy/ and the Dockerfile."""
    report = _report(reports, INSTALLS, check_type)
    assert report["passed_checks"], "checkov checked nothing"
    assert report["parsing_errors"] == 0
    assert _failed(report) == []


@pytest.mark.slow  # reads checkov's reports (a checkov run)
def test_every_checkov_skip_is_justified_in_place(reports: Reports) -> None:
    for check_type in ("kubernetes", "dockerfile"):
        assert _unexplained(_report(reports, INSTALLS, check_type)) == []


@pytest.mark.slow  # a checkov run
def test_checkov_reports_no_failed_check_of_the_audit(reports: Reports) -> None:
    """The audit's objects of the chart, with the default and the custom values, and of the
    component."""
    report = _report(reports, AUDIT, "kubernetes")
    assert report["passed_checks"], "checkov checked nothing"
    assert report["parsing_errors"] == 0
    assert _failed(report) == []
    assert _unexplained(report) == []
