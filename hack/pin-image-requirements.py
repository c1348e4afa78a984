#!/usr/bin/env python3
"""Write requirements/image.txt: every runtime dependency of the image, transitive ones
included, pinned to one version with the sha256 of the wheel pip installs for it on
linux/amd64 and on linux/arm64 (CPython 3.12, glibc 2.36: the Dockerfile's Debian bookworm
images).

    python3 hack/pin-image-requirements.py            # rewrite the file
    python3 hack/pin-image-requirements.py --check    # exit 1 when the file is not what
                                                      # pip resolves today (a CI job may run it)

Run it with the Python of the project's virtualenv (`pip install -e '.[test]'`: it needs
`packaging`, which pytest brings) and access to the package index. Only pip is used:
`pip install --dry-run --report` resolves pyproject.toml's `[project].dependencies` for each
platform (binary wheels only, as the Dockerfile installs
them) from the package index pip is configured for, and its report gives each wheel's version,
sha256 and metadata. Both platforms must resolve to the same versions. pip evaluates
environment markers against the interpreter that runs it, not the target Python, so the
requirements of every pinned wheel are then evaluated again for Python 3.12 on each platform
and any that is not pinned stops the script. Each pin is followed by a `# requires:` line
(its requirements that apply in the image, separated by ` | `), which
tests/deploy/test_image.py reads.

Run it after a change of the ranges in pyproject.toml, and to take newer versions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "requirements" / "image.txt"
PYTHON = "3.12"
# glibc of Debian bookworm; pip does not expand one manylinux tag into the older ones.
GLIBC_MINORS = (36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 17, 12, 5)
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}
# Between the requirements of a `# requires:` line (no PEP 508 requirement holds it).
SEPARATOR = " | "
NOTHING = "(nothing)"


def platforms(machine: str) -> list[str]:
    tags = [f"manylinux_2_{m}_{machine}" for m in GLIBC_MINORS]
    tags += [f"manylinux2014_{machine}"]
    if machine == "x86_64":
        tags += [f"manylinux2010_{machine}", f"manylinux1_{machine}"]
    return [*tags, f"linux_{machine}"]


def environment(machine: str) -> dict[str, str]:
    """The marker environment of the image's interpreter on `machine`."""
    env = default_environment()
    env.update(
        python_version=PYTHON,
        python_full_version=f"{PYTHON}.0",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        os_name="posix",
        platform_machine=machine,
    )
    return env


def runtime_requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def resolve(requirements: list[str], machine: str) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            "--only-binary=:all:",
            "--python-version",
            PYTHON,
            "--implementation",
            "cp",
            "--abi",
            f"cp{PYTHON.replace('.', '')}",
            "--abi",
            "abi3",
            "--abi",
            "none",
            "--target",
            str(Path(tmp) / "target"),
        ]
        for tag in platforms(machine):
            command += ["--platform", tag]
        subprocess.run([*command, *requirements], check=True)
        return list(json.loads(report.read_text())["install"])


def applying(requires: list[str], machine: str) -> list[Requirement]:
    """The requirements that apply in the image on `machine` (no extras asked for)."""
    env = environment(machine)
    found = []
    for text in requires:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
            found.append(req)
    return found


def render() -> str:
    requirements = runtime_requirements()
    pins: dict[str, dict[str, object]] = {}
    for arch, machine in MACHINES.items():
        for item in resolve(requirements, machine):
            meta = item["metadata"]
            name = canonicalize_name(meta["name"])
            info = item["download_info"]
            digest = info.get("archive_info", {}).get("hashes", {}).get("sha256")
            if not digest:
                sys.exit(f"{name} on {arch}: pip's report gives no sha256 for {info.get('url')}")
            pin = pins.setdefault(
                name, {"version": meta["version"], "hashes": {}, "requires": {}, "archs": []}
            )
            if pin["version"] != meta["version"]:
                sys.exit(f"{name}: {pin['version']} on one platform, {meta['version']} on {arch}")
            pin["hashes"][digest] = info["url"].rsplit("/", 1)[1]
            pin["archs"].append(arch)
            pin["requires"][machine] = [
                str(r) for r in applying(meta.get("requires_dist") or [], machine)
            ]
    missing = [n for n, p in pins.items() if len(p["archs"]) != len(MACHINES)]
    if missing:
        sys.exit(f"resolved for one platform only: {', '.join(missing)}")
    for name, pin in pins.items():
        for machine, requires in pin["requires"].items():
            for text in requires:
                wanted = canonicalize_name(Requirement(text).name)
                if wanted not in pins:
                    sys.exit(f"{name} requires {text} on {machine} (Python {PYTHON}): not pinned")
    lines = [
        "# The image's runtime dependencies, transitive ones included, each pinned with the",
        "# sha256 of its wheels for linux/amd64 and linux/arm64 (CPython 3.12, glibc 2.36).",
        "# Generated by `python3 hack/pin-image-requirements.py` from pyproject.toml's",
        "# [project].dependencies; do not edit by hand. The Dockerfile installs it with",
        "# --require-hashes, then the webhook's own wheel with --no-deps, then runs pip check.",
    ]
    for name in sorted(pins):
        pin = pins[name]
        hashes = sorted(pin["hashes"].items(), key=lambda h: h[1])
        lines.append(f"{name}=={pin['version']} \\")
        hash_lines = [f"    --hash=sha256:{digest}" for digest, _ in hashes]
        lines += [line + " \\" for line in hash_lines[:-1]] + hash_lines[-1:]
        requires = sorted({r for rs in pin["requires"].values() for r in rs})
        lines.append(f"    # requires: {SEPARATOR.join(requires) if requires else NOTHING}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(ROOT)} is not what pip resolves today", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
