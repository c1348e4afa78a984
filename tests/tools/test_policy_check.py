"""`gpu-share-webhook policy check`: what can never match a node is said before a pod meets it,
every problem of every file comes in one round, and with `--nodes` the taints that keep a
class's pods off its nodes are named.

Errors (exit 1) are what the server refuses too; warnings (exit 0) what it loads and an admin
should know. Node dumps are real Node objects (tests/support/nodes.py), valid to Kubernetes' schema.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.support.kube import VERSIONS
from tests.support.nodes import L4_MPS, T4_MPS, Gpu, node, write
from webhook import cli
from webhook.policy import policies
from webhook.tools import checking

HEAD = "apiVersion: gpu-share.io/v1alpha1\nkind: SharingPolicy\n"


def policy(name: str, spec: str) -> str:
    return (
        HEAD + f"metadata: {{name: {name}}}\nspec:\n" + textwrap.indent(textwrap.dedent(spec), "  ")
    )


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], list[str]]:
    code = cli.main(["policy", "check", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def one_file(tmp_path: Path, text: str, name: str = "site.yaml") -> tuple[Path, Path]:
    directory = tmp_path / "policies"
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(text)
    return directory, path


L4 = "{name: l4, product: NVIDIA-L4, strategy: mps, replicas: 2, memoryMiB: 23034}"
# Why MPS on a node with several GPUs is warned about.
LOOSE = (
    "the device plugin starts each MPS control daemon without CUDA_VISIBLE_DEVICES, so a client"
    " there is not confined to its replica's GPU"
)
T4_TS = "{name: t4, product: Tesla-T4, strategy: time-slicing, replicas: 4}"


# --------------------------------------------------------------------------- never matches

# (spec, the problem: `<field path>: <reason>`). Each is refused by the server as well.
NEVER_MATCHES = [
    pytest.param(
        "nodeClasses:\n"
        "  - {name: l4, product: NVIDIA-L4-SHARED, strategy: mps, replicas: 2, memoryMiB: 23034}\n",
        "spec.nodeClasses[0].product: NVIDIA-L4-SHARED never matches a node: GFD writes -SHARED"
        " only on GPUs shared without renaming, and this class is renamed. Write NVIDIA-L4 (or"
        " renamed: false, if the device plugin runs renameByDefault: false)",
        id="shared-product-on-a-renamed-class",
    ),
    pytest.param(
        "sharedResources: [nvidia.com/gpu]\n"
        "nodeClasses:\n"
        "  - {name: t4, product: Tesla-T4-SHARED, strategy: time-slicing, renamed: false,"
        " replicas: 4}\n",
        "spec.nodeClasses[0].product: Tesla-T4-SHARED never matches a node: the webhook adds"
        " -SHARED itself for a class that is not renamed, and GFD never writes"
        " Tesla-T4-SHARED-SHARED. Write Tesla-T4",
        id="shared-product-on-a-class-that-is-not-renamed",
    ),
]


@pytest.mark.parametrize(("spec", "problem"), NEVER_MATCHES)
def test_a_product_no_node_carries_is_an_error_the_server_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, problem: str
) -> None:
    directory, path = one_file(tmp_path, policy("site", spec))
    code, out, err = check(capsys, str(directory))
    assert (code, out, err) == (1, [], [f"error: {path}: {problem}", f"{directory}: 1 problem"])
    # The server refuses the file at load (and at reload keeps the good one in force).
    load = policies.FileLoad.of(path.read_text(), str(path))
    assert load.policies == ()
    assert load.problems == (f"{path}: {problem}",)


# (spec, the warning). The server loads each: a warning never takes a policy out of force.
WARNINGS = [
    pytest.param(
        f"nodeClasses: [{T4_TS}]\n"
        "profiles: {small: {activeThreadPercentage: 10}}\ndefaultProfile: small\n",
        "spec.profiles: no node class is mps, so no profile limits anything (time-slicing"
        " nodes ignore CUDA_MPS_*); remove them, or add the MPS class they are meant for",
        id="profiles-without-an-mps-class",
    ),
    pytest.param(
        f"nodeClasses:\n  - {L4}\n"
        "  - {name: l4-8, product: NVIDIA-L4, strategy: mps, replicas: 8, memoryMiB: 23034}\n"
        "profiles: {half: {activeThreadPercentage: 50}}\ndefaultProfile: half\n",
        "spec.nodeClasses[1]: class l4-8 takes no pod that uses a profile: every profile is"
        " above its MPS ceiling (12% / 2879 MiB); add a profile within it, or remove the class",
        id="an-mps-class-no-profile-fits",
    ),
    pytest.param(
        f"nodeClasses:\n  - {L4}\n"
        "  - {name: l4-8, product: NVIDIA-L4, strategy: mps, replicas: 8, memoryMiB: 23034}\n"
        "profiles: {half: {activeThreadPercentage: 50}, small: {activeThreadPercentage: 10}}\n"
        "defaultProfile: half\n",
        "spec.defaultProfile: half is above the MPS ceiling of class l4-8 (12% / 2879 MiB):"
        " pods that name no profile never land there",
        id="the-default-profile-above-a-class",
    ),
    pytest.param(
        f"nodeClasses:\n  - {L4}\n"
        "  - {name: l4-big, product: NVIDIA-L4, strategy: mps, replicas: 2, memoryMiB: 24000}\n",
        "spec.nodeClasses[1]: class l4-big selects the nodes class l4 selects (the same"
        " nvidia.com/gpu.sharing-strategy=mps, nvidia.com/gpu.product=NVIDIA-L4,"
        " nvidia.com/gpu.replicas=2); the webhook cannot tell them apart: merge them into one",
        id="two-classes-one-selector",
    ),
    pytest.param(
        "nodeClasses:\n  - {name: l4, product: NVIDIA-L4, strategy: mps, replicas: 2,"
        " memoryMiB: 23034, gpusPerNode: 4}\n",
        f"spec.nodeClasses[0]: class l4 shares 4 GPUs per node by MPS: {LOOSE}; where tenants"
        " must stay apart, give MPS nodes one GPU",
        id="mps-on-several-gpus-per-node",
    ),
]


@pytest.mark.parametrize(("spec", "warning"), WARNINGS)
def test_what_the_server_loads_but_never_happens_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, warning: str
) -> None:
    directory, path = one_file(tmp_path, policy("site", spec))
    code, out, err = check(capsys, str(directory))
    assert (code, err) == (0, [f"warning: {path}: {warning}"])
    assert out[0].startswith(f"ok: policy site ({path})")
    assert policies.load_directory(directory).names == ["site"]


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        pytest.param(L4, ["warning: policy site class l4: MPS on nodes with more than one GPU"
                          f" (nvidia.com/gpu.count l4-4=4): {LOOSE}; where tenants must stay"
                          " apart, give MPS nodes one GPU"], id="mps-one-gpu-per-node"),
        # Said of the class itself, once.
        pytest.param(L4.replace("}", ", gpusPerNode: 4}"), [
            "warning: {path}: spec.nodeClasses[0]: class l4 shares 4 GPUs per node by MPS:"
            f" {LOOSE}; where tenants must stay apart, give MPS nodes one GPU",
            "warning: policy site class l4: gpusPerNode 4 is more than nvidia.com/gpu.count on"
            " l4-1=1 (a request for several replicas is pinned to nodes with enough GPUs)",
        ], id="mps-several-gpus-per-node"),
        pytest.param(
            "{name: l4, product: NVIDIA-L4, strategy: time-slicing, replicas: 2}", [],
            id="time-slicing"),
    ],
)
def test_an_mps_class_on_a_node_with_several_gpus_is_warned_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cls: str, expected: list[str]
) -> None:
    strategy = "time-slicing" if "time-slicing" in cls else "mps"
    nodes = write(tmp_path, [node("l4-1", Gpu("NVIDIA-L4", strategy, 2, memory=23034)),
                             node("l4-4", Gpu("NVIDIA-L4", strategy, 2, count=4, memory=23034))])
    directory, path = one_file(tmp_path, policy("site", f"nodeClasses: [{cls}]\n"))
    code, out, err = check(capsys, str(directory), "--nodes", str(nodes))
    assert (code, err) == (0, [e.format(path=path) for e in expected])
    assert "ok: policy site class l4 matches 2 nodes: l4-1, l4-4" in out


def test_a_policy_with_nothing_to_say_gets_no_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = policy(
        "site",
        f"nodeClasses:\n  - {L4}\n  - {T4_TS.replace('t4,', 't4-ts,')}\n"
        "profiles: {half: {activeThreadPercentage: 50}}\ndefaultProfile: half\n",
    )
    directory, _ = one_file(tmp_path, text)
    assert check(capsys, str(directory))[::2] == (0, [])


# --------------------------------------------------------------------------- one round


def test_every_problem_of_every_file_comes_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, a field's error hid the validators' (pydantic runs them only on valid fields),
    a class showed its first problem only, a file that did not load hid the name it shares
    with another, and a policy error hid what the policies that load say to the nodes."""
    directory = tmp_path / "policies"
    directory.mkdir()
    files = {
        "a-yaml.yaml": "spec: [\n",
        # A typo in a class, and the policy's own coherence: a default that is no profile,
        # a rule that does not exist, a toleration the API server refuses.
        "b-team.yaml": policy(
            "team",
            """\
            nodeClasses:
              - {name: l4, product: NVIDIA-L4, strategy: mps, replicas: 2, memoryMiB: 23034,
                  colour: blue}
            profiles: {half: {activeThreadPercentage: 50}}
            defaultProfile: full
            ruleModes: {no-such-rule: warn}
            tolerations: [{operator: Equal, tolerationSeconds: 5}]
            """,
        ),
        # Loads, but b-team.yaml declares the name first.
        "c-team.yaml": policy("team", f"nodeClasses: [{L4}]\n"),
        # Several problems of one class, a wrong value beside them.
        "d-ml.yaml": policy(
            "ml",
            """\
            mode: enforced
            nodeClasses:
              - {name: l4, product: NVIDIA-L4-SHARED, strategy: mps, replicas: 1}
            """,
        ),
        # Loads, with a warning, and matches no node of the dump.
        "e-site.yaml": policy(
            "site",
            f"nodeClasses: [{T4_TS}]\n"
            "profiles: {small: {activeThreadPercentage: 10}}\n"
            "defaultProfile: small\n",
        ),
    }
    for name, text in files.items():
        (directory / name).write_text(text)
    nodes = write(tmp_path, [node("l4-1", L4_MPS)])
    code, out, err = check(capsys, str(directory), "--nodes", str(nodes))
    a, b, c, d, e = (directory / n for n in files)
    assert code == 1
    assert err == [
        f"error: {a}: not valid YAML or JSON at line 2, column 1: expected the node content,"
        " but found '<stream end>'",
        f"error: {b}: spec.ruleModes.no-such-rule.[key]: 'no-such-rule' is not one of the names"
        f" allowed here (they are: {', '.join(policies.names.RULES)})",
        f"error: {b}: spec.tolerations[0]: operator must be 'Exists' when key is empty",
        f"error: {b}: spec.tolerations[0]: tolerationSeconds is only allowed with effect NoExecute",
        f"error: {b}: spec.nodeClasses[0].colour: unknown field (a typo? unknown fields are"
        " refused, not ignored); the fields known here: name, resource, product, strategy,"
        " renamed, replicas, memoryMiB, gpusPerNode, failRequestsGreaterThanOne",
        f"error: {b}: spec.defaultProfile: 'full' is not one of the profiles (half)",
        f"error: {d}: spec.mode: Input should be 'enforce', 'warn' or 'dry-run'",
        f"error: {d}: spec.nodeClasses[0].replicas: 1 is not sharing; the device plugin needs"
        " at least 2",
        f"error: {d}: spec.nodeClasses[0].memoryMiB: required for an mps class (it sets the"
        " ceiling)",
        f"error: {d}: spec.nodeClasses[0].product: NVIDIA-L4-SHARED never matches a node: GFD"
        " writes -SHARED only on GPUs shared without renaming, and this class is renamed."
        " Write NVIDIA-L4 (or renamed: false, if the device plugin runs renameByDefault:"
        " false)",
        f"error: {c}: metadata.name: policy 'team' is also declared in {b}, which does not"
        " load; once it does, this file is out of force",
        f"warning: {e}: spec.profiles: no node class is mps, so no profile limits anything"
        " (time-slicing nodes ignore CUDA_MPS_*); remove them, or add the MPS class they are"
        " meant for",
        f"{directory}: 11 problems",
        f"error: policy site class t4 matches no node in {nodes}"
        " (nvidia.com/gpu.sharing-strategy=time-slicing, nvidia.com/gpu.product=Tesla-T4,"
        " nvidia.com/gpu.replicas=4)",
        # c-team.yaml's team is in force, as the server has it while b-team.yaml does not load.
        f"error: policy team class l4 matches no node in {nodes}"
        " (nvidia.com/gpu.sharing-strategy=mps, nvidia.com/gpu.product=NVIDIA-L4,"
        " nvidia.com/gpu.replicas=2)",
        f"warning: {nodes}: whether every shared GPU node matches a class is not judged while a"
        " policy file does not load",
        f"{nodes}: 1 node, 1 with shared GPUs: 2 problems",
    ]
    assert out == [f"ok: policy site ({e}): classes t4", f"ok: policy team ({c}): classes l4"]


