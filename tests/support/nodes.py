"""Nodes as gpu-feature-discovery and the GPU Operator label them, and node dumps as
`kubectl get nodes` writes them: what `discover` and `policy check --nodes` read
(tests/tools/test_discover.py, tests/tools/test_cli.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class Gpu:
    """One GPU resource of a node, as the device plugin shares it and GFD labels it."""

    product: str
    strategy: str = "none"
    replicas: int = 1
    renamed: bool = True
    count: int = 1
    memory: int | None = 15360
    resource: str = "nvidia.com/gpu"

    @property
    def shared(self) -> bool:
        return self.strategy != "none"

    def labels(self) -> dict[str, str]:
        r = self.resource
        # GFD's getProductName: -SHARED only when shared and not renamed.
        suffix = "-SHARED" if self.shared and not self.renamed else ""
        out = {
            f"{r}.product": self.product + suffix,
            f"{r}.replicas": str(self.replicas),
            f"{r}.sharing-strategy": self.strategy,
            f"{r}.count": str(self.count),
        }
        if self.memory is not None:
            out[f"{r}.memory"] = str(self.memory)
        return out

    def capacity(self) -> dict[str, str]:
        # The GPU Operator's docs: renamed, `nvidia.com/gpu: 0` stays beside `.shared: N*R`.
        if self.shared and self.renamed:
            return {self.resource: "0", f"{self.resource}.shared": str(self.count * self.replicas)}
        return {self.resource: str(self.count * max(self.replicas, 0))}


def node(
    name: str,
    *gpus: Gpu,
    labels: dict[str, str] | None = None,
    capacity: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    taints: list[dict[str, str]] | None = None,
    status: bool = True,
) -> dict[str, Any]:
    """A Node as `kubectl get nodes -o json` prints it, labelled by GFD for `gpus`."""
    lab = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    cap = {"cpu": "16", "memory": "65842340Ki", "pods": "110"}
    if gpus:
        lab |= {
            "nvidia.com/gpu.present": "true",  # the GPU Operator's
            "nvidia.com/cuda.driver-version.full": "550.107.02",
            "nvidia.com/mig.capable": "false",
            "nvidia.com/mps.capable": str(any(g.strategy == "mps" for g in gpus)).lower(),
        }
    for g in gpus:
        lab |= g.labels()
        cap |= g.capacity()
    lab |= labels or {}
    cap |= capacity or {}
    for key in drop:
        lab.pop(key)
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": name, "labels": lab}}
    if taints is not None:
        obj["spec"] = {"taints": taints}
    if status:
        obj["status"] = {"capacity": cap, "allocatable": dict(cap)}
    return obj


MIXED = {"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.capable": "true"}
SINGLE = {"nvidia.com/mig.strategy": "single", "nvidia.com/mig.capable": "true"}
# A MIG-enabled A100 under the mixed strategy: its nvidia.com/gpu labels say replicas 0.
A100_PARENT = Gpu("A100-SXM4-80GB", replicas=0, memory=81920)


def mig(profile: str, strategy: str = "time-slicing", replicas: int = 2, *, renamed: bool = True,
        count: int = 7, memory: int = 9856) -> Gpu:
    return Gpu(f"A100-SXM4-80GB-MIG-{profile}", strategy, replicas, renamed=renamed, count=count,
               memory=memory, resource=f"nvidia.com/mig-{profile}")


T4_MPS = Gpu("Tesla-T4", "mps", 4)
T4_TS = Gpu("Tesla-T4", "time-slicing", 4)
A10G_TS = Gpu("NVIDIA-A10G", "time-slicing", 4, memory=23028)
L4_MPS = Gpu("NVIDIA-L4", "mps", 2, renamed=False, memory=23034)


# A cluster of three teams' pools, as a new admin labels them: A100s shared by MPS (one node with
# two GPUs), T4s time-sliced without renaming, whole H100s; and a GPU node of no pool.
A100_MPS = Gpu("NVIDIA-A100-SXM4-80GB", "mps", 4, memory=81920)
T4_TS_NOT_RENAMED = Gpu("Tesla-T4", "time-slicing", 4, renamed=False)
H100 = Gpu("NVIDIA-H100-80GB-HBM3", count=8, memory=81559)
TEAMS = [
    node("a100-1", A100_MPS, labels={"team": "a", "gpu-pool": "a100"}),
    node("a100-2", Gpu("NVIDIA-A100-SXM4-80GB", "mps", 4, count=2, memory=81920),
         labels={"team": "a", "gpu-pool": "a100"}),
    node("t4-1", T4_TS_NOT_RENAMED, labels={"team": "b"}),
    node("t4-2", T4_TS_NOT_RENAMED, labels={"team": "b"}),
    node("h100-1", H100, labels={"team": "c", "gpu-pool": "h100"},
         taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
    node("h100-2", H100, labels={"team": "c", "gpu-pool": "h100"}),
    node("v100-1", Gpu("Tesla-V100")),
    node("cpu-1", labels={"team": "a"}),
]
# One policy per team.
TEAM_POOLS = ("team-a=team=a,gpu-pool in (a100)", "team-b=team=b", "team-c=gpu-pool=h100")


def write(tmp_path: Path, nodes: list[dict[str, Any]], name: str = "nodes.json") -> Path:
    """`nodes` as `kubectl get nodes -o json` (or `-o yaml`, by the name) writes them."""
    path = tmp_path / name
    listing = {"apiVersion": "v1", "kind": "List", "items": nodes, "metadata": {}}
    if name.endswith(".json"):
        path.write_text(json.dumps(listing, indent=2))
    else:
        path.write_text(yaml.safe_dump(listing))
    return path
