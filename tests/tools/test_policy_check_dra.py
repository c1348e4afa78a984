"""`gpu-share-webhook policy check` and a policy's `dra` section: what the server refuses is an
error in the per-file lines of every other problem (exit 1); what it loads but can never work
is a warning (exit 0), said with the field and the fix; what no file can show (the feature
gates of NVIDIA's driver the sharing needs) is a note, once for the directory.

A dra class is judged as if it were open: `allowed` says whether namespaces may use it, the
rest what they get once they may.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support import dra_objects, kube
from webhook import cli
from webhook.policy import names, policies
from webhook.tools import checking

REPO = kube.REPO

HEAD = "apiVersion: gpu-share.io/v1alpha1\nkind: SharingPolicy\n"
T4_TS = "{name: t4, product: Tesla-T4, strategy: time-slicing, replicas: 4}"
T4_MPS = "{name: t4-mps, product: Tesla-T4, strategy: mps, replicas: 4, memoryMiB: 15360}"
# Within every ceiling below unless a case says otherwise.
PROFILES = (
    "profiles:\n  small: {activeThreadPercentage: 10, pinnedMemoryMiB: 2048}\n"
    "  medium: {activeThreadPercentage: 25, pinnedMemoryMiB: 3840}\ndefaultProfile: medium\n"
)
GPU_MPS = (
    "{name: gpu.nvidia.com, allowed: true, sharing: [MPS],"
    " mps: {maxActiveThreadPercentage: 50, maxPinnedMemoryMiB: 8192}}"
)


def policy(name: str, spec: str) -> str:
    return (
        HEAD + f"metadata: {{name: {name}}}\nspec:\n" + textwrap.indent(textwrap.dedent(spec), "  ")
    )


def dra(*classes: str, profiles: str = PROFILES, nodes: str = T4_MPS) -> str:
    """A policy `site` with `classes` as its dra section."""
    listed = "".join(f"    - {c}\n" for c in classes)
    section = f"dra:\n  deviceClasses:\n{listed}" if classes else "dra: {deviceClasses: []}\n"
    return policy("site", f"nodeClasses: [{nodes}]\n{profiles}{section}")


def one_file(tmp_path: Path, text: str, name: str = "site.yaml") -> tuple[Path, Path]:
    directory = tmp_path / "policies"
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(text)
    return directory, path


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], list[str]]:
    code = cli.main(["policy", "check", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def said(err: list[str], level: str) -> list[str]:
    return [line.removeprefix(f"{level}: ") for line in err if line.startswith(f"{level}: ")]


# --------------------------------------------------------------------------- errors

# (the classes, the error after `<file>: `): the server refuses each; policy check says it
# in the lines it prints for every other problem.
ERRORS = [
    pytest.param(
        ["{name: vfio.gpu.nvidia.com, allowed: true, sharing: [TimeSlicing]}"],
        "spec.dra.deviceClasses[0].sharing: VFIO passthrough devices are given whole to one"
        " virtual machine; NVIDIA's VfioDeviceConfig has no sharing",
        id="sharing-on-vfio",
    ),
    pytest.param(
        [GPU_MPS, "{name: gpu.nvidia.com}"],
        "spec.dra.deviceClasses: two entries for class 'gpu.nvidia.com'",
        id="a-class-twice",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, sharing: [MPS, MPS]}"],
        "spec.dra.deviceClasses[0].sharing: a strategy is listed twice",
        id="a-strategy-twice",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, sharing: [mps]}"],
        "spec.dra.deviceClasses[0].sharing[0]: Input should be 'TimeSlicing' or 'MPS'",
        id="a-strategy-in-lower-case",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, capacity: {memory: 8GB8}}"],
        "spec.dra.deviceClasses[0].capacity.memory: '8GB8' is not a quantity (the API server's"
        " grammar: a number, optional sign, optional suffix such as 1, 500m, 2Gi, 1e3)",
        id="a-capacity-that-is-no-quantity",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, capacity: {memory: -1Gi}}"],
        "spec.dra.deviceClasses[0].capacity.memory: '-1Gi' is negative",
        id="a-negative-capacity",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, maxDevicesPerRequest: 33}"],
        "spec.dra.deviceClasses[0].maxDevicesPerRequest: Input should be less than or equal to 32",
        id="more-devices-than-a-claim-can-have",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, maxDevicesPerClaim: 33}"],
        "spec.dra.deviceClasses[0].maxDevicesPerClaim: Input should be less than or equal to 32",
        id="more-devices-per-claim-than-an-allocation-holds",
    ),
    # A class open to namespaces, whose every request would be refused: no whole device, and
    # no way to share one.
    pytest.param(
        ["{name: gpu.nvidia.com, allowed: true, allowWholeDevice: false}"],
        "spec.dra.deviceClasses[0].allowWholeDevice: false, but the class names no sharing"
        " strategy and no capacity ceiling, so every request of it would be refused: list MPS"
        " or TimeSlicing in sharing, set capacity, or close the class (allowed: false)",
        id="no-whole-device-and-no-sharing",
    ),
    pytest.param(
        ["{name: vfio.gpu.nvidia.com, allowed: true, allowWholeDevice: false}"],
        "spec.dra.deviceClasses[0].allowWholeDevice: false, but the class names no sharing"
        " strategy and no capacity ceiling, so every request of it would be refused: list MPS"
        " or TimeSlicing in sharing, set capacity, or close the class (allowed: false)",
        id="no-whole-passthrough-device",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, allowed: true, sharing: [TimeSlicing], addMpsConfig: true}"],
        "spec.dra.deviceClasses[0].addMpsConfig: true needs MPS in sharing: the configuration it"
        " adds is an MPS one",
        id="adding-mps-where-the-class-allows-none",
    ),
    pytest.param(
        [
            "{name: gpu.nvidia.com, allowed: true, sharing: [MPS], addMpsConfig: true,"
            " capacity: {memory: 8Gi}}"
        ],
        "spec.dra.deviceClasses[0].addMpsConfig: true on a class with capacity ceilings:"
        " NVIDIA's driver refuses MPS where it shares devices by capacity; leave it unset or"
        " false",
        id="adding-mps-where-devices-are-shared-by-capacity",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, allowWholeDevice: sometimes}"],
        "spec.dra.deviceClasses[0].allowWholeDevice: Input should be a valid boolean, unable to"
        " interpret input",
        id="whole-device-not-a-boolean",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, sharing: [MPS], mps: {maxActiveThreadPercentage: 0}}"],
        "spec.dra.deviceClasses[0].mps.maxActiveThreadPercentage: Input should be greater than"
        " or equal to 1",
        id="a-thread-ceiling-of-0",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, alowed: true}"],
        "spec.dra.deviceClasses[0].alowed: unknown field: did you mean allowed? (unknown fields"
        " are refused, not ignored)",
        id="a-typo-in-a-field",
    ),
    pytest.param(
        ["{name: nvidia.com/gpu, allowed: true}"],
        "spec.dra.deviceClasses[0].name: 'nvidia.com/gpu' is not a DNS-1123 subdomain"
        " (lower-case letters, digits, '-' and '.', each part starting and ending with a letter"
        " or digit, at most 253 characters)",
        id="the-device-plugins-resource-for-a-class",
    ),
]


@pytest.mark.parametrize(("classes", "problem"), ERRORS)
def test_what_the_server_refuses_in_a_dra_section_is_an_error_of_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], classes: list[str], problem: str
) -> None:
    directory, path = one_file(tmp_path, dra(*classes))
    code, out, err = check(capsys, str(directory))
    assert (code, out) == (1, [])
    assert err == [f"error: {path}: {problem}", f"{directory}: 1 problem"]
    load = policies.FileLoad.of(path.read_text(), str(path))
    assert (load.policies, load.problems) == ((), (f"{path}: {problem}",))


def test_every_problem_of_a_dra_section_comes_in_one_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = dra(
        "{name: gpu.nvidia.com, maxDevicesPerRequest: 0, capacity: {memory: 8GB8}}",
        "{name: gpu.nvidia.com}",
    )
    directory, path = one_file(tmp_path, text)
    _, _, err = check(capsys, str(directory))
    assert err == [
        f"error: {path}: spec.dra.deviceClasses[0].maxDevicesPerRequest: Input should be greater"
        " than or equal to 1",
        f"error: {path}: spec.dra.deviceClasses[0].capacity.memory: '8GB8' is not a quantity"
        " (the API server's grammar: a number, optional sign, optional suffix such as 1, 500m,"
        " 2Gi, 1e3)",
        f"error: {path}: spec.dra.deviceClasses: two entries for class 'gpu.nvidia.com'",
        f"{directory}: 3 problems",
    ]


# --------------------------------------------------------------------------- warnings

CEILING = "mps: {maxActiveThreadPercentage: 50, maxPinnedMemoryMiB: 8192}"
RULE = "(rule dra-mps-limits)"

# (the classes, the profiles section, the warnings after `<file>: `). The server loads each.
# The node class is MPS, with the ceilings of PROFILES; where a profile is above them, the
# policy's node class is time-slicing (the profiles then size the DRA class alone).
WARNINGS = [
    pytest.param(
        [
            "{name: gpu.nvidia.com, allowed: true, sharing: [TimeSlicing],"
            " mps: {maxActiveThreadPercentage: 50}}"
        ],
        PROFILES,
        [
            "spec.dra.deviceClasses[0].mps: class gpu.nvidia.com does not allow MPS (sharing:"
            " [TimeSlicing]), so its MPS ceilings limit nothing; add MPS to sharing, or remove"
            " them"
        ],
        id="ceilings-without-mps",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, allowed: true, sharing: [MPS]}"],
        "",
        [
            "spec.dra.deviceClasses[0].sharing: class gpu.nvidia.com allows MPS with no ceiling,"
            " and the policy has no profile: an MPS configuration may set any limits or none, and"
            " a request with none gets none; set mps.maxActiveThreadPercentage and"
            " mps.maxPinnedMemoryMiB, or add profiles"
        ],
        id="mps-sized-by-nothing",
    ),
    pytest.param(
        [f"{{name: gpu.nvidia.com, allowed: true, sharing: [MPS], {CEILING}}}"],
        "profiles:\n  small: {activeThreadPercentage: 10}\n"
        "  big: {activeThreadPercentage: 75, pinnedMemoryMiB: 4096}\ndefaultProfile: big\n",
        [
            f"spec.defaultProfile: big is above the MPS ceiling of DRA class gpu.nvidia.com (50% /"
            " 8192 MiB): in claims that name no profile, the webhook refuses the requests of it"
            f" that have no MPS configuration {RULE}; raise the ceiling, or lower the profile"
        ],
        id="the-default-profile-above-the-ceiling",
    ),
    pytest.param(
        [f"{{name: gpu.nvidia.com, allowed: true, sharing: [MPS], {CEILING}}}"],
        "profiles:\n  small: {activeThreadPercentage: 10}\n"
        "  big: {pinnedMemoryMiB: 16384}\n  huge: {activeThreadPercentage: 90}\n"
        "defaultProfile: small\n",
        [
            "spec.dra.deviceClasses[0].mps: profiles big, huge are above the MPS ceiling of class"
            " gpu.nvidia.com (50% / 8192 MiB): in claims that name them, the webhook refuses the"
            f" requests of it that have no MPS configuration {RULE}; raise the ceiling, or lower"
            " the profiles"
        ],
        id="other-profiles-above-the-ceiling",
    ),
    pytest.param(
        [
            "{name: mig.nvidia.com, allowed: true, sharing: [MPS],"
            " mps: {maxActiveThreadPercentage: 5}}"
        ],
        PROFILES,
        [
            "spec.dra.deviceClasses[0].mps: every profile is above the MPS ceiling of class"
            " mig.nvidia.com (5%): the webhook refuses every request of it that has no MPS"
            f" configuration of its own {RULE}; raise the ceiling, or lower the profiles"
        ],
        id="every-profile-above-the-ceiling",
    ),
    # Profiles above the ceilings of a class the webhook adds no configuration to refuse
    # nothing (a request without one is the whole device, or refused as such).
    pytest.param(
        [
            "{name: mig.nvidia.com, allowed: true, sharing: [MPS], addMpsConfig: false,"
            " mps: {maxActiveThreadPercentage: 5}}"
        ],
        PROFILES,
        [],
        id="profiles-above-the-ceiling-of-a-class-not-sized",
    ),
    pytest.param(
        [
            f"{{name: gpu.nvidia.com, allowed: true, sharing: [MPS], {CEILING},"
            " capacity: {memory: 8Gi}}"
        ],
        PROFILES,
        [
            "spec.dra.deviceClasses[0].capacity: class gpu.nvidia.com allows MPS and caps"
            " consumable capacity (memory): where NVIDIA's driver shares GPUs by capacity (its"
            ' ConsumableShares feature gate), it refuses MPS claims on the node ("MPS sharing is'
            ' not supported when consumable shares is enabled"); allow one or the other'
        ],
        id="capacity-ceilings-with-mps",
    ),
    pytest.param(
        ["{name: gpu.nvida.com, allowed: true}"],
        PROFILES,
        [
            "spec.dra.deviceClasses[0].name: gpu.nvida.com is no class of NVIDIA's GPU DRA"
            " driver; did you mean gpu.nvidia.com? (this entry governs only a class of its own"
            " name; gpu.nvidia.com is not listed, so closed)"
        ],
        id="a-misspelt-class",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, allowed: true}", "{name: gpu.nvidia.co, allowed: true}"],
        PROFILES,
        [
            "spec.dra.deviceClasses[1].name: gpu.nvidia.co is no class of NVIDIA's GPU DRA"
            " driver; did you mean gpu.nvidia.com? (this entry governs only a class of its own"
            " name)"
        ],
        id="a-misspelt-class-beside-the-right-one",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, allowed: true}", "{name: mig.nvidia.co, allowed: true}"],
        PROFILES,
        [
            "spec.dra.deviceClasses[1].name: mig.nvidia.co is no class of NVIDIA's GPU DRA"
            " driver; did you mean mig.nvidia.com? (this entry governs only a class of its own"
            " name; mig.nvidia.com is not listed, so closed)"
        ],
        id="a-misspelt-mig-class",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, allowed: true, driver: gpu.nvidia.co}"],
        PROFILES,
        [
            "spec.dra.deviceClasses[0].driver: gpu.nvidia.co is not NVIDIA's driver; did you mean"
            " gpu.nvidia.com? (configurations for another driver are not the ones NVIDIA's reads)"
        ],
        id="a-misspelt-driver",
    ),
    pytest.param(
        ["{name: mig.nvidia.com, allowed: true, driver: example.com}"],
        PROFILES,
        [
            "spec.dra.deviceClasses[0].driver: mig.nvidia.com is a class of NVIDIA's driver,"
            " gpu.nvidia.com, which reads no configuration for example.com; remove driver"
        ],
        id="another-driver-for-an-nvidia-class",
    ),
    pytest.param(
        ["{name: mig.nvidia.com, allowed: true, configKind: GpuConfig}"],
        PROFILES,
        [
            "spec.dra.deviceClasses[0].configKind: NVIDIA's driver applies MigDeviceConfig to the"
            " devices of mig.nvidia.com and refuses a GpuConfig on the node; remove configKind"
        ],
        id="another-kind-for-an-nvidia-class",
    ),
    # Judged as if open: discover writes classes closed, ready to open.
    pytest.param(
        ["{name: gpu.nvidia.com, sharing: [TimeSlicing], mps: {maxPinnedMemoryMiB: 1024}}"],
        PROFILES,
        [
            "spec.dra.deviceClasses[0].mps: class gpu.nvidia.com does not allow MPS (sharing:"
            " [TimeSlicing]), so its MPS ceilings limit nothing; add MPS to sharing, or remove"
            " them"
        ],
        id="a-closed-class-is-judged-as-if-open",
    ),
]


@pytest.mark.parametrize(("classes", "profiles", "warnings"), WARNINGS)
def test_what_a_dra_section_says_that_never_works_is_a_warning(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    classes: list[str],
    profiles: str,
    warnings: list[str],
) -> None:
    nodes = T4_MPS if profiles in ("", PROFILES) else T4_TS
    directory, path = one_file(tmp_path, dra(*classes, profiles=profiles, nodes=nodes))
    code, out, err = check(capsys, str(directory))
    assert code == 0
    assert said(err, "warning") == [f"{path}: {w}" for w in warnings]
    assert out[0].startswith(f"ok: policy site ({path})")
    assert policies.load_directory(directory).names == ["site"]


COHERENT = [
    pytest.param([GPU_MPS], PROFILES, id="mps-within-its-ceilings"),
    pytest.param(
        ["{name: gpu.nvidia.com, allowed: true, sharing: [MPS]}"],
        PROFILES,
        id="mps-sized-by-profiles-alone",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, allowed: true, sharing: [MPS], mps: {maxPinnedMemoryMiB: 8192}}"],
        "",
        id="mps-sized-by-a-ceiling-alone",
    ),
    pytest.param(
        ["{name: gpu.nvidia.com, allowed: true, capacity: {memory: 8Gi}}"],
        PROFILES,
        id="capacity-without-mps",
    ),
    # Listing a class of another vendor closes it: that is what listing it is for.
    pytest.param([GPU_MPS, "{name: gpu.example.com}"], PROFILES, id="closing-another-class"),
    # A site's own classes over NVIDIA's devices: no misspelling of NVIDIA's.
    pytest.param(
        [
            GPU_MPS,
            "{name: a100.gpu.nvidia.com, allowed: true}",
            "{name: t4.gpu.nvidia.com, allowed: true}",
        ],
        PROFILES,
        id="a-sites-own-classes",
    ),
    pytest.param(
        ["{name: mig.nvidia.com, allowed: true, configKind: MigDeviceConfig}"],
        PROFILES,
        id="the-kind-nvidia-applies-written-out",
    ),
    pytest.param([], PROFILES, id="no-class-listed"),
]


@pytest.mark.parametrize(("classes", "profiles"), COHERENT)
def test_a_coherent_dra_section_gets_no_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], classes: list[str], profiles: str
) -> None:
    directory, _ = one_file(tmp_path, dra(*classes, profiles=profiles))
    code, _, err = check(capsys, str(directory))
    assert code == 0
    assert said(err, "warning") == []
    assert said(err, "error") == []


def test_profiles_that_size_dra_claims_alone_are_not_said_to_limit_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No MPS node class, but a DRA class that allows MPS: the webhook sizes its requests by
    the profiles, which therefore limit something; not where the class allows no MPS, or
    the webhook adds no MPS configuration to it (addMpsConfig: false)."""
    directory, path = one_file(tmp_path, dra(GPU_MPS, nodes=T4_TS))
    assert said(check(capsys, str(directory))[2], "warning") == []
    for unsized in (
        "{name: gpu.nvidia.com, allowed: true, sharing: [TimeSlicing]}",
        GPU_MPS.removesuffix("}") + ", addMpsConfig: false}",
    ):
        directory, path = one_file(tmp_path, dra(unsized, nodes=T4_TS))
        assert said(check(capsys, str(directory))[2], "warning") == [
            f"{path}: spec.profiles: no node class is mps (nor does the webhook size a DRA class"
            " with them), so no profile limits anything (time-slicing nodes ignore"
            " CUDA_MPS_*); remove them, or add the MPS class they are meant for"
        ]


