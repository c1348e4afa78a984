"""`gpu-share-webhook explain namespace`: which webhook entry and policy a namespace's labels
reach, as the API server matches the rendered configurations and as the server then applies
the policy; exit 0 governed, 1 not, 2 bad input.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from tests.engine.route_cases import LIMITS_POLICY
from tests.support import deploy_helpers as dh
from tests.support.kube import REPO
from webhook import cli
from webhook.engine import reviewing
from webhook.policy import names, policies
from webhook.tools import explain, rendering

SHIPPED = str(policies.embedded_directory())
ON = f"{names.ENABLED_LABEL}=true"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["explain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = run(capsys, *argv, "--policies", SHIPPED, "-o", "json")
    return code, json.loads(out)


class Case(NamedTuple):
    name: str
    labels: list[str]
    code: int
    policy: str | None
    # The validating entry that receives the namespace's requests (None: no entry does).
    entry: str | None
    # Words of the reason, and of a hint (None: no hint).
    reason: str
    hint: str | None


CASES = [
    pytest.param(
        Case(
            "team-a",
            [ON],
            0,
            "default",
            rendering.DEFAULT_ENTRY,
            "no gpu-share.io/policy label, so the default policy",
            None,
        ),
        id="opted-in-without-a-policy-label-gets-the-default-policy",
    ),
    pytest.param(
        Case(
            "team-a",
            [ON, "pod-security.kubernetes.io/enforce=baseline"],
            0,
            "default",
            rendering.DEFAULT_BASELINE_ENTRY,
            "default policy",
            None,
        ),
        id="a-namespace-enforcing-baseline-reaches-the-baseline-entry",
    ),
    pytest.param(
        Case(
            "team-b",
            [ON, f"{names.POLICY_LABEL}=not-renamed"],
            0,
            "not-renamed",
            rendering.policy_entry("not-renamed"),
            "its label gpu-share.io/policy=not-renamed",
            None,
        ),
        id="a-policy-label-names-the-policy",
    ),
    pytest.param(
        Case(
            "team-b",
            [ON, f"{names.POLICY_LABEL}=default"],
            0,
            "default",
            rendering.policy_entry("default"),
            "its label gpu-share.io/policy=default",
            None,
        ),
        id="a-policy-label-naming-default-reaches-the-policy-entry-of-default",
    ),
    pytest.param(
        Case(
            "team-c",
            [ON, f"{names.POLICY_LABEL}=gold"],
            1,
            None,
            rendering.UNKNOWN_ENTRY,
            "names a policy that does not exist",
            None,
        ),
        id="a-policy-label-naming-a-missing-policy-is-not-governed",
    ),
    pytest.param(
        Case(
            "team-c",
            [ON, f"{names.POLICY_LABEL}=Not-Renamed"],
            1,
            None,
            rendering.UNKNOWN_ENTRY,
            "names a policy that does not exist",
            "did you mean 'not-renamed'",
        ),
        id="a-policy-name-in-the-wrong-case-is-missing-with-a-suggestion",
    ),
    pytest.param(
        Case(
            "team-d",
            [],
            1,
            None,
            None,
            "not opted in",
            None,
        ),
        id="no-labels-is-not-opted-in",
    ),
    pytest.param(
        Case(
            "team-d",
            [f"{names.ENABLED_LABEL}=True"],
            1,
            None,
            None,
            "not opted in",
            'only "true" opts in',
        ),
        id="True-is-a-near-miss",
    ),
    pytest.param(
        Case(
            "team-d",
            [f"{names.ENABLED_LABEL}=yes"],
            1,
            None,
            None,
            "not opted in",
            'only "true" opts in',
        ),
        id="yes-is-a-near-miss",
    ),
    pytest.param(
        Case(
            "team-d",
            [f"{names.ENABLED_LABEL}= true"],
            1,
            None,
            None,
            "not opted in",
            "is not a valid label value",
        ),
        id="a-value-with-a-space-is-a-near-miss-and-invalid",
    ),
    pytest.param(
        Case(
            "team-d",
            ["gpu-share.io/enable=true"],
            1,
            None,
            None,
            "not opted in",
            "did you mean gpu-share.io/enabled?",
        ),
        id="a-misspelt-key-is-a-near-miss",
    ),
    pytest.param(
        Case(
            "kube-system",
            [ON],
            1,
            None,
            None,
            "kube-system is never sent",
            None,
        ),
        id="kube-system-is-left-out-even-opted-in",
    ),
    pytest.param(
        Case(
            names.DEFAULT_NAMESPACE,
            [ON],
            1,
            None,
            None,
            "the webhook's own namespace",
            None,
        ),
        id="the-webhooks-own-namespace-is-left-out-even-opted-in",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_a_namespace_is_explained_as_the_api_server_and_the_server_route_it(
    capsys: pytest.CaptureFixture[str], case: Case
) -> None:
    argv = ["namespace", case.name]
    for label in case.labels:
        argv += ["-l", label]
    code, found = as_json(capsys, *argv)
    assert code == case.code
    assert found["governed"] is (case.code == 0)
    assert found["policy"] == case.policy
    assert found["entries"]["validating"] == case.entry
    assert case.reason in found["reason"]
    if case.hint is None:
        assert found["hints"] == []
    else:
        assert any(case.hint in h for h in found["hints"]), found["hints"]
    # Both configurations select namespaces alike.
    assert (found["entries"]["mutating"] is None) == (case.entry is None)


def test_the_entry_named_is_the_one_whose_selector_kubernetes_would_match() -> None:
    """Every entry of the rendered configurations, for a set of label sets: exactly the one
    explain names selects the labels (the selectors are disjoint)."""
    loaded = policies.load_directory(SHIPPED)
    configs = rendering.render(
        loaded,
        service=names.DEFAULT_SERVICE,
        namespace=names.DEFAULT_NAMESPACE,
        name=names.DEFAULT_WEBHOOK_NAME,
    )
    validating = next(c for c in configs if c["kind"] == rendering.VALIDATING_KIND)
    for policy_label in (None, "", "default", "not-renamed", "gold"):
        for level in (None, "baseline", "restricted", "privileged"):
            labels = {names.ENABLED_LABEL: "true", names.NAME_LABEL: "ns"}
            if policy_label is not None:
                labels[names.POLICY_LABEL] = policy_label
            if level is not None:
                labels[names.POD_SECURITY_ENFORCE_LABEL] = level
            found = explain.explain(
                "ns", labels, loaded, configs, webhook_namespace=names.DEFAULT_NAMESPACE
            )
            matching = [
                w["name"]
                for w in dh.pod_entries(validating)
                if explain.selector_matches(w["namespaceSelector"], labels)
            ]
            assert matching == [found.validating_entry], labels


@pytest.mark.parametrize(
    ("selector", "labels", "holds"),
    [
        pytest.param(None, {}, True, id="no-selector-selects-all"),
        pytest.param({}, {"a": "1"}, True, id="an-empty-selector-selects-all"),
        pytest.param({"matchLabels": {"a": "1"}}, {"a": "1"}, True, id="matchLabels-equal"),
        pytest.param({"matchLabels": {"a": "1"}}, {"a": "2"}, False, id="matchLabels-other"),
        pytest.param({"matchLabels": {"a": "1"}}, {}, False, id="matchLabels-absent"),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
            {},
            True,
            id="NotIn-holds-without-the-key",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]},
            {},
            False,
            id="In-needs-the-key",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
            {"a": ""},
            True,
            id="Exists-with-an-empty-value",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]},
            {"a": ""},
            False,
            id="DoesNotExist-with-an-empty-value",
        ),
        pytest.param(
            {
                "matchLabels": {"a": "1"},
                "matchExpressions": [{"key": "b", "operator": "DoesNotExist"}],
            },
            {"a": "1", "b": "x"},
            False,
            id="matchLabels-and-expressions-are-anded",
        ),
    ],
)
def test_label_selectors_are_evaluated_as_kubernetes_does(
    selector: dict[str, Any] | None, labels: dict[str, str], holds: bool
) -> None:
    assert explain.selector_matches(selector, labels) is holds


def test_the_text_names_the_entries_the_policy_file_its_classes_and_profiles(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "namespace", "team-a", "-l", ON, "--policies", SHIPPED)
    assert (code, err) == (0, "")
    assert out.startswith("namespace team-a: governed by policy 'default'")
    assert "default.gpu-share.io (mutating), default.gpu-share.io (validating)" in out
    assert "/mutate/default, /validate/default" in out
    assert "default.yaml" in out
    assert "class t4-mps: nvidia.com/gpu.shared on Tesla-T4, mps, 4 replicas per GPU" in out
    assert "profiles: small, medium (default medium)" in out


def test_what_each_entry_sends_is_told_as_admit_routes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The routing is admit's (`reviewing.route`): pods are patched, workloads go to the
    validating entry only, claims on CREATE; and no entry sends what the server passes
    untouched."""
    code, found = as_json(capsys, "namespace", "team-a", "-l", ON, "--policies", SHIPPED)
    assert code == 0
    said = {(r["endpoint"], r["resource"], r["operation"]): r["review"] for r in found["reviews"]}
    assert said[("mutate", "pods", "CREATE")] == reviewing.Route.POD.value
    assert said[("validate", "pods/ephemeralcontainers", "UPDATE")] == (
        reviewing.Route.EPHEMERAL.value)
    assert said[("validate", "bindings", "CREATE")] == reviewing.Route.BINDING.value
    assert said[("mutate", "resourceclaims", "CREATE")] == reviewing.Route.CLAIM.value
    assert said[("validate", "deployments", "UPDATE")] == reviewing.Route.TEMPLATES.value
    assert ("mutate", "deployments", "CREATE") not in said
    assert reviewing.Route.NONE.value not in said.values()
    code, out, _ = run(capsys, "namespace", "team-a", "-l", ON, "--policies", SHIPPED)
    assert f"/validate: pods CREATE: {reviewing.Route.POD.value}" in out