def test_a_validator_that_ran_is_not_run_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A class whose own fields are valid was judged by pydantic: its problem once, beside
    another field's error."""
    text = policy(
        "site",
        "mode: enforced\nnodeClasses:\n"
        "  - {name: l4, product: NVIDIA-L4, strategy: mps, replicas: 64,"
        " memoryMiB: 23034}\n",
    )
    directory, path = one_file(tmp_path, text)
    assert check(capsys, str(directory))[::2] == (
        1,
        [
            f"error: {path}: spec.mode: Input should be 'enforce', 'warn' or 'dry-run'",
            f"error: {path}: spec.nodeClasses[0].replicas: MPS allows at most 48 per GPU",
            f"{directory}: 2 problems",
        ],
    )


@pytest.mark.parametrize(
    ("spec", "absent"),
    [
        # A class that does not validate may be the one that advertises the resource.
        pytest.param(
            "sharedResources: [nvidia.com/gpu.shared]\nnodeClasses:\n"
            "  - {name: l4, resource: amd.com/gpu, product: NVIDIA-L4,"
            " strategy: time-slicing, replicas: 2}\n",
            "no node class advertises",
            id="served-by-an-invalid-class",
        ),
        # A profile whose value is wrong is not an empty one, nor unknown to the default.
        pytest.param(
            f"nodeClasses: [{L4}]\n"
            "profiles: {half: {activeThreadPercentage: 0}}\ndefaultProfile: half\n",
            "a profile sets",
            id="invalid-profile-is-not-empty",
        ),
        pytest.param(
            f"nodeClasses: [{L4}]\n"
            "profiles: {half: {activeThreadPercentage: 0}}\ndefaultProfile: half\n",
            "defaultProfile",
            id="invalid-profile-still-a-profile",
        ),
        # The ceilings of a class whose replicas are wrong are unknown.
        pytest.param(
            "nodeClasses:\n  - {name: l4, product: NVIDIA-L4, strategy: mps,"
            " replicas: two, memoryMiB: 23034}\n"
            "profiles: {half: {activeThreadPercentage: 90}}\ndefaultProfile: half\n",
            "above the MPS ceiling",
            id="ceiling-of-an-invalid-class",
        ),
        # Nor of a class whose replicas a rule refuses (64 > 48 MPS clients).
        pytest.param(
            "nodeClasses:\n  - {name: l4, product: NVIDIA-L4, strategy: mps,"
            " replicas: 64, memoryMiB: 23034}\n"
            "profiles: {half: {activeThreadPercentage: 50}}\ndefaultProfile: half\n",
            "above the MPS ceiling",
            id="ceiling-of-a-refused-class",
        ),
        # MPS on MIG: the strategy or the resource is wrong, so what it advertises is unknown.
        pytest.param(
            "nodeClasses:\n  - {name: m, resource: nvidia.com/mig-1g.10gb, product:"
            " A100, strategy: mps, replicas: 2, memoryMiB: 10000}\n",
            "sharedResources",
            id="advertised-by-a-refused-class",
        ),
        # A profile name that is no name leaves the profiles unknown to the default.
        pytest.param(
            f"nodeClasses: [{L4}]\n"
            "profiles: {Half: {activeThreadPercentage: 50}}\ndefaultProfile: half\n",
            "defaultProfile",
            id="profiles-with-an-invalid-name",
        ),
    ],
)
def test_what_an_invalid_field_leaves_unknown_is_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, absent: str
) -> None:
    directory, _ = one_file(tmp_path, policy("site", spec))
    code, _, err = check(capsys, str(directory))
    assert code == 1
    assert len(err) > 1
    assert not [line for line in err if absent in line], err