# --------------------------------------------------------------------------- notes


def test_the_driver_gates_the_sharing_needs_are_noted_once_for_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one_file(tmp_path, dra(GPU_MPS, "{name: mig.nvidia.com, allowed: true, sharing: [MPS]}"))
    other = policy(
        "lab",
        f"nodeClasses: [{T4_TS}]\n{PROFILES}dra:\n  deviceClasses:\n"
        "    - {name: gpu.nvidia.com, allowed: true, sharing: [MPS, TimeSlicing],"
        " mps: {maxActiveThreadPercentage: 50}}\n",
    )
    directory, _ = one_file(tmp_path, other, "lab.yaml")
    code, _, err = check(capsys, str(directory))
    assert code == 0
    assert said(err, "note") == [
        "MPS is allowed on DRA classes (policy lab: gpu.nvidia.com; policy site: gpu.nvidia.com,"
        " mig.nvidia.com): NVIDIA's DRA driver takes it only with its MPSSupport feature gate on"
        " (alpha, off by default); without it, MPS claims fail on the node, those the webhook"
        " gives a profile's MPS configuration too",
        "TimeSlicing is allowed on DRA classes (policy lab: gpu.nvidia.com): NVIDIA's DRA"
        " driver takes it only with its TimeSlicingSettings feature gate on (alpha, off by"
        " default); without it, a claim that configures time-slicing fails on the node (one"
        " with no sharing configuration still gets the driver's default time-slicing)",
    ]
    # After the warnings, on stderr: a note is no problem.
    assert err[-2:] == [f"note: {n}" for n in said(err, "note")]


