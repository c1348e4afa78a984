"""The names the project shares: labels, annotations, environment variables, defaults.

Every other module imports these from here, so that one name has one spelling and one value
(the rendered configuration, the core, the CLI, the docs and deploy/ agree by construction).
Nothing here imports anything of the project.
"""

from __future__ import annotations

DOMAIN = "gpu-share.io"

# --------------------------------------------------------------------------- namespaces

# Opt-in: a namespace without it is never changed or refused.
ENABLED_LABEL = f"{DOMAIN}/enabled"
# Which policy governs the namespace; absent (or empty) means DEFAULT_POLICY.
POLICY_LABEL = f"{DOMAIN}/policy"
# Set by the API server on every namespace (1.22+): what namespace selectors match names by.
NAME_LABEL = "kubernetes.io/metadata.name"
SYSTEM_NAMESPACE = "kube-system"

DEFAULT_POLICY = "default"

# Pod Security Admission's namespace label, and the levels whose host-access checks (privileged,
# host namespaces, hostPath, added capabilities) are what rule `host-access` applies where the
# namespace enforces neither. An absent label is the cluster's default level, `privileged`
# unless the API server's admission configuration says otherwise.
POD_SECURITY_ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
POD_SECURITY_HOST_ACCESS_LEVELS = ("baseline", "restricted")
# The last segment of the webhook path of namespaces that enforce one of those levels
# (`/mutate/<policy>/baseline`): the API server matches the label, the path carries it.
POD_SECURITY_SEGMENT = "baseline"
# The path segment of the webhook entry that catches namespaces whose policy label names no
# policy (and the metric label of requests to a path that names none). Not a DNS label, so
# no policy can have this name.
UNKNOWN_POLICY_PATH = "_unknown"

# --------------------------------------------------------------------------- annotations

ANNOTATION_POLICY = f"{DOMAIN}/policy"
ANNOTATION_PROFILE = f"{DOMAIN}/profile"
# What the webhook did to a pod: the names of the rules that changed it, comma-separated.
ANNOTATION_MUTATIONS = f"{DOMAIN}/mutations"
# The kubelet's copies of static pods; the API server lets nobody change them.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CERT_MANAGER_ANNOTATION = "cert-manager.io/inject-ca-from"

# --------------------------------------------------------------------------- resources

# Every GPU resource the NVIDIA device plugin advertises starts with one of these
# (`nvidia.com/gpu`, `nvidia.com/gpu.shared`, `nvidia.com/mig-1g.10gb[.shared]`).
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
# Every NVIDIA resource: passthrough and vGPU device plugins name theirs after the device
# under it (`nvidia.com/GA102GL_A10`); the webhook configurations send pods that ask for any.
NVIDIA_RESOURCE_PREFIX = "nvidia.com/"
SHARED_SUFFIX = ".shared"
# Extended resources the scheduler satisfies through dynamic resource allocation (KEP-5004,
# the DRAExtendedResource feature gate): a request of `<prefix><device class>` makes a
# ResourceClaim of that class for the pod, outside any policy, as spec.resourceClaims would.
DRA_EXTENDED_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"

# --------------------------------------------------------------------------- DRA
#
# Dynamic resource allocation (`resource.k8s.io/v1`, docs/dra.md): the claims and claim
# templates the webhook reviews, and NVIDIA's GPU DRA driver with its device classes and
# opaque configuration.
DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1"
CLAIM_KIND = "ResourceClaim"
CLAIM_TEMPLATE_KIND = "ResourceClaimTemplate"
CLAIM_RESOURCES = ("resourceclaims", "resourceclaimtemplates")
DRA_DRIVER = "gpu.nvidia.com"
DRA_GPU_CLASS = "gpu.nvidia.com"
DRA_MIG_CLASS = "mig.nvidia.com"
DRA_VFIO_CLASS = "vfio.gpu.nvidia.com"
DRA_CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"
# Kubernetes' bounds on a claim (resource.k8s.io/v1 types.go): requests and configurations
# per claim, subrequests per request.
DRA_MAX_REQUESTS = 32
DRA_MAX_CONFIGS = 32
DRA_MAX_SUBREQUESTS = 8
# The device classes NVIDIA's GPU DRA driver installs: GPUs in every form. A policy with a
# `dra` section governs them whether it lists them or not (closed unless listed as allowed).
#
# Also the ComputeDomain driver's daemon class: its devices are given the node's GPUs (the
# driver's CDI spec for them names every GPU device node) so that the IMEX daemon can manage
# them; a tenant's claim of one would reach every GPU of the node.
DRA_NVIDIA_CLASSES = (
    DRA_GPU_CLASS,
    DRA_MIG_CLASS,
    DRA_VFIO_CLASS,
    "vgpu.gpu.nvidia.com",
    "compute-domain-daemon.nvidia.com",
)