def test_a_file_that_cannot_be_read_is_bad_input_after_every_other_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A regular file to stat whose read fails (as root, permissions would not stop it).
    mem = Path("/proc/self/mem")
    if not mem.is_file():
        pytest.skip("needs Linux /proc")
    directory, path = one_file(tmp_path, policy("site", f"nodeClasses: [{L4}]\nmode: x\n"))
    (directory / "z.yaml").symlink_to(mem)
    code, _, err = check(capsys, str(directory))
    assert code == 2
    assert err[0].startswith(f"error: {path}: spec.mode: ")
    assert err[-1] == f"error: {directory / 'z.yaml'}: cannot be read: Input/output error"


# --------------------------------------------------------------------------- taints


def tolerate(
    key: str | None = None,
    operator: str | None = None,
    value: str | None = None,
    effect: str | None = None,
) -> dict[str, str]:
    return {
        k: v
        for k, v in (("key", key), ("operator", operator), ("value", value), ("effect", effect))
        if v is not None
    }


GPU = "nvidia.com/gpu"
# (toleration, taint as key, value, effect, tolerated): the Kubernetes API's rules.
TOLERATES = [
    (tolerate(GPU, "Exists", effect="NoSchedule"), (GPU, "", "NoSchedule"), True),
    (tolerate(GPU, "Exists", effect="NoSchedule"), (GPU, "x", "NoSchedule"), True),
    (tolerate(GPU, "Exists", effect="NoSchedule"), (GPU, "", "NoExecute"), False),
    (tolerate(GPU, "Exists"), (GPU, "", "NoExecute"), True),
    (tolerate(GPU, "Exists"), ("nvidia.com/gpu.shared", "", "NoSchedule"), False),
    (tolerate("dedicated", "Equal", "ml", "NoSchedule"), ("dedicated", "ml", "NoSchedule"), True),
    (tolerate("dedicated", "Equal", "ml", "NoSchedule"), ("dedicated", "db", "NoSchedule"), False),
    (tolerate("dedicated", "Equal", "ml", "NoSchedule"), ("dedicated", "", "NoSchedule"), False),
    # Equal is the default operator; no value is the empty value.
    (tolerate("dedicated", value="ml"), ("dedicated", "ml", "NoExecute"), True),
    (tolerate("dedicated", effect="NoSchedule"), ("dedicated", "", "NoSchedule"), True),
    (tolerate("dedicated", effect="NoSchedule"), ("dedicated", "ml", "NoSchedule"), False),
    # An empty key with Exists tolerates everything (of its effect, when it names one).
    (tolerate(operator="Exists"), ("anything", "at-all", "NoExecute"), True),
    (tolerate(operator="Exists", effect="NoSchedule"), ("anything", "", "NoExecute"), False),
]


