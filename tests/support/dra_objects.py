"""Real `resource.k8s.io/v1` ResourceClaims and ResourceClaimTemplates, and the pods that
use them, written after the documented examples of NVIDIA's GPU DRA driver.

Each object says in a comment which documented example it follows (the examples are in
`NVIDIA/k8s-dra-driver-gpu` `demo/specs/quickstart/v1/` and
`kubernetes-sigs/dra-driver-nvidia-gpu` `site/content/docs/` and `demo/specs/`). Where an
example is written for `resource.k8s.io/v1beta1` (the flat request fields), it is written here
as v1 writes it (`exactly`), the form the webhook receives (its rules name v1 only; the API
server converts older versions). Every object is valid to the API server's schema
(`kubernetes-validate`, strict; tests/engine/test_dra_claims.py checks each), so what the
webhook says of it is what it says of a real `kubectl apply`.

`obj(name)` returns a fresh copy: a test may change it freely.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from tests.support import kube

# The namespace of the objects that are no documented example's own.
NAMESPACE = "team-a"

_OBJECTS: dict[str, str] = {
    # ------------------------------------------------------------------ full GPUs
    # NVIDIA's MPS example, as written (demo/specs/quickstart/v1/gpu-test-mps.yaml): one
    # GPU, shared by two containers through MPS, at most 50% of the threads and 10Gi of
    # pinned memory each.
    "mps-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-test-mps
  name: shared-gpu
spec:
  spec:
    devices:
      requests:
      - name: mps-gpu
        exactly:
          deviceClassName: gpu.nvidia.com
      config:
      - requests: ["mps-gpu"]
        opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing:
              strategy: MPS
              mpsConfig:
                defaultActiveThreadPercentage: 50
                defaultPinnedDeviceMemoryLimit: 10Gi
""",
    # The pod of the same example: both containers name the claim's request.
    "mps-pod": """
apiVersion: v1
kind: Pod
metadata:
  namespace: gpu-test-mps
  name: test-pod
  labels:
    app: pod
spec:
  containers:
  - name: mps-ctr0
    image: nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04
    command: ["bash", "-c"]
    args: ["trap 'exit 0' TERM; /tmp/sample --benchmark --numbodies=4226000 & wait"]
    resources:
      claims:
      - name: shared-gpu
        request: mps-gpu
  - name: mps-ctr1
    image: nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04
    command: ["bash", "-c"]
    args: ["trap 'exit 0' TERM; /tmp/sample --benchmark --numbodies=4226000 & wait"]
    resources:
      claims:
      - name: shared-gpu
        request: mps-gpu
  resourceClaims:
  - name: shared-gpu
    resourceClaimTemplateName: shared-gpu
  tolerations:
  - key: "nvidia.com/gpu"
    operator: "Exists"
    effect: "NoSchedule"
""",
    # NVIDIA's count example (demo/specs/quickstart/gpu-test-count.yaml, written there for
    # v1beta1 with `count: 2` directly under the request): one container, two GPUs.
    "count-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-test1
  name: double-gpu
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          count: 2
""",
    "count-pod": """
apiVersion: v1
kind: Pod
metadata:
  namespace: gpu-test1
  name: gpu-pod
  labels:
    app: pod
spec:
  containers:
  - name: ctr0
    image: ubuntu:22.04
    command: ["bash", "-c"]
    args: ["nvidia-smi; trap 'exit 0' TERM; sleep 9999 & wait"]
    resources:
      claims:
      - name: twogpus
  resourceClaims:
  - name: twogpus
    resourceClaimTemplateName: double-gpu
  tolerations:
  - key: "nvidia.com/gpu"
    operator: "Exists"
    effect: "NoSchedule"
""",
    # "Request any GPU" of the driver's guide (site/content/docs/guides/gpu-allocation/
    # allocating-gpus.md), and its pod.
    "single-gpu-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-example
  name: single-gpu
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
""",
    "gpu-pod": """
apiVersion: v1
kind: Pod
metadata:
  namespace: gpu-example
  name: gpu-pod
spec:
  containers:
  - name: workload
    image: ubuntu:22.04
    command: ["bash", "-c"]
    args: ["nvidia-smi -L; sleep 9999"]
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: single-gpu
  tolerations:
  - key: "nvidia.com/gpu"
    operator: "Exists"
    effect: "NoSchedule"
""",
    # The same request as a ResourceClaim of its own, which pods share by naming it
    # (`resourceClaimName`): the guide's template, as the claim the control plane makes.
    "single-gpu-claim": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  namespace: gpu-example
  name: single-gpu
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
""",
    # "Select a GPU by product name" (allocating-gpus.md): a selector on productName.
    "a100-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-example
  name: a100-gpu
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel:
              expression: |
                device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$')
""",
    # "Select a GPU by memory size" (allocating-gpus.md): a selector on the memory capacity.
    "large-gpu-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-example
  name: large-gpu
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel:
              expression: |
                device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity("40Gi"))
