"""ResourceSlices as NVIDIA's GPU DRA driver publishes them, and slice dumps as `kubectl get
resourceslices -o json` writes them: what `discover --slices` reads
(tests/tools/test_discover_dra.py).

The devices follow the driver's reference "ResourceSlice device attributes" (the attributes
`type`, `productName`, a MIG device's `profile`, the capacity `memory`, a VFIO device's
`addressableMemory`); each slice is a valid `resource.k8s.io/v1` object to Kubernetes' schema,
checked as it is built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from webhook.policy import names

SCHEMAS = ("1.34.0", kubernetes_validate.latest_version())
A100 = "NVIDIA A100-SXM4-40GB"
A100_PCIE = "NVIDIA A100-PCIE-40GB"
H100 = "NVIDIA H100 80GB HBM3"


def _attributes(**values: str | int | bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, bool):
            out[key] = {"bool": value}
        elif isinstance(value, int):
            out[key] = {"int": value}
        elif key.endswith("Version") or key == "cudaComputeCapability":
            out[key] = {"version": value}
        else:
            out[key] = {"string": value}
    return out


def _common(index: int, product: str, architecture: str) -> dict[str, Any]:
    attributes = _attributes(
        addressingMode="HMM",
        architecture=architecture,
        brand="Nvidia",
        cudaComputeCapability="9.0.0" if architecture == "Hopper" else "8.0.0",
        cudaDriverVersion="13.0.0",
        driverVersion="580.126.20",
        productName=product,
    )
    attributes["resource.kubernetes.io/pciBusID"] = {"string": f"0000:{0x65 + index:02x}:00.0"}
    attributes["resource.kubernetes.io/pcieRoot"] = {"string": f"pci0000:{0x64 + index:02x}"}
    attributes["resource.kubernetes.io/numaNode"] = {"int": index // 4}
    return attributes


def gpu(
    index: int,
    product: str = A100,
    memory: str = "40Gi",
    *,
    architecture: str = "Ampere",
    multiple: bool = False,
) -> dict[str, Any]:
    """A full GPU (`type: gpu`), as the driver's reference shows one."""
    attributes = _common(index, product, architecture) | _attributes(
        type="gpu", uuid=f"GPU-2fa81118-5a5f-aa66-7660-471eed40718{index}"
    )
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": attributes,
        "capacity": {"memory": {"value": memory}},
    }
    if multiple:
        # The driver's ConsumableShares, `memory` mode: a claim takes what it asks for.
        device["allowMultipleAllocations"] = True
        device["capacity"]["memory"]["requestPolicy"] = {
            "default": memory,
            "validRange": {"min": "1Mi", "step": "1Mi"},
        }
    return device


def mig(index: int, profile: str = "1g.5gb", memory: str = "4864Mi") -> dict[str, Any]:
    """A MIG device (`type: mig`) of GPU 0, as the driver's reference shows one."""
    attributes = _common(0, A100_PCIE, "Ampere") | _attributes(
        type="mig",
        profile=profile,
        parentUUID="GPU-2fa81118-5a5f-aa66-7660-471eed407181",
        uuid=f"MIG-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6{index}",
    )
    return {
        "name": f"gpu-0-mig-{profile}-{index}",
        "attributes": attributes,
        "capacity": {
            "copyEngines": {"value": "1"},
            "decoders": {"value": "0"},
            "encoders": {"value": "0"},
            "jpegEngines": {"value": "0"},
            "memory": {"value": memory},
            "multiprocessors": {"value": "14"},
            "ofaEngines": {"value": "0"},
        },
    }


def vfio(index: int) -> dict[str, Any]:
    """A VFIO passthrough device (`type: vfio`), as the driver's reference shows one."""
    return {
        "name": f"gpu-vfio-{index}",
        "attributes": _attributes(
            deviceID="0x20b0",
            productName=A100_PCIE,
            type="vfio",
            uuid=f"GPU-2fa81118-5a5f-aa66-7660-471eed40718{index}",
            vendorID="0x10de",
        ),
        "capacity": {"addressableMemory": {"value": "40Gi"}},
    }


def nic(name: str) -> dict[str, Any]:
    """A network interface of another DRA driver: none of the webhook's business."""
    return {"name": name, "attributes": {"ifName": {"string": name}, "rdma": {"bool": True}}}


def resource_slice(
    node_name: str,
    *devices: dict[str, Any],
    driver: str = names.DRA_DRIVER,
    generation: int = 1,
    count: int = 1,
    suffix: str = "x7k2p",
) -> dict[str, Any]:
    """A ResourceSlice as a kubelet plugin publishes it: one pool per node, named after it."""
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node_name}-{driver}-{suffix}",
            "generateName": f"{node_name}-{driver}-",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node_name,
                    "uid": "6f1c1a52-0a39-4a4e-9d5b-0c3e3f6c2b1d",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": count},
            "devices": list(devices),
        },
    }
    for version in SCHEMAS:
        kubernetes_validate.validate(obj, version, strict=True)
    return obj


def listing(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(items), "metadata": {}}


def write_slices(tmp_path: Path, *slices: dict[str, Any], name: str = "slices.json") -> Path:
    """`slices` as `kubectl get resourceslices -o json` (or `-o yaml`, by the name) writes
    them."""
    path = tmp_path / name
    data = listing(*slices)
    path.write_text(json.dumps(data, indent=2) if name.endswith(".json") else yaml.safe_dump(data))
    return path


# GPUs, MIG devices and VFIO passthrough GPUs of NVIDIA's driver on five nodes, and a NIC of
# another driver.
CLUSTER = [
    resource_slice("a100-1", *(gpu(i) for i in range(4))),
    resource_slice("a100-2", *(gpu(i) for i in range(4))),
    resource_slice("mig-1", *(mig(i) for i in range(7))),
    resource_slice("h100-1", *(gpu(i, H100, "81559Mi", architecture="Hopper") for i in range(8))),
    resource_slice("vm-1", vfio(0), vfio(1)),
    resource_slice("a100-1", nic("eth1"), nic("eth2"), driver="nic.example.com"),
]