# --------------------------------------------------------------------------- environment

# Which GPUs the NVIDIA runtime injects (envvar strategy); the device plugin sets it.
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
# The values with which it injects none, compared as the runtime compares them: exactly
# (no trimming, no case folding; "VOID" is a device list naming a device "VOID").
# `none` is not one of them: the toolkit then treats the container as a GPU container with
# no GPU, and still mounts the driver and the control device nodes (nvidiactl, nvidia-uvm);
# empty is unset, as `void` (nvidia-container-toolkit, internal/config/image/cuda_image.go).
HIDING_VALUES = frozenset({"void", ""})
HIDE = "void"
# Other variables the NVIDIA container toolkit reads to inject devices or device
# capabilities beyond what the device plugin allocated (see docs/security.md).
DEVICE_VARIABLES = (
    VISIBLE_DEVICES,
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "NVIDIA_IMEX_CHANNELS",
    "NVIDIA_GDRCOPY",
    "NVIDIA_GDS",
    "NVIDIA_MOFED",
    "NVIDIA_NVSWITCH",
)

# The driver features the NVIDIA runtime mounts into a GPU container (`compute`, `utility`,
# `graphics`, ...; `all` is every one); unset or empty means compute and utility. An image's
# own value holds where the pod sets none.
DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
DRIVER_CAPABILITIES_UNSET = ("compute", "utility")
ALL_CAPABILITIES = "all"

MPS_THREADS = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_MEMORY = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
# Set by the device plugin for containers that got an MPS replica: where the process finds
# the MPS control daemon (and so its limits).
MPS_PIPE_DIRECTORY = "CUDA_MPS_PIPE_DIRECTORY"
MPS_LOG_DIRECTORY = "CUDA_MPS_LOG_DIRECTORY"
MPS_DIRECTORIES = (MPS_PIPE_DIRECTORY, MPS_LOG_DIRECTORY)
MPS_PREFIX = "CUDA_MPS_"
NVIDIA_PREFIX = "NVIDIA_"

# Pod annotations a container runtime reads to add devices. CDI's name devices: the device
# plugin's cdi-annotations strategy sets them on containers, and a runtime configured with
# `pod_annotations = ["cdi.k8s.io/*"]` also takes them from the pod's own annotations.
# CRI-O's names host device paths, on runtime handlers whose `allowed_annotations` list it.
CDI_ANNOTATION_PREFIXES = ("cdi.k8s.io/", "nvidia.cdi.k8s.io/", "io.kubernetes.cri-o.Devices")

# --------------------------------------------------------------------------- host paths

# With the device plugin's `volume-mounts` strategy, the runtime reads the destinations of
# mounts under this directory as a device list. It matches the cleaned destination by plain
# string prefix, so `/var/run/nvidia-container-devicesX` counts too.
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"
# The host paths that hand out GPUs, by class: webhook/policy/hostpaths.py.

# --------------------------------------------------------------------------- rules