def test_the_labels_come_from_a_namespace_dump_and_l_wins(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dump = tmp_path / "namespaces.json"
    items = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": other,
                "labels": {names.ENABLED_LABEL: "true", names.POLICY_LABEL: "not-renamed"},
            },
        }
        for other in ("team-a", "team-b")
    ]
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    code, found = as_json(capsys, "namespace", "team-b", "-f", str(dump))
    assert (code, found["policy"]) == (0, "not-renamed")
    code, found = as_json(
        capsys, "namespace", "team-b", "-f", str(dump), "-l", f"{names.POLICY_LABEL}="
    )
    assert (code, found["policy"]) == (0, "default")
    code, found = as_json(
        capsys, "namespace", "team-b", "-f", str(dump), "-l", f"{names.ENABLED_LABEL}=false"
    )
    assert (code, found["optedIn"]) == (1, False)


@pytest.mark.parametrize(
    ("argv", "document", "message"),
    [
        pytest.param(
            ["namespace", "team-z", "-f", "{file}"],
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
            "no Namespace named team-z (it holds team-a)",
            id="a-dump-without-the-namespace",
        ),
        pytest.param(
            ["namespace", "team-a", "-f", "{file}"],
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n  labels:\n"
            "    gpu-share.io/enabled: true\n",
            "is a YAML boolean",
            id="an-unquoted-yaml-boolean-label",
        ),
        pytest.param(
            ["namespace", "team-a", "-l", "novalue"],
            None,
            "expected KEY=VALUE",
            id="a-label-without-a-value",
        ),
        pytest.param(
            ["namespace", "team-a", "-f", "{missing}"], None, "no such file", id="a-missing-file"
        ),
        pytest.param(["namespace", "Team_A"], None, "a namespace name", id="a-bad-name"),
        pytest.param(["namespace"], None, "NAME", id="no-name"),
        pytest.param([], None, "namespace NAME", id="no-subject"),
        pytest.param(
            ["namespace", "team-a", "--policies", "{missing}"],
            None,
            "not a directory of policy files",
            id="no-policy-directory",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    argv: list[str],
    document: Any,
    message: str,
) -> None:
    file = tmp_path / "ns.yaml"
    if document is not None:
        file.write_text(document if isinstance(document, str) else json.dumps(document))
    filled = [
        a.replace("{file}", str(file)).replace("{missing}", str(tmp_path / "nope")) for a in argv
    ]
    with_policies = (
        filled if "--policies" in filled or not filled else [*filled, "--policies", SHIPPED]
    )
    try:
        code = cli.main(["explain", *with_policies])
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert message in err
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith(("error", "gpu-share"))]) == 1