@pytest.mark.parametrize(("toleration", "taint", "tolerated"), TOLERATES)
def test_a_toleration_tolerates_a_taint_as_kubernetes_decides(
    toleration: dict[str, str], taint: tuple[str, str, str], tolerated: bool
) -> None:
    for version in VERSIONS:
        kubernetes_validate.validate(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "x"}], "tolerations": [toleration]},
            },
            version,
            strict=True,
        )
    assert checking.tolerates(toleration, *taint) is tolerated


GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
# The renamed L4 class's nodes (advertising nvidia.com/gpu.shared).
L4_RENAMED = Gpu("NVIDIA-L4", "mps", 2, memory=23034)
ML_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
MAINTENANCE = {"key": "example.com/maintenance", "effect": "NoExecute"}
SHARED_TAINT = {"key": "nvidia.com/gpu.shared", "effect": "NoSchedule"}
NOT_READY = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
SPOT = {"key": "spot", "effect": "PreferNoSchedule"}
ML = "ok: policy site class l4 matches 2 nodes: l4-1, l4-2"
FIX = (
    "add a toleration for it to the policy's spec.tolerations, or remove the taint (pods"
    " that do not tolerate it themselves cannot land there)"
)

# (the policy's tolerations and switch, the taints of l4-1 and l4-2, the exit code, stderr
# before the summary).
TAINTS: list[Any] = [
    pytest.param(
        "",
        [GPU_TAINT],
        [GPU_TAINT, SHARED_TAINT],
        0,
        [],
        id="the-gpu-and-resource-taints-are-tolerated-by-default",
    ),
    pytest.param(
        "",
        [NOT_READY, SPOT],
        [],
        0,
        [],
        id="node-state-and-prefer-no-schedule-taints-are-left-alone",
    ),
    pytest.param(
        "",
        [ML_TAINT],
        [GPU_TAINT],
        0,
        [
            "warning: policy site class l4: its pods cannot land on l4-1: the policy's tolerations"
            f" do not tolerate dedicated=ml:NoSchedule on l4-1; {FIX}"
        ],
        id="one-node-left-is-a-warning",
    ),
    pytest.param(
        "",
        [ML_TAINT],
        [ML_TAINT, MAINTENANCE],
        1,
        [
            "error: policy site class l4: its pods can land on none of its 2 nodes: the policy's"
            " tolerations do not tolerate dedicated=ml:NoSchedule on l4-1, l4-2;"
            f" example.com/maintenance:NoExecute on l4-2; {FIX}"
        ],
        id="no-node-left-is-an-error",
    ),
    pytest.param(
        "tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]\n",
        [ML_TAINT],
        [ML_TAINT],
        0,
        [],
        id="equal-with-the-value",
    ),
    pytest.param(
        "tolerations: [{key: dedicated, value: db}]\n",
        [ML_TAINT],
        [],
        0,
        [
            "warning: policy site class l4: its pods cannot land on l4-1: the policy's tolerations"
            f" do not tolerate dedicated=ml:NoSchedule on l4-1; {FIX}"
        ],
        id="equal-with-another-value",
    ),
    pytest.param(
        "tolerations: [{operator: Exists}]\n",
        [ML_TAINT, MAINTENANCE],
        [GPU_TAINT],
        0,
        [],
        id="empty-key-exists-tolerates-all",
    ),
    pytest.param(
        "tolerations: [{key: example.com/maintenance, operator: Exists,"
        " effect: NoSchedule}, {key: nvidia.com/gpu, operator: Exists}]\n",
        [MAINTENANCE],
        [GPU_TAINT],
        0,
        [
            "warning: policy site class l4: its pods cannot land on l4-1: the policy's"
            " tolerations do not tolerate example.com/maintenance:NoExecute on l4-1;"
            f" {FIX}"
        ],
        id="another-effect-is-not-tolerated",
    ),
    pytest.param(
        "tolerations: [{key: example.com/maintenance, operator: Exists}]\n",
        [MAINTENANCE],
        [],
        0,
        [],
        id="no-effect-tolerates-every-effect",
    ),
    # Without tolerateResourceTaint, the policy's own tolerations must name it.
    pytest.param(
        "tolerateResourceTaint: false\n",
        [SHARED_TAINT],
        [SHARED_TAINT],
        1,
        [
            "error: policy site class l4: its pods can land on none of its 2 nodes: the policy's"
            f" tolerations do not tolerate nvidia.com/gpu.shared:NoSchedule on l4-1, l4-2; {FIX}"
        ],
        id="the-resource-taint-without-the-switch",
    ),
    # The default tolerations are replaced, not added to, by the policy's.
    pytest.param(
        "tolerations: [{key: dedicated, operator: Exists}]\n",
        [GPU_TAINT, ML_TAINT],
        [ML_TAINT],
        0,
        [
            "warning: policy site class l4: its pods cannot land on l4-1: the policy's"
            " tolerations do not tolerate nvidia.com/gpu:NoSchedule on l4-1;"
            f" {FIX}"
        ],
        id="own-tolerations-replace-the-default",
    ),
]