# The rule of shape errors: a field whose type no Kubernetes object has (HTTP status 400).
MALFORMED_RULE = "malformed-object"
# The rule of objects larger than a review takes (webhook/engine/view.py's MAX_ITEMS,
# MAX_ENTRIES and MAX_GENERIC_VALUES).
TOO_LARGE_RULE = "object-too-large"
# The rules that refuse the GPU pods of a namespace whose policy is not in force.
UNKNOWN_POLICY_RULE = "unknown-policy"
POLICY_NOT_LOADED_RULE = "policy-not-loaded"
# Every rule's name, as refusals, metric labels, audit annotations, policies (`ruleModes`)
# and the docs use it: the names of the table of rules (webhook/engine/rules.py, `RULES`),
# in its order, for the policy layer, which cannot import the engine (tests/test_registry.py
# holds the two equal). Their order is the order of a decision: its violations, warnings and
# patch operations come in it, whatever order the rules run in (`rules.Pass`).
RULES = (
    MALFORMED_RULE,
    TOO_LARGE_RULE,
    UNKNOWN_POLICY_RULE,
    POLICY_NOT_LOADED_RULE,
    "invalid-quantity",
    "requests-limits-mismatch",
    "resource-not-allowed",
    "exclusive-with-shared",
    "exclusive-gpus",
    "several-shared-resources",
    "shared-with-claims",
    "runtime-class",
    "tolerations",
    "profile",
    "device-variables",
    "env-from",
    "mps-directories",
    "privileged",
    "capabilities",
    "host-namespaces",
    "host-path",
    "device-list-mount",
    "host-access",
    "cdi-annotations",
    "resource-claims",
    "dra-class-not-allowed",
    "dra-all-devices",
    "dra-admin-access",
    "dra-device-tolerations",
    "dra-too-many-devices",
    "dra-capacity",
    "dra-config",
    "dra-sharing",
    "dra-mps-limits",
    "dra-whole-device",
    "node-selection",
    "multi-replica",
    "mps-limits",
    "driver-capabilities",
    "visible-devices",
)

# How a policy applies a rule: refuse (enforce); admit, telling the user and the audit log
# (warn); admit unchanged, telling only metrics and logs (dry-run).
ENFORCE, WARN, DRY_RUN = "enforce", "warn", "dry-run"
MODES = (ENFORCE, WARN, DRY_RUN)
# A malformed or oversized object is bad input, not a policy's choice: refused in every mode.
ALWAYS_ENFORCED = frozenset({MALFORMED_RULE, TOO_LARGE_RULE})

# --------------------------------------------------------------------------- deployment

DEFAULT_SERVICE = "gpu-share-webhook"
DEFAULT_NAMESPACE = "gpu-share-system"
DEFAULT_WEBHOOK_NAME = "gpu-share-webhook"
DEFAULT_RUNTIME_CLASS = "nvidia"
# The labels every object the project installs carries.
COMMON_LABELS = {
    "app.kubernetes.io/name": "gpu-share-webhook",
    "app.kubernetes.io/part-of": "gpu-share-webhook",
}
# How long the API server waits for an answer, set in the webhook configurations; the
# server's deadline when a request carries no `?timeout=` is the API server's own default.
WEBHOOK_TIMEOUT_SECONDS = 5
API_SERVER_DEFAULT_TIMEOUT_SECONDS = 10.0

ENV_PREFIX = "GPU_SHARE_WEBHOOK_"

# --------------------------------------------------------------------------- name grammar

# Kubernetes' name grammars (k8s.io/apimachinery validation), as regular expressions to be
# matched whole (`re.fullmatch`, or inside ^...$). Lengths are checked apart: a label is
# at most 63 characters, a subdomain 253.
DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
# Service names: a label that starts with a letter.
DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = rf"{DNS1123_LABEL}(\.{DNS1123_LABEL})*"
# A label value (empty included): what a label selector or gpu-feature-discovery can match.
LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
MAX_LABEL_LENGTH = 63
MAX_SUBDOMAIN_LENGTH = 253
# The longest name or key Kubernetes takes: a qualified name (a subdomain prefix, "/", and a
# label-length name).
MAX_NAME_LENGTH = MAX_SUBDOMAIN_LENGTH + 1 + MAX_LABEL_LENGTH
# The longest path Linux takes (PATH_MAX, its terminating NUL included): a longer hostPath or
# mountPath cannot be mounted.
MAX_PATH_LENGTH = 4095
