"""Policy files: the shipped ones are valid; every error names file, field and reason, and
`policy check` exits non-zero."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.kube import REPO
from webhook import cli
from webhook.policy import policies

HEAD = "apiVersion: gpu-share.io/v1alpha1\nkind: SharingPolicy\n"


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def policy_doc(name: str, spec: str) -> str:
    body = textwrap.indent(textwrap.dedent(spec), "  ")
    return HEAD + f"metadata: {{name: {name}}}\nspec:\n" + body


T4 = (
    "nodeClasses:\n"
    "  - {name: t4, product: Tesla-T4, strategy: mps, replicas: 4, memoryMiB: 15360}\n"
)


def test_the_shipped_policies_pass_the_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["policy", "check", str(REPO / "policies")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"ok: policy default ({REPO / 'policies' / 'default.yaml'}): classes t4-mps,"
        " a10g-time-slicing",
        f"ok: policy dra ({REPO / 'policies' / 'dra.yaml'}): classes t4-mps; DRA classes"
        " allowed: gpu.nvidia.com, mig.nvidia.com; closed: compute-domain-daemon.nvidia.com,"
        " vfio.gpu.nvidia.com, vgpu.gpu.nvidia.com",
        f"ok: policy not-renamed ({REPO / 'policies' / 'not-renamed.yaml'}): classes"
        " t4-time-slicing, l4-mps",
    ]


def test_the_shipped_policies_say_what_the_spec_asks_for() -> None:
    loaded = policies.load_directory(REPO / "policies")
    default = loaded.policies["default"]
    assert default.shared_resources == {"nvidia.com/gpu.shared"}
    assert {(c.strategy, c.renamed) for c in default.classes} == {
        ("mps", True),
        ("time-slicing", True),
    }
    not_renamed = loaded.policies["not-renamed"]
    assert not_renamed.shared_resources == {"nvidia.com/gpu"}
    assert all(
        not c.renamed and dict(c.selector)["nvidia.com/gpu.product"].endswith("-SHARED")
        for c in not_renamed.classes
    )


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        pytest.param(
            T4.replace("replicas: 4", "replicas: 1"),
            "spec.nodeClasses[0].replicas: 1 is not sharing; the device plugin needs at least 2",
            id="replicas-below-2",
        ),
        pytest.param(
            T4 + "profiles: {big: {activeThreadPercentage: 30}}\ndefaultProfile: big\n",
            "spec.profiles.big: above the MPS ceiling of every class (t4: 25% / 3840 MiB)",
            id="profile-above-every-ceiling",
        ),
        pytest.param(
            T4 + "profiles: {s: {activeThreadPercentage: 10}}\ndefaultProfile: m\n",
            "spec.defaultProfile: 'm' is not one of the profiles (s)",
            id="default-profile-unknown",
        ),
        pytest.param(
            T4 + "profiles: {s: {activeThreadPercentage: 10}}\n",
            "spec.defaultProfile: required when profiles are defined",
            id="default-profile-missing",
        ),
        pytest.param(
            T4 + "tolerations: [{key: nvidia.com/gpu, operator: Exists, value: 'yes'}]\n",
            "spec.tolerations[0]: value must be empty when operator is 'Exists'",
            id="exists-toleration-with-value",
        ),
        pytest.param(
            "nodeClasses:\n  - {name: m, resource: nvidia.com/mig-1g.10gb, product: A100,"
            " strategy: mps, replicas: 2, memoryMiB: 10000}\n"
            "sharedResources: [nvidia.com/mig-1g.10gb.shared]\n",
            "spec.nodeClasses[0].strategy: the device plugin refuses MPS on MIG devices"
            " (use time-slicing)",
            id="mps-on-mig",
        ),
        pytest.param(
            "nodeClasses:\n  - {name: t4, product: Tesla-T4, strategy: mps, replicas: 4}\n",
            "spec.nodeClasses[0].memoryMiB: required for an mps class (it sets the ceiling)",
            id="mps-without-memory",
        ),
        pytest.param(
            T4 + "colour: blue\n",
            "spec.colour: unknown field (a typo? unknown fields are refused, not ignored);"
            " the fields known here: mode, ruleModes, sharedResources, runtimeClassName,"
            " tolerations, tolerateResourceTaint, nodeClasses, profiles, hostAccess,"
            " defaultProfile, profilesAreCeilings, exclusiveGpus, driverCapabilities, rules, dra",
            id="unknown-field",
        ),
        pytest.param(
            T4.replace("mps,", "mpss,"),
            "spec.nodeClasses[0].strategy: Input should be 'mps' or 'time-slicing'",
            id="unknown-strategy",
        ),
        pytest.param(
            T4 + "sharedResources: [nvidia.com/gpu]\n",
            "spec.nodeClasses[t4]: advertises nvidia.com/gpu.shared, which is not in"
            " sharedResources",
            id="class-advertises-another-resource",
        ),
        pytest.param(
            T4 + "  - {name: t4, product: NVIDIA-L4, strategy: time-slicing, replicas: 2}\n",
            "spec.nodeClasses: two classes named 't4'",
            id="two-classes-one-name",
        ),
    ],
)
def test_an_invalid_policy_is_refused_with_file_field_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, problem: str
) -> None:
    path = write(tmp_path, "team.yaml", policy_doc("team", spec))
    assert cli.main(["policy", "check", str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert f"error: {path}: {problem}" in err
    assert err[-1].startswith(f"{tmp_path}: ")


def test_two_policies_with_one_name_are_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = write(tmp_path, "a.yaml", policy_doc("team", T4))
    second = write(tmp_path, "b.yaml", policy_doc("team", T4))
    assert cli.main(["policy", "check", str(tmp_path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: {second}: metadata.name: policy 'team' is already defined in {first}",
        f"{tmp_path}: 1 problem",
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(
            "spec: [\n",
            "not valid YAML or JSON at line 2, column 1: expected the node content,"
            " but found '<stream end>'",
            id="not-yaml",
        ),
        pytest.param("- 1\n- 2\n", "a policy is a mapping, not list", id="not-a-mapping"),
        pytest.param("# nothing\n", "holds no policy document", id="empty"),
        pytest.param(
            HEAD.replace("v1alpha1", "v9") + "metadata: {name: a}\nspec:\n  " + T4,
            "apiVersion: Input should be 'gpu-share.io/v1alpha1'",
            id="wrong-apiVersion",
        ),
        pytest.param(
            HEAD + "metadata: {name: Team_A}\nspec:\n  " + T4,
            "metadata.name: 'Team_A' is not a DNS-1123 label (lower-case letters,"
            " digits and '-', starting and ending with a letter or digit, at most 63"
            " characters)",
            id="name-not-a-dns-label",
        ),
    ],
)
def test_a_file_that_is_not_a_policy_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert cli.main(["policy", "check", str(tmp_path)]) == 1
    assert f"error: {path}: {problem}" in capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_a_directory_without_policies_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    directory = tmp_path / "nothing"
    if kind == "empty":
        directory.mkdir()
    # No directory is bad usage (2, as every command says it); an empty one a failed check.
    assert cli.main(["policy", "check", str(directory)]) == (2 if kind == "missing" else 1)
    reason = (
        "not a directory of policy files" if kind == "missing" else "holds no *.yaml policy file"
    )
    assert f"error: {directory}: {reason}" in capsys.readouterr().err.splitlines()


def test_a_policy_is_compiled_once_with_its_ceilings_and_selectors() -> None:
    loaded = policies.load_directory(REPO / "policies")
    t4 = loaded.policies["default"].classes[0]
    assert (t4.thread_ceiling, t4.memory_ceiling_mib) == (25, 3840)
    assert t4.selector == (
        ("nvidia.com/gpu.sharing-strategy", "mps"),
        ("nvidia.com/gpu.product", "Tesla-T4"),
        ("nvidia.com/gpu.replicas", "4"),
    )
    assert loaded.policies["default"].classes_by_resource["nvidia.com/gpu.shared"][0] is t4
