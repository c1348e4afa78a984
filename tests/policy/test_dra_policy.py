"""Issue 22, first step: a policy's `dra` section (the GPU device classes under dynamic
resource allocation and what requests of them may be) is read and checked like the rest of a
policy: `policy check` takes a valid one and names the field of a wrong one. Nothing reviews
claims with it yet."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook import cli
from webhook.policy import policies

ROOT = Path(__file__).resolve().parents[2]

GPU_CLASS: dict[str, Any] = {
    "name": "gpu.nvidia.com",
    "allowed": True,
    "maxDevicesPerRequest": 1,
    "sharing": ["MPS"],
    "mps": {"maxActiveThreadPercentage": 50, "maxPinnedMemoryMiB": 8192},
}


def _policy_dir(tmp_path: Path, dra: dict[str, Any]) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    doc = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
    doc["spec"]["dra"] = dra
    (directory / "default.yaml").write_text(yaml.safe_dump(doc))
    return directory


def test_a_dra_section_is_read(tmp_path: Path) -> None:
    directory = _policy_dir(tmp_path, {"deviceClasses": [GPU_CLASS, {"name": "mig.nvidia.com"}]})
    loaded = policies.load_directory(directory)
    assert loaded.get("default") is not None
    doc = yaml.safe_load((directory / "default.yaml").read_text())
    spec = policies.PolicyDocument.model_validate(doc).spec
    assert spec.dra is not None
    gpu, mig = spec.dra.device_classes
    assert (gpu.allowed, gpu.sharing, gpu.mps.max_active_thread_percentage) == (True, ["MPS"], 50)
    # Listed, and closed: nothing opens by being named.
    assert (mig.allowed, mig.sharing, mig.max_devices_per_request) == (False, [], 1)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"sharing": ["Mps"]}, "spec.dra.deviceClasses[0].sharing[0]"),
        (
            {"mps": {"maxActiveThreadPercentage": 101}},
            "spec.dra.deviceClasses[0].mps.maxActiveThreadPercentage",
        ),
        ({"maxDevicesPerRequest": 0}, "spec.dra.deviceClasses[0].maxDevicesPerRequest"),
        ({"name": "Not_A_Class"}, "spec.dra.deviceClasses[0].name"),
        ({"alowed": True}, "spec.dra.deviceClasses[0].alowed"),
    ],
    ids=["strategy-case", "thread-percentage", "no-devices", "class-name", "typo"],
)
def test_policy_check_names_the_field_of_a_wrong_dra_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], field: str
) -> None:
    directory = _policy_dir(tmp_path, {"deviceClasses": [{**GPU_CLASS, **change}]})
    assert cli.main(["policy", "check", str(directory)]) == 1
    err = capsys.readouterr().err
    assert f"{field}:" in err, err
    shutil.rmtree(directory)


@pytest.mark.parametrize(
    ("cls", "adds"),
    [
        (GPU_CLASS, True),
        ({**GPU_CLASS, "sharing": ["TimeSlicing"]}, False),
        ({**GPU_CLASS, "capacity": {"memory": "8Gi"}}, False),
        ({**GPU_CLASS, "addMpsConfig": False}, False),
        ({**GPU_CLASS, "addMpsConfig": True}, True),
    ],
    ids=["mps", "no-mps", "capacity", "off", "on"],
)
def test_a_section_written_before_the_new_fields_keeps_its_meaning(
    tmp_path: Path, cls: dict[str, Any], adds: bool
) -> None:
    """Whole devices allowed, no bound per claim, and the profile's MPS configuration added
    where the class allows MPS and shares no capacity: what a dra section said before
    allowWholeDevice, addMpsConfig and maxDevicesPerClaim existed."""
    directory = _policy_dir(tmp_path, {"deviceClasses": [cls]})
    compiled = policies.load_directory(directory).policies["default"].dra
    assert compiled is not None
    gpu = compiled.classes["gpu.nvidia.com"]
    assert (gpu.allow_whole_device, gpu.max_devices_per_claim, gpu.add_mps) == (True, None, adds)
    closed = policies.closed_dra_class("vfio.gpu.nvidia.com")
    assert (closed.allowed, closed.add_mps, closed.max_devices_per_claim) == (False, False, None)
