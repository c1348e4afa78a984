"""The image is reproducible: requirements/image.txt pins every runtime dependency, transitive
ones included, to one version with its wheels' hashes, the pins satisfy pyproject.toml's
ranges and each other's requirements on linux/amd64 and linux/arm64 under Python 3.12, and the
Dockerfile installs exactly that file, from base images pinned to one Python release.

The file is made by hack/pin-image-requirements.py (pip's resolver; it needs the package
index, so it is not run here). Docker is not run either: the Dockerfile is read.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
import shlex
import tomllib
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PINNED = REPO / "requirements" / "image.txt"
PYTHON = "3.12"
MACHINES = ("x86_64", "aarch64")
# What the script writes between the requirements of a `# requires:` line.
SEPARATOR = " | "
NOTHING = "(nothing)"


@dataclass
class Pin:
    version: str
    hashes: list[str]
    requires: list[Requirement]


def read_pins(text: str) -> dict[str, Pin]:
    """The pins of a requirements file as the script writes it: `name==version \\`, its
    `--hash=sha256:...` lines, then `# requires: a | b` (or `(nothing)`)."""
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    for raw in text.splitlines():
        line = raw.strip().removesuffix("\\").strip()
        if not line or (line.startswith("#") and not line.startswith("# requires:")):
            continue
        pinned = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if pinned:
            current = Pin(pinned[2], [], [])
            pins[canonicalize_name(pinned[1])] = current
            continue
        assert current is not None, f"a line before the first pin: {raw!r}"
        if line.startswith("--hash="):
            current.hashes.append(line.removeprefix("--hash="))
        elif line.startswith("# requires:"):
            listed = line.removeprefix("# requires:").strip()
            if listed != NOTHING:
                current.requires = [Requirement(r) for r in listed.split(SEPARATOR)]
        else:
            pytest.fail(f"{PINNED.name}: a line the script does not write: {raw!r}")
    return pins


@pytest.fixture(scope="module")
def pins() -> dict[str, Pin]:
    return read_pins(PINNED.read_text(encoding="utf-8"))


@functools.cache
def _pinning_script() -> types.ModuleType:
    """hack/pin-image-requirements.py, which makes the file (its name is no module name)."""
    spec = importlib.util.spec_from_file_location(
        "pin_image_requirements", REPO / "hack" / "pin-image-requirements.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def image_environment(machine: str) -> dict[str, str]:
    """The image interpreter's marker environment, as the script evaluates it (and no extra:
    the runtime requirements are installed without one)."""
    script = _pinning_script()
    assert script.PYTHON == PYTHON
    return {**script.environment(machine), "extra": ""}


def applies(requirement: Requirement, machine: str) -> bool:
    return requirement.marker is None or requirement.marker.evaluate(image_environment(machine))


def runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [Requirement(r) for r in project["dependencies"]]


def unmet(requirements: list[Requirement], pins: dict[str, Pin], machine: str) -> list[str]:
    """The requirements that apply on `machine` and that no pin satisfies."""
    problems = []
    for req in requirements:
        if not applies(req, machine):
            continue
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req}: not pinned")
        elif not req.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{req}: pinned {pin.version}")
    return problems


# --------------------------------------------------------------------------- the pins


@pytest.mark.parametrize("machine", MACHINES)
def test_every_runtime_dependency_is_pinned_within_its_range(
    pins: dict[str, Pin], machine: str
) -> None:
    assert unmet(runtime_requirements(), pins, machine) == []


@pytest.mark.parametrize("machine", MACHINES)
def test_every_requirement_of_every_pin_is_pinned_and_met(
    pins: dict[str, Pin], machine: str
) -> None:
    problems = [
        f"{name}=={pin.version} requires {problem}"
        for name, pin in pins.items()
        for problem in unmet(pin.requires, pins, machine)
    ]
    assert problems == []


def test_nothing_is_pinned_that_the_image_does_not_need(pins: dict[str, Pin]) -> None:
    needed: set[str] = set()
    todo = [canonicalize_name(r.name) for r in runtime_requirements()]
    while todo:
        name = todo.pop()
        if name in needed or name not in pins:
            continue
        needed.add(name)
        todo += [canonicalize_name(r.name) for r in pins[name].requires]
    assert set(pins) - needed == set()


def test_every_pin_has_the_sha256_of_its_wheels(pins: dict[str, Pin]) -> None:
    for name, pin in pins.items():
        assert pin.hashes, name
        # One wheel for both architectures (pure Python), or one for each.
        assert 1 <= len(pin.hashes) <= len(MACHINES), name
        for digest in pin.hashes:
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), (name, digest)


def test_the_requires_lines_are_the_wheels_own_metadata(pins: dict[str, Pin]) -> None:
    """Where this environment has a pinned version installed, its metadata's requirements
    that apply in the image are the ones the file lists (the script's are not made up)."""
    compared = 0
    for name, pin in pins.items():
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if dist.version != pin.version:
            continue
        own = {
            str(Requirement(r))
            for r in dist.requires or []
            if any(applies(Requirement(r), m) for m in MACHINES)
        }
        assert own == {str(r) for r in pin.requires}, name
        compared += 1
    # The test environment installs the runtime dependencies: most pins are compared.
    assert compared >= len(pins) // 2


def test_a_pin_that_misses_a_range_is_found() -> None:
    """The checks above can fail: a pin outside pyproject's range, and a requirement of a
    pin that nothing pins."""
    pins = read_pins(
        "aiohttp==3.9.0 \\\n    --hash=sha256:" + "0" * 64 + "\n    # requires: yarl>=1\n"
    )
    problems = unmet(runtime_requirements(), pins, "x86_64")
    assert "aiohttp<4,>=3.10: pinned 3.9.0" in problems
    assert unmet(pins["aiohttp"].requires, pins, "x86_64") == ["yarl>=1: not pinned"]


# --------------------------------------------------------------------------- the Dockerfile


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments left out."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        word, _, rest = (pending + stripped).partition(" ")
        pending = ""
        out.append((word.upper(), rest.strip()))
    return out


@pytest.fixture(scope="module")
def steps() -> list[tuple[str, str]]:
    return instructions((REPO / "Dockerfile").read_text(encoding="utf-8"))


def pip_installs(steps: list[tuple[str, str]]) -> list[list[str]]:
    """The arguments of each `pip ... install` in the RUN lines."""
    found = []
    for word, args in steps:
        if word != "RUN":
            continue
        for command in re.split(r"&&|;", args):
            tokens = shlex.split(command)
            if "pip" in tokens and "install" in tokens:
                found.append(tokens[tokens.index("install") + 1 :])
    return found


def test_the_dependencies_are_installed_from_the_pinned_file_by_hash(
    steps: list[tuple[str, str]],
) -> None:
    copied = [args for word, args in steps if word == "COPY" and "requirements/image.txt" in args]
    assert copied, "the builder does not copy requirements/image.txt"
    installs = pip_installs(steps)
    from_file = [i for i in installs if "-r" in i]
    assert len(from_file) == 1
    assert from_file[0][from_file[0].index("-r") + 1] == "requirements/image.txt"
    assert "--require-hashes" in from_file[0]
    assert "--only-binary=:all:" in from_file[0]
    # Everything else pip installs is the webhook's own wheel, without dependencies.
    for other in installs:
        if other is from_file[0]:
            continue
        assert "--no-deps" in other, other
        assert [a for a in other if not a.startswith("-")] == ["/dist/gpu_share_webhook-*.whl"]
    runs = " ".join(args for word, args in steps if word == "RUN")
    assert re.search(r"pip --python \S+ check\b", runs)


def test_the_base_images_are_one_exact_python_release(steps: list[tuple[str, str]]) -> None:
    images = [args.split()[0] for word, args in steps if word == "FROM"]
    assert len(images) == 2
    releases = {
        re.fullmatch(r"python:(3\.\d+\.\d+)-[\w-]+(@sha256:[0-9a-f]{64})?", i) for i in images
    }
    assert None not in releases, images
    assert len({m[1] for m in releases if m}) == 1, images
    assert all(m[1].startswith(PYTHON + ".") for m in releases if m), images


def test_the_image_sets_the_allocator_that_returns_a_floods_memory(
    steps: list[tuple[str, str]],
) -> None:
    # Without it a flood of large reviews from several addresses took a replica past its
    # 384 MiB limit (docs/operations.md); glibc reads it at start-up, in the final stage.
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM"):]
    env = " ".join(args for word, args in final if word == "ENV")
    tunables = re.search(r"GLIBC_TUNABLES=(\S+)", env)
    assert tunables is not None, env
    settings = dict(part.split("=") for part in tunables[1].split(":"))
    assert settings == {"glibc.malloc.arena_max": "2", "glibc.malloc.mmap_threshold": "262144"}
