"""The table of rules (`RULES` in webhook/engine/rules.py) is the one place a rule is described,
and what repeats it is checked against it here: the names the policy layer holds
(`names.RULES`), the switches of a policy's `spec.rules`, the rules said to judge claims, the
docs' rule tables (hack/rule-docs.py writes them) and switch table, and the modules that
write a rule's name.

The chart's generated files read the table through charts/gpu-share-webhook/hack/sync.py
(tests/deploy/test_helm.py fails when they are stale); reports read each rule's severity and
category from its row.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from collections.abc import Iterator
from types import ModuleType

import yaml

from tests.support import dra_objects as dra
from tests.support.kube import REPO, load_policy_text, shipped
from webhook.engine import reviewing, rules
from webhook.engine.rules import Scope
from webhook.policy import names, policies

RULE_DOCS = REPO / "hack" / "rule-docs.py"


def _rule_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rule_docs", RULE_DOCS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_names_the_policy_layer_holds_are_the_table_in_its_order() -> None:
    """The policy layer (which cannot import the engine) validates `ruleModes` keys against
    `names.RULES`; `Pass` ranks what rules report by it."""
    table = tuple(rule.name for rule in rules.RULES)
    assert table == names.RULES, "names.RULES is not the names of rules.RULES, in its order"
    assert names.ALWAYS_ENFORCED.issubset(table)


def test_every_switch_of_a_policy_belongs_to_exactly_one_rule() -> None:
    """Each field of `spec.rules` turns one rule off (`switch`) or changes what it does
    (`changed_by`)."""
    aliases = [f.alias for f in policies.RulesSpec.model_fields.values()]
    claimed = [s for r in rules.RULES for s in (r.switch, r.changed_by) if s is not None]
    assert sorted(claimed) == sorted(aliases)


def _adding_mps() -> policies.Policy:
    """The shipped `dra` policy, its classes adding the profile's MPS configuration (so that
    a claim's profile counts)."""
    (doc,) = [
        d for d in yaml.safe_load_all((REPO / "policies" / "dra.yaml").read_text()) if d
    ]
    doc["metadata"]["name"] = "dra-adding-mps"
    for c in doc["spec"]["dra"]["deviceClasses"]:
        c["addMpsConfig"] = True
    return load_policy_text(yaml.safe_dump(doc))


def _claims_reviewed() -> Iterator[tuple[str, str, str]]:
    """(policy, claim, rule) for every refusal of the claims of tests/support/dra_objects.py,
    one with a profile no policy has and one of a malformed shape, under policies with a
    `dra` section, one without, and the stand-ins of a policy not in force."""
    site = shipped()
    broken = policies.stand_in("broken", names.POLICY_NOT_LOADED_RULE, "it does not load")
    governing = {
        "dra": site.governing("dra"),
        "dra-adding-mps": _adding_mps(),
        "default": site.governing("default"),
        "unknown": site.governing(names.UNKNOWN_POLICY_PATH),
        "broken": dataclasses.replace(broken, gpu_claim_classes=frozenset(site.gpu_classes)),
    }
    objects = {n: dra.obj(n) for n in dra.claim_objects()}
    unknown_profile = dra.obj("single-gpu-claim")
    unknown_profile["metadata"]["annotations"] = {names.ANNOTATION_PROFILE: "no-such-profile"}
    malformed = dra.obj("single-gpu-claim")
    malformed["spec"]["devices"]["requests"] = {"gpu": "gpu.nvidia.com"}
    objects |= {"unknown-profile": unknown_profile, "malformed": malformed}
    for policy_name, policy in governing.items():
        for name, obj in objects.items():
            for v in reviewing.review_object(obj, policy=policy).violations:
                yield policy_name, name, v.rule


def test_the_rules_that_refuse_claims_are_those_the_table_says() -> None:
    """The rules of `Scope.CLAIM` and those whose row says `claims` (docs/dra.md lists them
    and docs/policies.md says "claims" in their scope): every refusal of a claim is one of
    them, and each of the others refuses some claim."""
    said = {r.name for r in rules.RULES if r.claims}
    own = {r.name for r in rules.RULES if r.scope is Scope.CLAIM}
    found = list(_claims_reviewed())
    stray = [f for f in found if f[2] not in said | own]
    assert not stray, f"rules that refuse claims without `claims=True` in their row: {stray}"
    assert said <= {rule for *_, rule in found}, "a row says `claims`, and no claim meets it"


def test_the_docs_rule_tables_are_written_from_the_table() -> None:
    """docs/policies.md, docs/security.md, docs/dra.md and docs/audit.md, between the markers
    of hack/rule-docs.py."""
    module = _rule_docs()
    stale = module.stale()
    assert not stale, f"stale rule tables in {', '.join(stale)}: run `{module.COMMAND}`"


# Modules of the engine that still write the names of rules they report, where they are to
# refer to a row (or a constant of names.py) instead: each must still have one.
_STILL_WRITING = {"engine/claims.py", "engine/facts.py", "engine/placing.py"}
_OWNERS = {"policy/names.py", "engine/rules.py"}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def test_a_rule_name_is_written_in_names_and_the_module_of_its_row_only() -> None:
    """Elsewhere in the package a rule is named through its row (`rules.HOST_ACCESS.name`)
    or a constant of names.py. Only names with a hyphen are looked for: `profile`,
    `tolerations`, `privileged` and `capabilities` are also Kubernetes fields."""
    hyphenated = {name for name in names.RULES if "-" in name}
    writing: dict[str, list[str]] = {}
    package = REPO / "webhook"
    for path in sorted(package.rglob("*.py")):
        where = str(path.relative_to(package))
        if where in _OWNERS:
            continue
        text = path.read_text(encoding="utf-8")
        if not any(f'"{name}"' in text or f"'{name}'" in text for name in hyphenated):
            continue
        tree = ast.parse(text)
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and node.value in hyphenated
                and id(node) not in skip
            ):
                writing.setdefault(where, []).append(f"{node.value} (line {node.lineno})")
    unexpected = {k: v for k, v in writing.items() if k not in _STILL_WRITING}
    assert not unexpected, f"rule names written outside names.py and rules.py: {unexpected}"
    assert set(writing) == _STILL_WRITING, (
        f"{sorted(_STILL_WRITING - set(writing))} write no rule name now: take them out of"
        " _STILL_WRITING"
    )


def test_the_switch_table_of_security_md_is_the_switches_and_their_rules() -> None:
    """docs/security.md, "The switches": one row per field of `spec.rules`, in the model's
    order, with its default and the rule it turns off or changes (what each trades is the
    document's own)."""
    text = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    section = text.split("\n## The switches\n", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")][:3]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    by_switch = {s: r.name for r in rules.RULES for s in (r.switch, r.changed_by) if s}
    wanted = [
        [f"`{field.alias}`", f"`{str(field.default).lower()}`", f"`{by_switch[field.alias]}`"]
        for field in policies.RulesSpec.model_fields.values()
        if field.alias
    ]
    assert rows == wanted