@pytest.mark.parametrize(("spec", "first", "second", "code", "expected"), TAINTS)
def test_taints_a_class_does_not_tolerate_keep_its_pods_off_its_nodes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    spec: str,
    first: list[dict[str, str]],
    second: list[dict[str, str]],
    code: int,
    expected: list[str],
) -> None:
    objects = [node("l4-1", L4_RENAMED, taints=first), node("l4-2", L4_RENAMED, taints=second)]
    for obj in objects:
        for version in VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
    nodes = write(tmp_path, objects)
    text = policy("site", f"{spec}nodeClasses: [{L4}]\n")
    directory, _ = one_file(tmp_path, text)
    got, out, err = check(capsys, str(directory), "--nodes", str(nodes))
    assert ML in out
    summary = f"{nodes}: 2 nodes, 2 with shared GPUs"
    if code:
        assert (got, err) == (1, [*expected, f"{summary}: 1 problem"])
    else:
        assert (got, err) == (0, expected)
        assert out[-1] == (
            f"ok: {summary}: every class matches a node, every shared GPU node a class"
        )


def test_each_class_is_judged_by_what_its_pods_get(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The resource's toleration is the class's own: a taint for nvidia.com/gpu.shared is
    tolerated on the renamed class's nodes, not on those of the class that is not renamed
    (its pods ask for nvidia.com/gpu)."""
    shared = {"key": "nvidia.com/gpu.shared", "effect": "NoSchedule"}
    objects = [node("t4-1", T4_MPS, taints=[shared]), node("l4-1", L4_MPS, taints=[shared])]
    for obj in objects:
        kubernetes_validate.validate(obj, VERSIONS[-1], strict=True)
    nodes = write(tmp_path, objects)
    text = policy(
        "site",
        f"""\
        sharedResources: [nvidia.com/gpu.shared, nvidia.com/gpu]
        nodeClasses:
          - {{name: t4, product: Tesla-T4, strategy: mps, replicas: 4, memoryMiB: 15360}}
          - {L4.replace("l4,", "l4-not-renamed,").replace("replicas", "renamed: false, replicas")}
        """,
    )
    directory, _ = one_file(tmp_path, text)
    code, _, err = check(capsys, str(directory), "--nodes", str(nodes))
    assert (code, err) == (
        1,
        [
            "error: policy site class l4-not-renamed: its pods can land on none of its 1 node: the"
            " policy's tolerations do not tolerate nvidia.com/gpu.shared:NoSchedule on l4-1;"
            f" {FIX}",
            f"{nodes}: 2 nodes, 2 with shared GPUs: 1 problem",
        ],
    )


# --------------------------------------------------------------------------- in words

DEVICE_PLUGIN_NAMES = (
    " is not a resource the NVIDIA device plugin advertises (nvidia.com/gpu.shared, renamed as"
    " by default; nvidia.com/gpu with renameByDefault: false; a MIG profile's, such as"
    " nvidia.com/mig-1g.5gb.shared)"
)
BEFORE_RENAMING = (
    " is not a device plugin resource before renaming (nvidia.com/gpu, or a MIG profile's such"
    " as nvidia.com/mig-1g.5gb; renamed: true adds .shared itself)"
)
DNS_LABEL = (
    " is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a"
    " letter or digit, at most 63 characters)"
)
REFUSED = " (unknown fields are refused, not ignored)"
MIG = (
    "{name: m, resource: nvidia.com/mig-1g.5gb, product: A100, strategy: time-slicing, replicas: 2}"
)

# (the policy's spec, or a whole document; the field; what `policy check` says of it): a name
# that does not match its pattern is said in words, with the valid one closest to it; an
# unknown field with the known field of its object closest to it.
IN_WORDS = [
    pytest.param(
        f"nodeClasses: [{T4_TS}]\nsharedResources: [nvidia.com/gpu-shared]\n",
        "spec.sharedResources[0]",
        "'nvidia.com/gpu-shared'" + DEVICE_PLUGIN_NAMES + "; did you mean nvidia.com/gpu.shared?",
        id="resource-dash-for-dot",
    ),
    pytest.param(
        f"nodeClasses: [{T4_TS}]\nsharedResources: [NVIDIA.com/GPU.shared]\n",
        "spec.sharedResources[0]",
        "'NVIDIA.com/GPU.shared'" + DEVICE_PLUGIN_NAMES + "; did you mean nvidia.com/gpu.shared?",
        id="resource-upper-case",
    ),
    pytest.param(
        f"nodeClasses: [{MIG}]\nsharedResources: [nvidia.com/mig-1g.5gb_shared]\n",
        "spec.sharedResources[0]",
        "'nvidia.com/mig-1g.5gb_shared'"
        + DEVICE_PLUGIN_NAMES
        + "; did you mean nvidia.com/mig-1g.5gb.shared?",
        id="mig-resource",
    ),
    pytest.param(
        f"nodeClasses: [{T4_TS}]\nsharedResources: [gpu]\n",
        "spec.sharedResources[0]",
        "'gpu'" + DEVICE_PLUGIN_NAMES,
        id="resource-nothing-close",
    ),
    pytest.param(
        "nodeClasses:\n  - {name: t4, resource: nvidia.com/gpu.shared, product: Tesla-T4,"
        " strategy: time-slicing, replicas: 4}\n",
        "spec.nodeClasses[0].resource",
        "'nvidia.com/gpu.shared'" + BEFORE_RENAMING + "; did you mean nvidia.com/gpu?",
        id="class-resource-renamed",
    ),
    pytest.param(
        "nodeClasses:\n  - {name: T4, product: Tesla-T4, strategy: time-slicing, replicas: 4}\n",
        "spec.nodeClasses[0].name",
        "'T4'" + DNS_LABEL,
        id="class-name",
    ),
    pytest.param(
        "nodeClasses:\n  - {name: t4, product: Tesla T4, strategy: time-slicing, replicas: 4}\n",
        "spec.nodeClasses[0].product",
        "'Tesla T4' is not a label value as gpu-feature-discovery writes one (letters,"
        " digits, '-', '_' and '.', starting and ending with a letter or digit, at most"
        " 63 characters)",
        id="product-with-a-space",
    ),
    pytest.param(
        f"nodeClasses: [{T4_TS}]\nruntimeClassName: Nvidia_\n",
        "spec.runtimeClassName",
        "'Nvidia_' is not a DNS-1123 subdomain (lower-case"
        " letters, digits, '-' and '.', each part starting and ending with a letter or"
        " digit, at most 253 characters)",
        id="runtime-class",
    ),
    pytest.param(
        f"nodeClasses: [{T4_TS}]\nnodeClass: []\n",
        "spec.nodeClass",
        "unknown field: did you mean nodeClasses?" + REFUSED,
        id="nodeClass",
    ),
    pytest.param(
        f"nodeClasses: [{T4_TS}]\nProfiles: {{}}\n",
        "spec.Profiles",
        "unknown field: did you mean profiles?" + REFUSED,
        id="upper-case-field",
    ),
    pytest.param(
        "nodeClasses:\n  - {name: t4, product: Tesla-T4, strategy: mps, replicas: 4,"
        " memoryMib: 15360}\n",
        "spec.nodeClasses[0].memoryMib",
        "unknown field: did you mean memoryMiB?" + REFUSED,
        id="class-field",
    ),
    pytest.param(
        f"nodeClasses: [{T4_TS}]\nhostAccess:\n  allowedHostPaths:\n"
        "    - {pathPrefix: /models, readonly: true}\n",
        "spec.hostAccess.allowedHostPaths[0].readonly",
        "unknown field: did you mean readOnly?" + REFUSED,
        id="nested-field",
    ),
    pytest.param(
        f"nodeClasses: [{T4_TS}]\nrules: {{denyPriviledged: false}}\n",
        "spec.rules.denyPriviledged",
        "unknown field: did you mean denyPrivileged?" + REFUSED,
        id="switch",
    ),
    pytest.param(
        HEAD + "metadata: {name: site}\nspecs: {}\n",
        "specs",
        "unknown field: did you mean spec?" + REFUSED,
        id="top-level",
    ),
]


@pytest.mark.parametrize(("text", "field", "reason"), IN_WORDS)
def test_a_name_or_field_that_is_wrong_is_said_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str, reason: str
) -> None:
    directory, path = one_file(tmp_path, text if text.startswith(HEAD) else policy("site", text))
    code, _, err = check(capsys, str(directory))
    assert code == 1
    assert f"error: {path}: {field}: {reason}" in err, err


def test_a_file_that_clashes_is_out_of_force_whole_as_the_server_has_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """b.yaml declares `default` again and `other`: the server takes b.yaml out of force
    whole (`policies.assemble`), so `other` is not reported as loaded."""
    spec = f"nodeClasses: [{L4}]\n"
    one_file(tmp_path, policy("default", spec), "a.yaml")
    directory, _ = one_file(
        tmp_path, policy("default", spec) + "---\n" + policy("other", spec), "b.yaml"
    )
    code, out, err = check(capsys, str(directory))
    assert code == 1
    assert any("b.yaml: metadata.name: policy 'default' is already defined in" in e for e in err)
    assert not any("policy other" in line for line in out)
    assert "other" in checking.check_directory(directory).loaded.broken