""",
    # "Combine attribute and capacity selectors" (allocating-gpus.md): a Hopper with more
    # than 80Gi.
    "hopper-80g-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-example
  name: hopper-80g-gpu
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel:
              expression: |
                device.attributes['gpu.nvidia.com'].architecture == 'Hopper'
                &&
                device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity("80Gi"))
""",
    # NVIDIA's time-slicing and MPS example (demo/specs/quickstart/v1/gpu-test5.yaml): two
    # GPUs, one time-sliced with the Long interval, one shared through MPS at 50% and 10Gi.
    "multiple-gpus-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-test5
  name: multiple-gpus
spec:
  spec:
    devices:
      requests:
      - name: ts-gpu
        exactly:
          deviceClassName: gpu.nvidia.com
      - name: mps-gpu
        exactly:
          deviceClassName: gpu.nvidia.com
      config:
      - requests: ["ts-gpu"]
        opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing:
              strategy: TimeSlicing
              timeSlicingConfig:
                interval: Long
      - requests: ["mps-gpu"]
        opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing:
              strategy: MPS
              mpsConfig:
                defaultActiveThreadPercentage: 50
                defaultPinnedDeviceMemoryLimit: 10Gi
""",
    # The time-sliced GPU of gpu-test5.yaml alone, as a ResourceClaim: pods that name it
    # share one GPU, time-sliced with the Long interval.
    "timeslicing-claim": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  namespace: gpu-test5
  name: ts-gpu
spec:
  devices:
    requests:
    - name: ts-gpu
      exactly:
        deviceClassName: gpu.nvidia.com
    config:
    - requests: ["ts-gpu"]
      opaque:
        driver: gpu.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          kind: GpuConfig
          sharing:
            strategy: TimeSlicing
            timeSlicingConfig:
              interval: Long
""",
    # The pod of gpu-test5.yaml: two containers on each GPU of the template.
    "multiple-gpus-pod": """
apiVersion: v1
kind: Pod
metadata:
  namespace: gpu-test5
  name: pod0
spec:
  containers:
  - name: ts-ctr0
    image: nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04
    command: ["bash", "-c"]
    args: ["trap 'exit 0' TERM; /tmp/sample --benchmark --numbodies=4226000 & wait"]
    resources:
      claims:
      - name: shared-gpus
        request: ts-gpu
  - name: ts-ctr1
    image: nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04
    command: ["bash", "-c"]
    args: ["trap 'exit 0' TERM; /tmp/sample --benchmark --numbodies=4226000 & wait"]
    resources:
      claims:
      - name: shared-gpus
        request: ts-gpu
  - name: mps-ctr0
    image: nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04
    command: ["bash", "-c"]
    args: ["trap 'exit 0' TERM; /tmp/sample --benchmark --numbodies=4226000 & wait"]
    resources:
      claims:
      - name: shared-gpus
        request: mps-gpu
  - name: mps-ctr1
    image: nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04
    command: ["bash", "-c"]
    args: ["trap 'exit 0' TERM; /tmp/sample --benchmark --numbodies=4226000 & wait"]
    resources:
      claims:
      - name: shared-gpus
        request: mps-gpu
  resourceClaims:
  - name: shared-gpus
    resourceClaimTemplateName: multiple-gpus
  tolerations:
  - key: "nvidia.com/gpu"
    operator: "Exists"
    effect: "NoSchedule"
""",
    # ------------------------------------------------------------------ MIG
    # NVIDIA's MIG example (demo/specs/quickstart/v1/gpu-test4.yaml): four MIG devices of
    # one parent GPU (the constraint), by profile.
    "mig-devices-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-test4
  name: mig-devices
spec:
  spec:
    devices:
      requests:
      - name: mig-1g-5gb-0
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel:
              expression: "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"
      - name: mig-1g-5gb-1
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel:
              expression: "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"
      - name: mig-2g-10gb
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel:
              expression: "device.attributes['gpu.nvidia.com'].profile == '2g.10gb'"
      - name: mig-3g-20gb
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel:
              expression: "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"
      constraints:
      - requests: []
        matchAttribute: "gpu.nvidia.com/parentUUID"