def test_no_sharing_allowed_no_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory, _ = one_file(tmp_path, dra("{name: gpu.nvidia.com, allowed: true}"))
    assert check(capsys, str(directory))[::2] == (0, [])


def test_the_shipped_policies_pass_with_the_notes_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = check(capsys, str(Path(__file__).resolve().parents[2] / "policies"))
    assert code == 0
    assert [line.split(": ")[0] for line in err] == ["note", "note"]
    assert any("policy dra" in line and "MPSSupport" in line for line in err)


# --------------------------------------------------------------------------- the ok line


def test_the_ok_line_says_which_dra_classes_are_open_and_which_closed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, path = one_file(
        tmp_path,
        dra(GPU_MPS, "{name: gpu.example.com}", "{name: a100.gpu.nvidia.com, allowed: true}"),
    )
    _, out, _ = check(capsys, str(directory))
    assert out == [
        f"ok: policy site ({path}): classes t4-mps; DRA classes allowed: a100.gpu.nvidia.com,"
        " gpu.nvidia.com; closed: compute-domain-daemon.nvidia.com, gpu.example.com,"
        " mig.nvidia.com, vfio.gpu.nvidia.com,"
        " vgpu.gpu.nvidia.com"
    ]


def test_a_policy_without_a_dra_section_says_nothing_of_dra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, path = one_file(tmp_path, policy("site", f"nodeClasses: [{T4_TS}]\n"))
    assert check(capsys, str(directory))[1] == [f"ok: policy site ({path}): classes t4"]