def test_json_is_the_same_answer_as_the_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, found = as_json(
        capsys, "namespace", "team-c", "-l", ON, "-l", f"{names.POLICY_LABEL}=gold"
    )
    assert code == 1
    assert found["optedIn"] is True
    assert found["governed"] is False
    assert found["path"] == names.UNKNOWN_POLICY_PATH
    assert found["classes"] == []


# --------------------------------------------------------------------------- as the server has it
# (found reviewing the change: explain loaded policies otherwise than the server does)


def _policies(tmp_path: Path, **extra: str) -> Path:
    directory = tmp_path / "policies"
    shutil.copytree(REPO / "policies", directory)
    for name, text in extra.items():
        (directory / f"{name}.yaml").write_text(text)
    return directory


def test_a_file_that_does_not_load_takes_out_only_its_own_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = (
        "apiVersion: gpu-share.io/v1alpha1\nkind: SharingPolicy\nmetadata: {name: gold}\n"
        "spec: {nodeClasses: []}\n"
    )
    directory = _policies(tmp_path, gold=broken)
    code, out, err = run(
        capsys,
        "namespace",
        "team-a",
        "-l",
        f"{names.ENABLED_LABEL}=true",
        "--policies",
        str(directory),
    )
    assert code == 0, err
    assert "governed by policy 'default'" in out
    assert "warning: not in force:" in err
    code, out, _ = run(
        capsys,
        "namespace",
        "team-a",
        "-l",
        f"{names.ENABLED_LABEL}=true",
        "-l",
        f"{names.POLICY_LABEL}=gold",
        "--policies",
        str(directory),
    )
    assert code == 1
    assert 'policy "gold" is not in force' in out


