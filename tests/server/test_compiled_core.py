"""The wheel pip builds is compiled with mypyc (hatch_build.py), and its core answers every
review byte for byte as the pure-Python core (what the rest of the suite tests) does.

The reviews: every published manifest, every example and every case of the rule and route
tables, as Pods and as workloads, to both endpoints of every policy (a name that does not
exist included).

One wheel for the module, built as `pip install .` builds it (tests/support/wheel.py), or the
one GPU_SHARE_WHEEL names (.ci/run builds it before `pytest`, so the compile is timed apart);
the other interpreters import the core from it, unpacked.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.engine import route_cases
from tests.support import corpus, kube
from tests.support import wheel as wheels
from webhook.policy import policies
from webhook.server import codec

sys.path.insert(0, str(kube.REPO))
import hatch_build

# Slow: pip builds the wheel (mypyc compiles the core) unless GPU_SHARE_WHEEL names one,
# then another interpreter answers the corpus.
pytestmark = pytest.mark.slow

POLICY_NAMES = ("default", "not-renamed", "lab", "no-such-policy")

# Run against the compiled package: reads (policies dir, reviews file), writes one base64
# response body per line.
_ANSWER = """
import base64, json, sys
from webhook.engine import reviewing, rules, view
from webhook.policy import policies
from webhook.server import codec
assert not reviewing.__file__.endswith(".py") and not rules.__file__.endswith(".py"), (
    reviewing.__file__)
# The typed decode holds in the build: mypyc gives the classes it compiles annotations msgspec
# cannot read, and a Struct there would send every review down the slower generic reading.
probe = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
         "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                     "operation": "CREATE", "namespace": "n",
                     "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                "spec": {"containers": [{"name": "c"}]}}}}
request = codec.parse(json.dumps(probe).encode())
assert isinstance(request.object.raw, bytes), "the codec read the review generically"
assert view.templates(request.object)[0][0].node is None, "the view read the pod generically"
loaded = policies.load_directory(sys.argv[1])
for line in open(sys.argv[2]):
    policy, endpoint, body = json.loads(line)
    try:
        out = codec.review(body.encode(), policies=loaded, policy_name=policy,
                             endpoint=endpoint).body
    except Exception as exc:
        out = repr(exc).encode()
    print(base64.b64encode(out).decode())
"""


def _objects() -> list[dict[str, Any]]:
    found = corpus.objects()
    for obj in list(found):
        if obj.get("kind") == "Pod":
            found += [kube.workload(kind, obj) for kind in ("Deployment", "CronJob")]
    return found


def _bodies() -> list[tuple[str, str, str]]:
    out = []
    for obj in _objects():
        body = json.dumps(kube.admission_review(obj))
        for policy in POLICY_NAMES:
            for endpoint in ("mutate", "validate"):
                out.append((policy, endpoint, body))
    for case in route_cases.ROUTE_CASES.values():
        if case.old is not None:
            body = json.dumps(
                kube.admission_review(
                    case.obj,
                    operation=case.operation,
                    old=case.old,
                    sub_resource=case.sub_resource or None,
                )
            )
            out += [("default", endpoint, body) for endpoint in ("mutate", "validate")]
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel GPU_SHARE_WHEEL names, which must be of this checkout's sources; else one
    built here."""
    named = os.environ.get(wheels.VARIABLE)
    if named:
        built = Path(named)
        assert built.is_file(), f"{wheels.VARIABLE}={named}: no such file"
        stale = wheels.sources_not_of_this_checkout(built)
        assert not stale, f"{wheels.VARIABLE}={named} is not of this checkout's sources: {stale}"
        return built
    directory = tmp_path_factory.mktemp("wheel")
    made = wheels.build(directory)
    if made is None:
        pytest.fail(f"pip made no wheel:\n{wheels.log_tail(directory)}")
    return made


@pytest.fixture(scope="module")
def compiled(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel unpacked: a directory to put first on another interpreter's path."""
    work = tmp_path_factory.mktemp("compiled")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(work)
    return work


def test_the_compiled_core_answers_every_review_as_the_pure_one(
    compiled: Path, tmp_path: Path
) -> None:
    directory = tmp_path / "policies"
    directory.mkdir()
    for path in (kube.REPO / "policies").glob("*.yaml"):
        (directory / path.name).write_text(path.read_text())
    (directory / "lab.yaml").write_text(route_cases.LAB_POLICY)
    bodies = _bodies()
    (tmp_path / "codec.jsonl").write_text("".join(json.dumps(b) + "\n" for b in bodies))
    done = subprocess.run(
        [sys.executable, "-c", _ANSWER, str(directory), str(tmp_path / "codec.jsonl")],
        cwd=compiled,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": str(compiled)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = [base64.b64decode(line) for line in done.stdout.splitlines()]
    loaded = policies.load_directory(directory)
    assert len(answers) == len(bodies) > 500
    for (policy, endpoint, body), answer in zip(bodies, answers, strict=True):
        pure = codec.review(
            body.encode(), policies=loaded, policy_name=policy, endpoint=endpoint
        ).body
        assert answer == pure, (policy, endpoint, body[:300])


_MEDDLE = """
import sys
from webhook.engine import facts, rules, view
from webhook.policy import policies
assert not facts.__file__.endswith(".py"), facts.__file__
obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"containers": [{"name": "main",
                                "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}]}}
policy = policies.load_directory(sys.argv[1]).policies["default"]
known = facts.gather(view.pod(view.templates(obj)[0][0]), policy)
r = rules.Pass(known, policy, require=True)
for thing, name, value in ((known, "resource", None), (known.containers[0][1], "shared", ()),
                           (known.placement, "classes", ()), (r, "require", False)):
    try:
        setattr(thing, name, value)
    except AttributeError:
        continue
    raise SystemExit(f"{type(thing).__name__}.{name} was changed")
print("refused")
"""


def test_the_compiled_core_refuses_a_change_of_the_facts(compiled: Path) -> None:
    """What `mypy` refuses (tests/engine/test_rule_order.py), the compiled classes refuse at run
    time: a rule cannot change what another reads."""
    done = subprocess.run(
        [sys.executable, "-c", _MEDDLE, str(kube.REPO / "policies")],
        cwd=compiled,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(compiled)},
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout
    assert done.stdout.strip() == "refused"


def test_a_wheel_built_as_pip_and_the_image_build_it_is_compiled(wheel: Path) -> None:
    """`pip install .` and the Dockerfile build the wheel in an isolated environment, with
    only the build-system requirements: mypyc's type check there must pass as it does in the
    development environment (without pydantic among them, the policy models were Any to it
    and the compile fell back to a pure-Python wheel, which the image build refuses)."""
    assert not wheel.name.endswith("-none-any.whl"), (
        "mypyc did not compile the core in an isolated build:\n" + wheels.log_tail(wheel)
    )
    with zipfile.ZipFile(wheel) as archive:
        extensions = [Path(name) for name in archive.namelist() if name.endswith(".so")]
    # Each module of the request path, and the library they share at the top.
    compiled = {p.with_suffix("").with_suffix("").as_posix() + ".py" for p in extensions}
    assert compiled >= set(hatch_build.COMPILED), wheels.log_tail(wheel)
    assert any(len(p.parts) == 1 and "__mypyc" in p.name for p in extensions), extensions