# --------------------------------------------------------------------------- misspellings


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("gpu.nvida.com", "gpu.nvidia.com"),
        ("gpu.nvidia.co", "gpu.nvidia.com"),
        ("gpu-nvidia.com", "gpu.nvidia.com"),
        ("gpus.nvidia.com", "gpu.nvidia.com"),
        ("gpu.nvidai.com", "gpu.nvidia.com"),
        ("mig.nvida.com", "mig.nvidia.com"),
        ("vfio.gpu.nvidia.co", "vfio.gpu.nvidia.com"),
        ("vgpu.gpu.nvida.com", "vgpu.gpu.nvidia.com"),
        ("gpu.nvidia.com", None),
        ("a100.gpu.nvidia.com", None),
        ("t4.gpu.nvidia.com", None),
        ("gpu.example.com", None),
        ("gpu.intel.com", None),
        ("compute-domain-default-channel.nvidia.com", None),
    ],
)
def test_a_name_two_characters_from_nvidias_is_taken_for_a_misspelling(
    name: str, meant: str | None
) -> None:
    assert checking.misspelling(name, names.DRA_NVIDIA_CLASSES) == meant


# --------------------------------------------------------------------------- DeviceClasses


def device_classes(tmp_path: Path, *objects: dict[str, Any], name: str = "dc.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))
    return path


def test_a_device_class_that_hands_out_gpus_and_no_policy_governs_is_warned_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NVIDIA's classes are governed by every policy, listed or not; the admin's own A100
    class and a class with no selector are not; the IMEX channel and the NIC classes hand
    out no GPU."""
    path = tmp_path / "dc.json"
    path.write_text(json.dumps(dra_objects.device_class_list()))
    code, out, err = check(capsys, str(REPO / "policies"), "--device-classes", str(path))
    assert code == 0
    fix = (
        "and no policy's dra section lists it: the webhook is sent none of its claims, so they"
        " are never reviewed. List it in a policy's dra.deviceClasses (it stays closed unless"
        " allowed: true), then render the webhook configurations again"
    )
    assert said(err, "warning") == [
        f"{path}: DeviceClass a100.example.com can hand out GPUs (its selectors name"
        f" gpu.nvidia.com), {fix}",
        f"{path}: DeviceClass everything.example.com can hand out GPUs (it has no selector, so"
        f" it matches every device of every driver), {fix}",
    ]
    assert out[-1] == (
        f"ok: {path}: 7 DeviceClasses, 5 that can hand out GPUs: 3 governed, 2 not (see the"
        " warnings)"
    )


@pytest.mark.parametrize(
    ("cls", "listed", "warned"),
    [
        # Listed by a policy (closed there): governed.
        (dra_objects.device_class("a100.example.com"), "{name: a100.example.com}", False),
        # A selector on the attributes of NVIDIA's driver, without naming the driver.
        (
            dra_objects.device_class(
                "h100.example.com",
                "device.attributes['gpu.nvidia.com'].productName.contains('H100')",
            ),
            GPU_MPS,
            True,
        ),
        # The driver a policy names for a class of its own is a GPU driver too.
        (
            dra_objects.device_class("t4.example.com", 'device.driver == "gpu.example.com"'),
            "{name: l4.example.com, driver: gpu.example.com}",
            True,
        ),
        # A configuration of NVIDIA's driver, whatever the selector says.
        (
            {
                **dra_objects.device_class("shared.example.com", "device.capacity.size() > 0"),
                "spec": {
                    "selectors": [{"cel": {"expression": "device.capacity.size() > 0"}}],
                    "config": [
                        {
                            "opaque": {
                                "driver": "gpu.nvidia.com",
                                "parameters": {
                                    "apiVersion": "resource.nvidia.com/v1beta1",
                                    "kind": "GpuConfig",
                                },
                            }
                        }
                    ],
                },
            },
            GPU_MPS,
            True,
        ),
        # Another driver's devices only.
        (dra_objects.device_class("nic.example.com"), GPU_MPS, False),
    ],
    ids=["listed", "attributes", "a-policys-driver", "configuration", "another-driver"],
)
def test_what_makes_a_device_class_one_of_gpus(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    cls: dict[str, Any],
    listed: str,
    warned: bool,
) -> None:
    for version in kube.DRA_VERSIONS:
        kubernetes_validate.validate(cls, version, strict=True)
    directory, _ = one_file(tmp_path, dra(listed))
    path = device_classes(tmp_path, cls)
    code, _, err = check(capsys, str(directory), "--device-classes", str(path))
    assert code == 0, err
    warnings = [w for w in said(err, "warning") if "DeviceClass" in w]
    assert len(warnings) == (1 if warned else 0), warnings
    if warned:
        assert warnings[0].startswith(f"{path}: DeviceClass {cls['metadata']['name']} can hand")


def test_device_classes_in_yaml_from_the_variable_one_object_after_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "dc.yaml"
    path.write_text(
        yaml.safe_dump_all(
            [
                dra_objects.device_class("gpu.nvidia.com"),
                dra_objects.device_class("a100.example.com"),
            ]
        )
    )
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_DEVICE_CLASSES", str(path))
    code, out, err = check(capsys, str(REPO / "policies"))
    assert code == 0
    assert [w.split(" can hand")[0] for w in said(err, "warning")] == [
        f"{path}: DeviceClass a100.example.com"
    ]
    assert out[-1] == (
        f"ok: {path}: 2 DeviceClasses, 2 that can hand out GPUs: 1 governed, 1 not (see the"
        " warnings)"
    )


@pytest.mark.parametrize(
    ("objects", "error"),
    [
        (
            [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}],
            "holds no DeviceClass"
            " object (expected the output of `kubectl get deviceclasses -o json`)",
        ),
        (
            [{**dra_objects.device_class("a100.example.com"), "spec": {"selectors": {"cel": {}}}}],
            "DeviceClass/a100.example.com: spec.selectors is not a list",
        ),
        (
            [
                {
                    **dra_objects.device_class("a100.example.com"),
                    "spec": {"selectors": [{"cel": {"expression": 1}}]},
                }
            ],
            "DeviceClass/a100.example.com: spec.selectors[0].cel.expression is not a string",
        ),
        (
            [
                dra_objects.device_class("gpu.nvidia.com"),
                dra_objects.device_class("gpu.nvidia.com"),
            ],
            "DeviceClass/gpu.nvidia.com: appears twice in the dump",
        ),
    ],
    ids=["no-device-class", "selectors-not-a-list", "expression-not-a-string", "twice"],
)
def test_a_device_class_file_that_cannot_be_used_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], objects: list[dict[str, Any]], error: str
) -> None:
    path = device_classes(tmp_path, *objects)
    code, out, err = check(capsys, str(REPO / "policies"), "--device-classes", str(path))
    assert (code, out) == (2, [])
    assert err == [f"error: {path}: {error}"]


def test_device_classes_are_not_judged_while_a_policy_does_not_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file that does not load may be the one that lists the class."""
    directory, _ = one_file(tmp_path, dra("{name: a100.example.com, alowed: true}"))
    path = device_classes(tmp_path, dra_objects.device_class("a100.example.com"))
    code, _, err = check(capsys, str(directory), "--device-classes", str(path))
    assert code == 1
    assert (
        f"warning: {path}: which DeviceClasses no policy governs is not judged while a"
        in " ".join(err)
    )