def test_pod_security_is_left_to_it_only_where_the_policy_trusts_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default = yaml.safe_load((REPO / "policies" / "default.yaml").read_text())
    default["spec"]["hostAccess"] = {"trustPodSecurity": False}
    directory = _policies(tmp_path)
    (directory / "default.yaml").write_text(yaml.safe_dump(default))
    code, out, _ = run(
        capsys,
        "namespace",
        "team-a",
        "-l",
        f"{names.ENABLED_LABEL}=true",
        "-l",
        "pod-security.kubernetes.io/enforce=baseline",
        "--policies",
        str(directory),
    )
    assert code == 0
    assert "host access is left to it" not in out


def test_no_default_policy_and_no_label_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _policies(tmp_path)
    (directory / "default.yaml").unlink()
    code, out, _ = run(
        capsys,
        "namespace",
        "team-a",
        "-l",
        f"{names.ENABLED_LABEL}=true",
        "--policies",
        str(directory),
    )
    assert code == 1
    assert "label gpu-share.io/policy=''" not in out
    assert 'policy "default" does not exist' in out


def test_the_limits_of_the_policy_are_told_in_the_text_and_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _policies(tmp_path, limits=LIMITS_POLICY)
    labels = ("-l", ON, "-l", f"{names.POLICY_LABEL}=limits", "--policies", str(directory))
    code, out, _ = run(capsys, "namespace", "team-a", *labels)
    assert code == 0
    assert out.splitlines()[-4:] == [
        "  limit: profiles are ceilings: CUDA_MPS_* above the pod's profile are refused",
        "  limit: whole GPUs: at most 2 per pod",
        "  limit: GPUs also: nvidia.com/GA102GL_*",
        "  limit: driver capabilities: compute,utility",
    ]
    _, out_json, _ = run(capsys, "namespace", "team-a", *labels, "-o", "json")
    told = [line.removeprefix("  limit: ") for line in out.splitlines()[-4:]]
    assert json.loads(out_json)["limits"] == told