""",
    # The Deployment of gpu-test4.yaml: each container on one of the MIG devices.
    "mig-devices-deployment": """
apiVersion: apps/v1
kind: Deployment
metadata:
  namespace: gpu-test4
  name: pod
  labels:
    app: gpu-test4-pod
spec:
  replicas: 4
  selector:
    matchLabels:
      app: pod
  template:
    metadata:
      labels:
        app: pod
    spec:
      resourceClaims:
      - name: mig-devices
        resourceClaimTemplateName: mig-devices
      containers:
      - name: ctr0
        image: ubuntu:22.04
        command: ["bash", "-c"]
        args: ["nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
        resources:
          claims:
          - name: mig-devices
            request: mig-1g-5gb-0
      - name: ctr1
        image: ubuntu:22.04
        command: ["bash", "-c"]
        args: ["nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
        resources:
          claims:
          - name: mig-devices
            request: mig-1g-5gb-1
      - name: ctr2
        image: ubuntu:22.04
        command: ["bash", "-c"]
        args: ["nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
        resources:
          claims:
          - name: mig-devices
            request: mig-2g-10gb
      - name: ctr3
        image: ubuntu:22.04
        command: ["bash", "-c"]
        args: ["nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
        resources:
          claims:
          - name: mig-devices
            request: mig-3g-20gb
      tolerations:
      - key: "nvidia.com/gpu"
        operator: "Exists"
        effect: "NoSchedule"
""",
    # "Select a MIG profile" of the driver's MIG guide (site/content/docs/guides/
    # gpu-allocation/mig.md).
    "mig-profile-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: mig-example
  name: mig-profile
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel:
              expression: "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"
""",
    # ------------------------------------------------------------------ firstAvailable
    # The prioritized list of the Kubernetes DRA documentation ("Prioritized list": a
    # large device first, else another), with NVIDIA's classes and the selectors of the
    # driver's guides: a full A100 if one is free, else a 3g.40gb MIG device.
    "first-available-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-example
  name: a100-or-mig
spec:
  spec:
    devices:
      requests:
      - name: gpu
        firstAvailable:
        - name: full
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel:
              expression: |
                device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$')
        - name: mig
          deviceClassName: mig.nvidia.com
          selectors:
          - cel:
              expression: "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"
""",
    # The same prioritized list with two GPU subrequests (an A100 if one is free, else any
    # GPU), time-sliced by a configuration that names the request, as a configuration for
    # the whole request is written.
    "first-available-gpus-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-example
  name: a100-or-any
spec:
  spec:
    devices:
      requests:
      - name: gpu
        firstAvailable:
        - name: a100
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel:
              expression: |
                device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$')
        - name: any
          deviceClassName: gpu.nvidia.com
      config:
      - requests: ["gpu"]
        opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing:
              strategy: TimeSlicing
              timeSlicingConfig:
                interval: Long
""",
    # ------------------------------------------------------------------ VFIO
    # NVIDIA's passthrough example (demo/specs/quickstart/v1/gpu-test-vfiopci.yaml).
    "vfio-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-test-vfio
  name: single-gpu
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: vfio.gpu.nvidia.com
""",
    # NVIDIA's passthrough example with an IOMMU configuration (demo/specs/quickstart/v1/
    # gpu-test-vfio-config.yaml): the legacy IOMMU backend, with the IOMMU API device.
    "vfio-config-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-test-vfio
  name: single-gpu-full-vfioconfig
spec:
  spec:
    devices:
      config:
      - opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: VfioDeviceConfig
            iommu:
              backendPolicy: LegacyOnly
              enableAPIDevice: true
        requests:
         - "gpu"
      requests:
      - name: gpu
        exactly:
          deviceClassName: vfio.gpu.nvidia.com
""",
    # ------------------------------------------------------------------ consumable capacity
    # The driver's memory-sharing example (demo/specs/consumable-shares/memory-sharing.yaml,
    # driver gate ConsumableShares, `consumableShares: memory`): each claim consumes 4Gi of
    # a GPU's memory, so several share one GPU.
    "memory-sharing-template": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: gpu-share-memory
  name: gpu-4gi
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          capacity:
            requests:
              memory: 4Gi
""",
    "memory-sharing-deployment": """
apiVersion: apps/v1
kind: Deployment
metadata:
  namespace: gpu-share-memory
  name: memory-sharing
  labels:
    app: memory-sharing
spec:
  replicas: 2
  selector:
    matchLabels:
      app: memory-sharing
  template:
    metadata:
      labels:
        app: memory-sharing
    spec:
      resourceClaims:
      - name: gpu
        resourceClaimTemplateName: gpu-4gi
      containers:
      - name: ctr
        image: ubuntu:22.04
        command: ["bash", "-c"]
        args: ["nvidia-smi -L; echo 'running with 4Gi memory claim'; sleep 3600"]
        resources:
          claims:
          - name: gpu
      tolerations:
      - key: "nvidia.com/gpu"
        operator: "Exists"
        effect: "NoSchedule"
""",
    # ------------------------------------------------------------------ not a GPU
    # A NIC by DRA: the Kubernetes documentation's ResourceClaim shape (a class of another
    # driver, `*.example.com`), which no GPU policy governs.
    "nic-claim": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  namespace: team-a
  name: fast-nic
spec:
  devices:
    requests:
    - name: nic
      exactly:
        deviceClassName: nic.example.com
""",
    # A GPU and a NIC in one claim: the guide's "Request any GPU" request beside the NIC,
    # with a configuration for the NIC's driver (opaque, as every driver's is).
    "gpu-and-nic-claim": """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  namespace: team-a
  name: gpu-and-nic
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
    - name: nic
      exactly:
        deviceClassName: nic.example.com
    config:
    - requests: ["nic"]
      opaque:
        driver: nic.example.com
        parameters:
          apiVersion: nic.example.com/v1
          kind: NicConfig
          mtu: 9000
""",
    # A pod with one container on the NIC claim and none on a GPU.
    "nic-pod": """
apiVersion: v1
kind: Pod
metadata:
  namespace: team-a
  name: nic-pod
spec:
  containers:
  - name: app
    image: registry.example/app:1
    resources:
      claims:
      - name: nic
  resourceClaims:
  - name: nic
    resourceClaimName: fast-nic
""",
}

# What each object is, by kind, for the tests that go through them all.
NAMES = tuple(_OBJECTS)


def obj(name: str) -> dict[str, Any]:
    """A fresh copy of the object `name`."""
    return copy.deepcopy(_loaded(name))


@functools.cache  # read once per run: the tests ask for each object many times
def _loaded(name: str) -> dict[str, Any]:
    loaded = kube.load_yaml(_OBJECTS[name])
    assert isinstance(loaded, dict)
    return loaded


def claim_objects() -> list[str]:
    """The names of the claims and claim templates."""
    return [n for n in NAMES if obj(n)["apiVersion"].startswith("resource.k8s.io/")]


# `kubectl get deviceclasses -o json` of a cluster with NVIDIA's GPU DRA driver: the classes
# its chart installs for full GPUs, MIG devices and passthrough GPUs, and one IMEX channel
# class of its ComputeDomain driver; an admin's own class of A100s (its selector names
# NVIDIA's driver); an admin's class with no selector (every device of every driver); and a
# NIC's class of another driver.
DEVICE_CLASSES: dict[str, str] = {
    "gpu.nvidia.com": "device.driver == 'gpu.nvidia.com'"
    " && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "mig.nvidia.com": "device.driver == 'gpu.nvidia.com'"
    " && device.attributes['gpu.nvidia.com'].type == 'mig'",
    "vfio.gpu.nvidia.com": "device.driver == 'gpu.nvidia.com'"
    " && device.attributes['gpu.nvidia.com'].type == 'vfio'",
    "compute-domain-default-channel.nvidia.com": "device.driver == 'compute-domain.nvidia.com'"
    " && device.attributes['compute-domain.nvidia.com'].type == 'channel'"
    " && device.attributes['compute-domain.nvidia.com'].id == 0",
    "a100.example.com": 'device.driver == "gpu.nvidia.com"'
    ' && device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("a100")',
    "everything.example.com": "",
    "nic.example.com": "device.driver == 'nic.example.com'",
}


def device_class(name: str, expression: str | None = None) -> dict[str, Any]:
    """A DeviceClass `name` of `resource.k8s.io/v1` as the API serves it, selecting by the
    CEL `expression` (DEVICE_CLASSES' by default; empty: no selector)."""
    cel = DEVICE_CLASSES[name] if expression is None else expression
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": cel}}]} if cel else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def device_class_list(*names: str) -> dict[str, Any]:
    """What `kubectl get deviceclasses -o json` prints for the classes `names` (all of
    DEVICE_CLASSES by default)."""
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [device_class(n) for n in names or DEVICE_CLASSES],
        "metadata": {"resourceVersion": ""},
    }
