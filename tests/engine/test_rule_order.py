"""The order of the rule table changes no answer: every rule reads what was worked out of the
pod before any rule ran (`facts.gather`) and reports or adds, and a pass hands out what they
report and add in the order of `names.RULES`. Run over every object the suite knows, under
policies in every mode, with the table in shuffled orders.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mypy.api
import pytest

from tests.support import corpus, kube, strategies
from webhook.engine import facts, reviewing, rules, view
from webhook.engine.decision import Decision

SHIPPED = kube.shipped()
POLICIES = [
    SHIPPED.policies["default"],
    SHIPPED.policies["not-renamed"],
    strategies.LAB,
    kube.make_policy([kube.T4_MPS, kube.A10G_TS], name="warned", profiles=kube.PROFILES,
                     mode="warn"),
    kube.make_policy([kube.T4_MPS, kube.A10G_TS], name="mixed", profiles=kube.PROFILES,
                     mode="dry-run", ruleModes={"mps-limits": "enforce", "privileged": "warn"}),
    kube.make_policy([kube.T4_MPS], name="switched", profiles=kube.PROFILES,
                     rules={"denyEnvFromOnGpuContainers": True,
                            "voidVisibleDevicesWithoutGpu": False}),
    SHIPPED.governing("no-such-policy"),
]
OBJECTS = corpus.objects() + corpus.pods()


def _answers() -> Iterator[tuple[Any, ...]]:
    for obj in OBJECTS:
        for policy in POLICIES:
            for mutate, require in ((True, False), (False, True), (False, False)):
                decision = kube.review(obj, policy, mutate=mutate, require=require)
                yield _seen(decision)


def _seen(d: Decision) -> tuple[Any, ...]:
    return (d.violations, d.message if d.violations else "", d.patch, d.warnings,
            list(d.audit.items()), d.mutations, d.would_refuse)


@pytest.fixture(scope="module")
def in_order() -> list[tuple[Any, ...]]:
    """The answers with the table in its own order: each shuffled order is held to them, so
    they are worked out once (before any test replaces the table)."""
    reviewing._table.cache_clear()
    return list(_answers())


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The rule table, to be replaced; the table of each kind of pod is worked out anew."""
    reviewing._table.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    reviewing._table.cache_clear()


@pytest.mark.slow  # the corpus under seven policies, three passes each
@pytest.mark.parametrize("seed", ["reversed", 1, 2, 3])
def test_every_order_of_the_rule_table_gives_the_same_answers(
    in_order: list[tuple[Any, ...]], table: pytest.MonkeyPatch, seed: str | int
) -> None:
    expected = in_order
    order = list(rules.RULES)
    if seed == "reversed":
        order.reverse()
    else:
        random.Random(seed).shuffle(order)
    assert order != list(rules.RULES)
    table.setattr(rules, "RULES", tuple(order))
    reviewing._table.cache_clear()
    shuffled = list(_answers())
    assert len(shuffled) == len(expected) > 3000
    # Some answers refuse, some change the pod, some warn: the corpus exercises the order.
    for part in (0, 2, 3, 6):  # refusals, patches, warnings, relaxed refusals
        assert any(a[part] for a in expected)
    for got, want in zip(shuffled, expected, strict=True):
        assert got == want


# A rule that tries to change what the others read.
_MEDDLING = """
from webhook.engine import rules

def check_meddling(r: rules.PodPass) -> None:
    r.facts.resource = "nvidia.com/gpu"
    r.facts.containers[0][1].shared = ()
    r.facts.pod.containers[0].c.env = ()
    r.require = False
    r.would_refuse = []
"""


@pytest.mark.slow  # mypy
def test_a_rule_cannot_change_what_another_reads(tmp_path: Path) -> None:
    """The facts and the pass have Final attributes and the view is named tuples: mypy
    (which the suite runs strict on the package) refuses a rule that assigns to them; the
    compiled core also refuses it at run time (tests/server/test_compiled_core.py)."""
    module = tmp_path / "meddling.py"
    module.write_text(_MEDDLING)
    out, _, status = mypy.api.run(["--strict", "--no-incremental", "--follow-imports=silent",
                                   str(module)])
    assert status == 1
    assert 'Cannot assign to final attribute "resource"' in out
    assert 'Cannot assign to final attribute "shared"' in out
    assert 'Property "env" defined in "Container" is read-only' in out
    assert 'Cannot assign to final attribute "require"' in out
    assert 'Property "would_refuse" defined in "Pass" is read-only' in out


def test_every_rule_of_the_table_runs_over_one_pass() -> None:
    """The checks and patches of the table, run by hand over one pass (as `reviewing.run`
    does, in the table's order), report and add."""
    policy = SHIPPED.policies["default"]
    obj = kube.pod(kube.shared(2, env=[{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                        "value": "90"}]), kube.container("log"))
    pod = view.pod(view.templates(obj)[0][0])
    known = facts.gather(pod, policy)
    assert known.findings  # (two replicas: refused)
    r = rules.Pass(known, policy, require=False)
    r.report(frozenset(rule.name for rule in rules.RULES if rule.found))
    for rule in rules.RULES:
        if rule.scope is rules.Scope.CLAIM:
            continue  # (a claim's pass)
        for step in (rule.check, rule.patch):
            if step is not None:
                step(r)
    assert [v.rule for v in r.violations] == ["multi-replica"]
    assert r.operations()
