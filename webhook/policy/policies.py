"""Sharing policies: the file format (pydantic models), loading, and compiling.

A policy file (`policies/*.yaml`) holds one or more YAML documents of this shape::

    apiVersion: gpu-share.io/v1alpha1
    kind: SharingPolicy
    metadata: {name: default}
    spec:
      sharedResources: [nvidia.com/gpu.shared]
      runtimeClassName: nvidia
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      nodeClasses: [...]          # how the device plugin and GFD label the nodes
      profiles: {small: {activeThreadPercentage: 25, pinnedMemoryMiB: 3840}}
      defaultProfile: small
      rules: {...}                # switches for the safety rules

Loading validates every document and compiles each policy into a `Policy`: plain frozen
objects with the lookups, selectors and ceilings a review needs already worked out, so a
review repeats none of that work.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from webhook.errors import InputError, PolicyError
from webhook.policy import documents, hostpaths, names, quantities

API_VERSION = "gpu-share.io/v1alpha1"
KIND = "SharingPolicy"
DEFAULT_POLICY = names.DEFAULT_POLICY

# Label values and names as Kubernetes validates them.
_LABEL_VALUE = names.LABEL_VALUE
_DNS_LABEL = names.DNS1123_LABEL
_DNS_SUBDOMAIN = names.DNS1123_SUBDOMAIN
_RESOURCE_NAME = r"nvidia\.com/(gpu|mig-[0-9a-z.+-]+?)(\.shared)?"
_BASE_RESOURCE = r"nvidia\.com/(gpu|mig-[0-9a-z.+-]+)"

DnsLabel = Annotated[str, StringConstraints(pattern=rf"^{_DNS_LABEL}$", max_length=63)]
DnsSubdomain = Annotated[str, StringConstraints(pattern=rf"^{_DNS_SUBDOMAIN}$", max_length=253)]
ResourceName = Annotated[str, StringConstraints(pattern=rf"^{_RESOURCE_NAME}$")]
BaseResource = Annotated[str, StringConstraints(pattern=rf"^{_BASE_RESOURCE}$")]
LabelValue = Annotated[
    str, StringConstraints(pattern=rf"^{_LABEL_VALUE}$", max_length=names.MAX_LABEL_LENGTH)
]

SHARED_SUFFIX = names.SHARED_SUFFIX
PRODUCT_SHARED_SUFFIX = "-SHARED"
# The device plugin refuses MPS with more replicas than the hardware allows (48 from compute
# capability 7.5, 16 before); the policy cannot know the capability, so it checks the upper one.
MPS_MAX_REPLICAS = 48


class _Model(BaseModel):
    # Unknown fields are errors: a typo in a policy must not silently weaken it.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TolerationSpec(_Model):
    """A toleration, checked as the API server will check it after our patch."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, alias="tolerationSeconds")

    @model_validator(mode="after")
    def _as_the_api_server_wants(self) -> TolerationSpec:
        _refuse(_toleration_problems(_view(self)))
        return self

    def as_k8s(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.key:
            out["key"] = self.key
        out["operator"] = self.operator
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


class NodeClassSpec(_Model):
    """Nodes as the device plugin shares them and gpu-feature-discovery labels them."""

    name: DnsLabel
    # The device plugin's resource before renaming: nvidia.com/gpu or nvidia.com/mig-<profile>.
    resource: BaseResource = "nvidia.com/gpu"
    product: LabelValue = Field(min_length=1)
    strategy: Literal["mps", "time-slicing"]
    # renameByDefault: true advertises `<resource>.shared`; false keeps `<resource>` and
    # labels the product `<product>-SHARED`.
    renamed: bool = True
    # The device plugin shares a GPU among at least 2 replicas.
    replicas: int = Field(ge=2)
    memory_mib: int | None = Field(default=None, alias="memoryMiB", gt=0)
    gpus_per_node: int = Field(default=1, alias="gpusPerNode", ge=1)
    # Device plugin defaults: true for MPS (since v0.20), false for time-slicing.
    fail_requests_greater_than_one: bool | None = Field(
        default=None, alias="failRequestsGreaterThanOne"
    )

    @model_validator(mode="after")
    def _consistent(self) -> NodeClassSpec:
        _refuse(_class_problems(_view(self)))
        return self


class ProfileSpec(_Model):
    """An MPS size: what each container that uses the shared GPU may take of it."""

    active_thread_percentage: int | None = Field(
        default=None, alias="activeThreadPercentage", ge=1, le=100
    )
    pinned_memory_mib: int | None = Field(default=None, alias="pinnedMemoryMiB", ge=1)

    @model_validator(mode="after")
    def _not_empty(self) -> ProfileSpec:
        _refuse(_profile_problems(_view(self)))
        return self


class RulesSpec(_Model):
    """Switches for the safety rules a site may reasonably choose otherwise (docs/security.md
    says what each trades). Every default is the safe choice."""

    # NVIDIA_VISIBLE_DEVICES and the toolkit's other device variables: a value that does not
    # only hide devices, on any container, widens what the runtime injects.
    deny_device_variables: bool = Field(default=True, alias="denyDeviceVariables")
    # envFrom on a container that uses a GPU can carry those variables unseen: warned about
    # and recorded by default; refused with this switch on.
    deny_env_from_on_gpu_containers: bool = Field(default=False, alias="denyEnvFromOnGpuContainers")
    # CUDA images set NVIDIA_VISIBLE_DEVICES=all: containers that ask for no GPU get `void`,
    # in every pod of the namespace (true) or only in pods that use a GPU (false).
    void_visible_devices_without_gpu: bool = Field(
        default=True, alias="voidVisibleDevicesWithoutGpu"
    )
    # CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY set by the user detach a process from
    # the MPS daemon and its limits.
    deny_mps_directories: bool = Field(default=True, alias="denyMpsDirectories")
    # Privileged containers see every device of the node, whatever they asked for.
    deny_privileged: bool = Field(default=True, alias="denyPrivileged")
    # Added capabilities SYS_ADMIN or ALL in a pod that uses a GPU.
    deny_added_capabilities: bool = Field(default=True, alias="denyAddedCapabilities")
    # hostPID / hostIPC in a pod that uses a GPU.
    deny_host_namespaces: bool = Field(default=True, alias="denyHostNamespaces")
    # hostPath volumes of /dev, /run/nvidia*, /var/run/nvidia* (or what holds them) in a pod
    # that uses a GPU.
    deny_device_host_paths: bool = Field(default=True, alias="denyDeviceHostPaths")
    # Any volume mounted at or under /var/run/nvidia-container-devices, in every pod.
    deny_device_list_mounts: bool = Field(default=True, alias="denyDeviceListMounts")
    # Pod annotations `cdi.k8s.io/*`: device requests that runtimes passing pod annotations
    # through (kata's and confidential-computing GPU runtime classes) honour.
    deny_cdi_annotations: bool = Field(default=True, alias="denyCdiAnnotations")
    # Dynamic resource allocation claims: another way to a GPU, outside this policy.
    deny_resource_claims: bool = Field(default=True, alias="denyResourceClaims")
    deny_exclusive_with_shared: bool = Field(default=True, alias="denyExclusiveWithShared")
    # Pod Security baseline's host-access checks (privileged, host namespaces, hostPath,
    # added capabilities) in every pod of a namespace that does not enforce baseline or
    # restricted itself (`hostAccess` says which host paths are allowed).
    deny_host_access: bool = Field(default=True, alias="denyHostAccess")


# An absolute path that cleaning leaves as it is (but for trailing slashes): no empty, `.` or
# `..` segment.
_HOST_PATH = r"^(?:/|(?:/(?:[^/.][^/]*|\.[^/.][^/]*|\.\.[^/]+))+/*)$"
HostPath = Annotated[str, StringConstraints(pattern=_HOST_PATH)]


class AllowedHostPathSpec(_Model):
    """A host path that pods may mount where Pod Security does not enforce baseline, with what
    is under it (by whole segments: `/models` allows `/models/llama`, not `/models2`)."""

    path_prefix: HostPath = Field(alias="pathPrefix", min_length=1)
    # Every mount of such a volume must be read-only. A writable one lets a pod leave a
    # symbolic link that another pod's hostPath under the prefix then follows anywhere on
    # the host: under a writable entry only the entry itself may be mounted.
    read_only: bool = Field(default=True, alias="readOnly")

    @model_validator(mode="after")
    def _safe(self) -> AllowedHostPathSpec:
        path = self.path_prefix.rstrip("/") or "/"
        reached = hostpaths.classes_of(path)
        if reached:
            raise ValueError(
                f"pathPrefix {path!r} reaches host paths that hand out GPUs ({', '.join(reached)});"
                " rule host-path refuses them whatever this list says: allow a narrower path"
            )
        return self


class HostAccessSpec(_Model):
    """Host paths, beyond the rules' own: what pods may mount (rule host-access, where the
    namespace does not enforce Pod Security baseline), and what no pod may (rule host-path)."""

    allowed_host_paths: list[AllowedHostPathSpec] = Field(
        default_factory=list, alias="allowedHostPaths"
    )
    # More host paths that hand out GPUs on this site's nodes (a kubelet or runtime in
    # another place), refused like the classes of docs/security.md, with their ancestors.
    denied_host_paths: list[HostPath] = Field(default_factory=list, alias="deniedHostPaths")
    # Whether a namespace's Pod Security label is taken as enforcing: false where the API
    # server's PodSecurity configuration exempts users or runtime classes, so that the
    # webhook applies host-access everywhere.
    trust_pod_security: bool = Field(default=True, alias="trustPodSecurity")

    @model_validator(mode="after")
    def _paths(self) -> HostAccessSpec:
        for i, allowed in enumerate(self.allowed_host_paths):
            if any(hostpaths.classes_of(allowed.path_prefix, [d]) for d in self.denied_host_paths):
                raise ValueError(
                    f"allowedHostPaths[{i}]: {allowed.path_prefix!r} reaches a path of"
                    " deniedHostPaths"
                )
        return self


# An NVIDIA resource name with `*` for any characters (`nvidia.com/GA102GL_*`).
_RESOURCE_PATTERN = r"nvidia\.com/[-A-Za-z0-9_.*]{1,63}"
ResourcePattern = Annotated[str, StringConstraints(pattern=rf"^{_RESOURCE_PATTERN}$")]


class ExclusiveGpusSpec(_Model):
    """GPUs a pod gets whole, not as a shared replica: whether the policy's namespaces may ask
    for them, how many a pod may hold, and which more resources are such GPUs."""

    allowed: bool = True
    # Devices of every exclusive GPU resource together, counted per pod as the scheduler
    # counts them (init containers run before the others and give their GPUs back).
    max_per_pod: int | None = Field(default=None, alias="maxPerPod", ge=1)
    # Resources that are GPUs besides the device plugin's `nvidia.com/gpu` and
    # `nvidia.com/mig-*`: passthrough and vGPU device plugins name theirs after the device
    # (`nvidia.com/GA102GL_A10`). Patterns; `*` matches any characters.
    passthrough_resources: list[ResourcePattern] = Field(
        default_factory=list, alias="passthroughResources"
    )


# The driver capabilities the NVIDIA container toolkit knows (`NVIDIA_DRIVER_CAPABILITIES`);
# `all` is every one of them.
DriverCapability = Literal["compute", "compat32", "graphics", "utility", "video", "display", "ngx"]


def _default_tolerations() -> list[TolerationSpec]:
    return [TolerationSpec(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]


Mode = Literal["enforce", "warn", "dry-run"]
# The name of a rule (a key of `ruleModes`).
RuleName = Literal[names.RULES]  # type: ignore[valid-type]


class DraMpsSpec(_Model):
    """Ceilings on the MPS configuration of a claim's request (NVIDIA's GpuConfig and
    MigDeviceConfig `sharing.mpsConfig`): what each request may set at most."""

    max_active_thread_percentage: int | None = Field(
        default=None, alias="maxActiveThreadPercentage", ge=1, le=100
    )
    # The default pinned memory limit and every per-device one, in MiB.
    max_pinned_memory_mib: int | None = Field(default=None, alias="maxPinnedMemoryMiB", ge=1)


# The kinds of NVIDIA's opaque device configuration (`resource.nvidia.com/v1beta1`), each for
# the devices of one type: full GPUs, MIG devices, VFIO passthrough.
DraConfigKind = Literal["GpuConfig", "MigDeviceConfig", "VfioDeviceConfig"]
# A capacity's name in a request (`exactly.capacity.requests`): a DRA QualifiedName, an
# optional domain and a C identifier of at most 32 characters.
_CAPACITY_NAME = rf"^({_DNS_SUBDOMAIN}/)?[A-Za-z_][A-Za-z0-9_]{{0,31}}$"
CapacityName = Annotated[str, StringConstraints(pattern=_CAPACITY_NAME, max_length=286)]
# A quantity as the API server's grammar has it (whether it is in range, `quantities.parse`).
_QUANTITY = rf"^(?:{quantities.GRAMMAR.pattern})$"
Quantity = Annotated[
    str, StringConstraints(pattern=_QUANTITY, min_length=1, max_length=quantities.MAX_LENGTH)
]


def default_config_kind(class_name: str) -> DraConfigKind:
    """The configuration kind NVIDIA's driver takes for the devices of a class it installs
    (`mig.nvidia.com`: MIG devices; `vfio.gpu.nvidia.com`: passthrough; else full GPUs)."""
    if class_name == names.DRA_MIG_CLASS:
        return "MigDeviceConfig"
    if class_name == names.DRA_VFIO_CLASS:
        return "VfioDeviceConfig"
    return "GpuConfig"


class DraClassSpec(_Model):
    """A DeviceClass of GPUs under dynamic resource allocation (`gpu.nvidia.com`,
    `mig.nvidia.com`) and what a namespace may ask of it. A class the policy does not list
    is not the webhook's business (a NIC); a listed one is closed unless `allowed`."""

    name: DnsSubdomain
    allowed: bool = False
    # The DRA driver of the class's devices: the `opaque.driver` of the configuration that
    # applies to them.
    driver: DnsSubdomain = names.DRA_DRIVER
    # The kind of that configuration (None: by the class's name, `default_config_kind`).
    config_kind: DraConfigKind | None = Field(default=None, alias="configKind")
    # Devices one request (or each of its firstAvailable subrequests) may take.
    max_devices_per_request: int = Field(default=1, alias="maxDevicesPerRequest", ge=1, le=32)
    # Devices of the class one claim may take across all its requests (a firstAvailable
    # request counts its largest subrequest of the class); None: no bound but the API
    # server's (an allocation holds at most 32 devices).
    max_devices_per_claim: int | None = Field(
        default=None, alias="maxDevicesPerClaim", ge=1, le=names.DRA_MAX_REQUESTS
    )
    # The sharing strategies a request's configuration may name (NVIDIA's
    # `sharing.strategy`); none: only a request without sharing configuration.
    sharing: list[Literal["TimeSlicing", "MPS"]] = Field(default_factory=list)
    mps: DraMpsSpec = Field(default_factory=DraMpsSpec)
    # Whether a request may end with the whole device: no configuration of the class's kind
    # that applies to it, or one without `sharing` (the driver then gives the device whole,
    # time-sliced among the pods of the claim). False: such a request is refused (rule
    # dra-whole-device), unless the webhook adds the profile's MPS configuration to it.
    allow_whole_device: bool = Field(default=True, alias="allowWholeDevice")
    # Whether the mutating review adds the profile's MPS configuration to a request of the
    # class with none of its kind. None: where `sharing` lists MPS (and the class has no
    # capacity ceilings), as policies written before the field was there behave.
    add_mps_config: bool | None = Field(default=None, alias="addMpsConfig")
    # Ceilings on consumable capacity (`exactly.capacity.requests`), by capacity name: a
    # request must name each, at most this much.
    capacity: dict[CapacityName, Quantity] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _coherent(self) -> DraClassSpec:
        _refuse(_dra_class_problems(_view(self)))
        return self

    @property
    def kind(self) -> DraConfigKind:
        return self.config_kind or default_config_kind(self.name)

    @property
    def adds_mps(self) -> bool:
        """Whether the webhook adds the profile's MPS configuration to a request of the
        class that has none (`add_mps_config`, else by `sharing` and `capacity`)."""
        if self.add_mps_config is not None:
            return self.add_mps_config
        return "MPS" in self.sharing and not self.capacity


class DraSpec(_Model):
    """Dynamic resource allocation: the GPU device classes, and what requests of them may
    be, reviewed in ResourceClaims and ResourceClaimTemplates (docs/dra.md)."""

    device_classes: list[DraClassSpec] = Field(default_factory=list, alias="deviceClasses")

    @model_validator(mode="after")
    def _coherent(self) -> DraSpec:
        _refuse(_dra_problems(_view(self)))
        return self


class PolicySpecModel(_Model):
    # How the policy applies its rules (names.MODES), and per-rule exceptions: roll a policy
    # out in dry-run, read the audit, warn, then enforce (docs/policies.md).
    mode: Mode = "enforce"
    rule_modes: dict[RuleName, Mode] = Field(default_factory=dict, alias="ruleModes")
    shared_resources: list[ResourceName] = Field(
        default_factory=lambda: ["nvidia.com/gpu.shared"], alias="sharedResources", min_length=1
    )
    runtime_class_name: DnsSubdomain = Field(
        default=names.DEFAULT_RUNTIME_CLASS, alias="runtimeClassName"
    )
    tolerations: list[TolerationSpec] = Field(default_factory=_default_tolerations)
    # Also tolerate a taint named after the requested resource, as the ExtendedResourceToleration
    # admission plugin would, for clusters that taint GPU nodes that way.
    tolerate_resource_taint: bool = Field(default=True, alias="tolerateResourceTaint")
    # The device plugin's sharing nodes; none only in a policy with a `dra` section (a
    # namespace that gets its GPUs through DRA alone).
    node_classes: list[NodeClassSpec] = Field(default_factory=list, alias="nodeClasses")
    profiles: dict[DnsLabel, ProfileSpec] = Field(default_factory=dict)
    host_access: HostAccessSpec = Field(default_factory=HostAccessSpec, alias="hostAccess")
    default_profile: DnsLabel | None = Field(default=None, alias="defaultProfile")
    # True: a container's own CUDA_MPS_* above its pod's profile is refused (false: a
    # warning; the class's ceiling is the limit).
    profiles_are_ceilings: bool = Field(default=False, alias="profilesAreCeilings")
    # None: exclusive GPUs are allowed, any number, and only the device plugin's count.
    exclusive_gpus: ExclusiveGpusSpec | None = Field(default=None, alias="exclusiveGpus")
    # The driver capabilities a GPU container may have; the webhook sets them where the
    # container does not (its image may ask for more). None: not judged.
    driver_capabilities: list[DriverCapability] | None = Field(
        default=None, alias="driverCapabilities", min_length=1
    )
    rules: RulesSpec = Field(default_factory=RulesSpec)
    # None: the policy does not govern DRA (rule resource-claims refuses claims in pods).
    dra: DraSpec | None = None

    @model_validator(mode="after")
    def _coherent(self) -> PolicySpecModel:
        _refuse(_spec_problems(_view(self)))
        return self


class MetadataModel(_Model):
    model_config = ConfigDict(extra="allow", frozen=True)
    name: DnsLabel


class PolicyDocument(_Model):
    api_version: Literal["gpu-share.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SharingPolicy"]
    metadata: MetadataModel
    spec: PolicySpecModel


def advertised_resource(resource: str, renamed: bool) -> str:
    """What a pod asks for to get a replica on such a node."""
    return resource + SHARED_SUFFIX if renamed else resource


# --------------------------------------------------------------------------- cross-field rules
#
# The models' own validators, written over a *view*: a mapping of a model's fields (by their
# Python names) to their values, nested models as views too. A field whose value is not valid
# is missing from the view, and each rule skips what it cannot judge. So the same rules serve
# the validators (every field valid) and `unreached_problems`, which finds what they would say
# of a document whose other fields are wrong: pydantic runs a model's validator only when all
# its fields are valid, and a person fixing a policy should not meet its errors in two rounds.

View = Mapping[str, Any]


class _Refusal(typing.NamedTuple):
    """A rule's problem, `<field>: <reason>` or a reason about the whole model."""

    text: str
    # The fields (Python names) whose values it refuses, which the rules of the models
    # above then do not judge; none: the whole model.
    fields: tuple[str, ...] = ()


def _refuse(problems: list[_Refusal]) -> None:
    if problems:
        # One ValueError carries them all; `_describe` splits them back into lines.
        raise ValueError("\n".join(p.text for p in problems))


def _view(value: Any) -> Any:
    """A model as a view (see above), with its nested models, lists and mappings."""
    if isinstance(value, BaseModel):
        return {name: _view(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, list):
        return [_view(v) for v in value]
    if isinstance(value, dict):
        return {k: _view(v) for k, v in value.items()}
    return value


def _toleration_problems(v: View) -> list[_Refusal]:
    problems: list[str] = []
    operator = v.get("operator")
    if operator == "Exists" and v.get("value"):
        problems.append("value must be empty when operator is 'Exists'")
    if "key" in v and not v["key"] and operator is not None and operator != "Exists":
        problems.append("operator must be 'Exists' when key is empty")
    if v.get("toleration_seconds") is not None and "effect" in v and v["effect"] != "NoExecute":
        problems.append("tolerationSeconds is only allowed with effect NoExecute")
    return [_Refusal(p) for p in problems]


def _class_problems(v: View) -> list[_Refusal]:
    problems: list[_Refusal] = []
    replicas = v.get("replicas")
    if v.get("strategy") == "mps":
        if str(v.get("resource", "")).startswith("nvidia.com/mig-"):
            problems.append(
                _Refusal(
                    "strategy: the device plugin refuses MPS on MIG devices (use time-slicing)",
                    ("strategy", "resource"),
                )
            )
        if "memory_mib" in v and v["memory_mib"] is None:
            problems.append(
                _Refusal(
                    "memoryMiB: required for an mps class (it sets the ceiling)", ("memory_mib",)
                )
            )
        if replicas is not None and replicas > MPS_MAX_REPLICAS:
            problems.append(
                _Refusal(f"replicas: MPS allows at most {MPS_MAX_REPLICAS} per GPU", ("replicas",))
            )
    product, renamed = v.get("product"), v.get("renamed")
    if product is None or renamed is None:
        return problems
    if product.endswith(PRODUCT_SHARED_SUFFIX):
        # GFD appends -SHARED once, and only where the plugin shares without renaming; the
        # webhook appends it itself for such a class. Either way no node carries this label.
        plain = product.removesuffix(PRODUCT_SHARED_SUFFIX)
        if renamed:
            text = (
                f"product: {product} never matches a node: GFD writes {PRODUCT_SHARED_SUFFIX}"
                f" only on GPUs shared without renaming, and this class is renamed. Write"
                f" {plain} (or renamed: false, if the device plugin runs renameByDefault: false)"
            )
        else:
            text = (
                f"product: {product} never matches a node: the webhook adds"
                f" {PRODUCT_SHARED_SUFFIX} itself for a class that is not renamed, and GFD never"
                f" writes {product}{PRODUCT_SHARED_SUFFIX}. Write {plain}"
            )
        problems.append(_Refusal(text, ("product",)))
    elif not renamed and len(product) + len(PRODUCT_SHARED_SUFFIX) > names.MAX_LABEL_LENGTH:
        problems.append(
            _Refusal(
                "product: with the -SHARED suffix it is longer than a label value", ("product",)
            )
        )
    return problems


def _profile_problems(v: View) -> list[_Refusal]:
    # A missing key is a value that did not validate: only two that are absent are empty.
    if v.get("active_thread_percentage", 0) is None and v.get("pinned_memory_mib", 0) is None:
        return [_Refusal("a profile sets activeThreadPercentage, pinnedMemoryMiB or both")]
    return []


def _dra_class_problems(v: View) -> list[_Refusal]:
    problems: list[_Refusal] = []
    name = v.get("name")
    kind = v.get("config_kind") or (default_config_kind(name) if isinstance(name, str) else None)
    sharing = v.get("sharing") or []
    if kind == "VfioDeviceConfig" and sharing:
        problems.append(
            _Refusal(
                "sharing: VFIO passthrough devices are given whole to one virtual machine;"
                " NVIDIA's VfioDeviceConfig has no sharing",
                ("sharing",),
            )
        )
    if len(set(sharing)) != len(sharing):
        problems.append(_Refusal("sharing: a strategy is listed twice", ("sharing",)))
    capacity = v.get("capacity")
    if (
        v.get("allowed") is True
        and v.get("allow_whole_device") is False
        and "sharing" in v
        and not sharing
        and capacity is not None
        and not capacity
    ):
        problems.append(
            _Refusal(
                "allowWholeDevice: false, but the class names no sharing strategy and no"
                " capacity ceiling, so every request of it would be refused: list MPS or"
                " TimeSlicing in sharing, set capacity, or close the class (allowed: false)",
                ("allow_whole_device",),
            )
        )
    if v.get("add_mps_config") is True:
        if "sharing" in v and "MPS" not in sharing:
            problems.append(
                _Refusal(
                    "addMpsConfig: true needs MPS in sharing: the configuration it adds is an"
                    " MPS one",
                    ("add_mps_config",),
                )
            )
        elif capacity:
            problems.append(
                _Refusal(
                    "addMpsConfig: true on a class with capacity ceilings: NVIDIA's driver"
                    " refuses MPS where it shares devices by capacity; leave it unset or false",
                    ("add_mps_config",),
                )
            )
    for capacity, value in (v.get("capacity") or {}).items():
        try:
            amount = quantities.parse(value)
        except quantities.QuantityError as exc:
            problems.append(_Refusal(f"capacity.{capacity}: {value!r} {exc}", ("capacity",)))
            continue
        if amount < 0:
            problems.append(_Refusal(f"capacity.{capacity}: {value!r} is negative", ("capacity",)))
    return problems


def _dra_problems(v: View) -> list[_Refusal]:
    classes: list[View] = v.get("device_classes") or []
    class_names = [c["name"] for c in classes if "name" in c]
    return [
        _Refusal(f"deviceClasses: two entries for class {dup!r}", ("device_classes",))
        for dup in sorted({n for n in class_names if class_names.count(n) > 1})
    ]


def _spec_problems(v: View) -> list[_Refusal]:
    problems: list[str] = []
    rule_modes = v.get("rule_modes")
    if rule_modes is not None:
        for rule in sorted(set(rule_modes) & names.ALWAYS_ENFORCED):
            problems.append(f"ruleModes.{rule}: always enforced (it refuses bad input)")
    classes: list[View] | None = v.get("node_classes")
    if (
        classes is not None
        and not classes
        and v.get("dra", 0) is None
        and v.get("exclusive_gpus", 0) is None
    ):
        problems.append(
            "nodeClasses: at least one class is needed, unless the policy has a dra section"
            " (its namespaces then get GPUs through dynamic resource allocation) or an"
            " exclusiveGpus section (they get whole GPUs only)"
        )
    capabilities: list[str] | None = v.get("driver_capabilities")
    if capabilities is not None and len(set(capabilities)) != len(capabilities):
        problems.append("driverCapabilities: a capability is listed twice")
    if classes is not None:
        class_names = [c["name"] for c in classes if "name" in c]
        for dup in sorted({n for n in class_names if class_names.count(n) > 1}):
            problems.append(f"nodeClasses: two classes named {dup!r}")
    listed: list[str] | None = v.get("shared_resources")
    if listed is not None and len(set(listed)) != len(listed):
        problems.append("sharedResources: a resource is listed twice")
    if classes is not None and listed is not None:
        shared = set(listed)
        known = [c for c in classes if {"name", "resource", "renamed"} <= c.keys()]
        for c in known:
            adv = advertised_resource(c["resource"], c["renamed"])
            if adv not in shared:
                problems.append(
                    f"nodeClasses[{c['name']}]: advertises {adv}, which is not in sharedResources"
                )
        # Only when every class is known: one that is not may be the one that advertises it.
        if classes and len(known) == len(classes):
            served = {advertised_resource(c["resource"], c["renamed"]) for c in known}
            for res in sorted(shared - served):
                problems.append(f"sharedResources: no node class advertises {res}")
    profiles: dict[str, View] | None = v.get("profiles")
    if profiles is not None and "default_profile" in v:
        default = v["default_profile"]
        if profiles:
            if default is None:
                problems.append("defaultProfile: required when profiles are defined")
            elif default not in profiles:
                problems.append(
                    f"defaultProfile: {default!r} is not one of the profiles"
                    f" ({', '.join(sorted(profiles))})"
                )
        elif default is not None:
            problems.append("defaultProfile: set, but no profiles are defined")
    if classes is not None and profiles is not None and all(_ceiling_known(c) for c in classes):
        mps = [c for c in classes if c["strategy"] == "mps"]
        ceilings = ", ".join(
            f"{c['name']}: {100 // c['replicas']}% / {(c['memory_mib'] or 0) // c['replicas']} MiB"
            for c in mps
        )
        for pname, prof in sorted(profiles.items()):
            if not {"active_thread_percentage", "pinned_memory_mib"} <= prof.keys():
                continue
            if mps and not any(_fits(prof, c) for c in mps):
                problems.append(
                    f"profiles.{pname}: above the MPS ceiling of every class ({ceilings})"
                )
    return [_Refusal(p) for p in problems]


def _ceiling_known(c: View) -> bool:
    """Whether a class's view says whether it is MPS, and if so its ceilings."""
    if "strategy" not in c:
        return False
    return c["strategy"] != "mps" or {"name", "replicas", "memory_mib"} <= c.keys()


def _fits(profile: View, cls: View) -> bool:
    threads = profile["active_thread_percentage"]
    memory = profile["pinned_memory_mib"]
    if threads is not None and threads > 100 // cls["replicas"]:
        return False
    ceiling = cls["memory_mib"] // cls["replicas"] if cls["memory_mib"] is not None else None
    return memory is None or ceiling is None or memory <= ceiling


# The models whose validators `unreached_problems` runs over what is valid of a document.
_RULES: dict[type[BaseModel], Callable[[View], list[_Refusal]]] = {
    TolerationSpec: _toleration_problems,
    NodeClassSpec: _class_problems,
    ProfileSpec: _profile_problems,
    DraClassSpec: _dra_class_problems,
    DraSpec: _dra_problems,
    PolicySpecModel: _spec_problems,
}
_INVALID = object()


def unreached_problems(doc: Any) -> list[str]:
    """The problems the models' validators would find in `doc`, a policy document that does
    not validate, where its invalid fields kept pydantic from running them (each as
    `<field path>: <reason>`). None of them is one pydantic reported: a validator that ran is
    not run again."""
    _, problems = _unreached(PolicyDocument, doc, ())
    return problems


def _unreached(
    model: type[BaseModel], raw: Any, loc: tuple[int | str, ...]
) -> tuple[Any, list[str]]:
    """(the view of what is valid of `raw` as `model`, or _INVALID; the problems pydantic did
    not reach in it)."""
    if not isinstance(raw, dict):
        return _INVALID, []
    try:
        return _view(model.model_validate(raw)), []
    except pydantic.ValidationError as exc:
        # An error at the model itself comes from its validator, which therefore ran.
        reached = all(not err["loc"] for err in exc.errors())
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key not in raw:
            key = name
        if key not in raw:
            if not info.is_required():
                values[name] = _view(info.get_default(call_default_factory=True))
            continue
        value, found = _unreached_value(model, name, raw[key], (*loc, key))
        problems.extend(found)
        if value is not _INVALID:
            values[name] = value
    rules = _RULES.get(model)
    refused = rules(values) if rules is not None else []
    if not reached:
        for refusal in refused:
            problems.extend(_placed(loc, refusal.text))
    # A value a rule refuses is not valid either: the rules of the models above do not judge
    # it (a class with 64 MPS replicas says nothing of the profiles' ceilings).
    for refusal in refused:
        if not refusal.fields:
            return _INVALID, problems
        for name in refusal.fields:
            values.pop(name, None)
    return values, problems


def _unreached_value(
    model: type[BaseModel], name: str, raw: Any, loc: tuple[int | str, ...]
) -> tuple[Any, list[str]]:
    """A field's value as a view (or _INVALID), and the problems pydantic did not reach in the
    models it holds (a model, a list or a mapping of them)."""
    info = model.model_fields[name]
    annotation = _unoptional(info.annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and raw is not None:
        return _unreached(annotation, raw, loc)
    try:
        return _view(_field_adapter(model, name).validate_python(raw)), []
    except pydantic.ValidationError as exc:
        errors = exc.errors()
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    item = args[-1] if args else None
    if not (isinstance(item, type) and issubclass(item, BaseModel)):
        return _INVALID, []
    # The container itself is wrong (a mapping for a list, too few items): no view of it,
    # but its items may still say something.
    whole = any(not err["loc"] for err in errors)
    problems: list[str] = []
    if origin is list and isinstance(raw, list):
        items = []
        for i, entry in enumerate(raw):
            view, found = _unreached(item, entry, (*loc, i))
            problems.extend(found)
            items.append({} if view is _INVALID else view)
        return (_INVALID if whole else items), problems
    if origin is dict and isinstance(raw, dict):
        bad_keys = {err["loc"][0] for err in errors if err["loc"][1:2] == ("[key]",)}
        entries = {}
        for key, entry in raw.items():
            view, found = _unreached(item, entry, (*loc, key))
            problems.extend(found)
            entries[key] = {} if view is _INVALID else view
        # A key that is not valid leaves the mapping's keys unknown (a default profile may
        # name the one meant).
        return (_INVALID if whole or bad_keys else entries), problems
    return _INVALID, []


@functools.cache
def _field_adapter(model: type[BaseModel], name: str) -> pydantic.TypeAdapter[Any]:
    info = model.model_fields[name]
    # The field's type with its constraints (ge=1, min_length=1, ...), as the model checks it.
    form: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    return pydantic.TypeAdapter(form)


# --------------------------------------------------------------------------- compiled form


@dataclass(frozen=True, slots=True, eq=False)
class NodeClass:
    """A node class, compiled: what it advertises, the labels to select it, its MPS ceilings."""

    name: str
    index: int
    resource: str
    advertised: str
    product: str
    strategy: str
    renamed: bool
    replicas: int
    memory_mib: int | None
    gpus_per_node: int
    fail_requests_greater_than_one: bool
    # The labels the webhook pins: sharing strategy, product as labelled, replicas.
    selector: tuple[tuple[str, str], ...]
    product_label: str
    # Every label GFD sets on such nodes that we can judge a user's selector against.
    known_labels: Mapping[str, str]
    thread_ceiling: int | None
    memory_ceiling_mib: int | None

    @property
    def mps(self) -> bool:
        return self.strategy == "mps"


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    active_thread_percentage: int | None
    pinned_memory_mib: int | None


@dataclass(frozen=True, slots=True)
class DraClass:
    """A GPU device class as a policy governs it (`DraClassSpec`, compiled)."""

    name: str
    allowed: bool
    driver: str
    config_kind: str
    max_devices: int
    # The strategies a configuration may name, in the order the policy lists them.
    sharing: tuple[str, ...]
    max_thread_percentage: int | None
    max_pinned_memory_mib: int | None
    # (capacity name, the ceiling as written, its value), in the order the policy lists them.
    capacity: tuple[tuple[str, str, Fraction], ...]
    # Whether a request may end with the whole device (no sharing configuration).
    allow_whole_device: bool = True
    # Whether the mutating review adds the profile's MPS configuration (`DraClassSpec.adds_mps`).
    add_mps: bool = False
    # The most devices of the class one claim may take (None: no bound of the policy's).
    max_devices_per_claim: int | None = None


@dataclass(frozen=True, slots=True)
class DraPolicy:
    """A policy's `dra` section, compiled: the classes it lists, by name (the others it
    governs, closed, are the set's: `Policy.dra_class`)."""

    classes: Mapping[str, DraClass]

    @property
    def allowed(self) -> tuple[str, ...]:
        """The classes a namespace may ask for, sorted."""
        return tuple(sorted(n for n, c in self.classes.items() if c.allowed))


@dataclass(frozen=True, slots=True)
class ExclusiveGpus:
    """A policy's `exclusiveGpus`, compiled."""

    allowed: bool = True
    max_per_pod: int | None = None
    # The passthrough patterns as written, and one expression that matches any of them.
    passthrough: tuple[str, ...] = ()
    passthrough_match: re.Pattern[str] | None = None

    def is_passthrough(self, resource: str) -> bool:
        return self.passthrough_match is not None and bool(
            self.passthrough_match.fullmatch(resource)
        )


def pattern_regex(patterns: Iterable[str]) -> str:
    """One regular expression (RE2 and Python alike) that matches a resource name any of
    `patterns` matches, whole; `*` is any characters."""
    return "|".join(".*".join(re.escape(part) for part in p.split("*")) for p in patterns)


def compile_exclusive(spec: ExclusiveGpusSpec | None) -> ExclusiveGpus:
    if spec is None:
        return ExclusiveGpus()
    patterns = tuple(spec.passthrough_resources)
    return ExclusiveGpus(
        spec.allowed,
        spec.max_per_pod,
        patterns,
        re.compile(pattern_regex(patterns)) if patterns else None,
    )


def closed_dra_class(name: str) -> DraClass:
    """A GPU class the policy does not list: no namespace may use it."""
    return DraClass(
        name=name,
        allowed=False,
        driver=names.DRA_DRIVER,
        config_kind=default_config_kind(name),
        max_devices=1,
        sharing=(),
        max_thread_percentage=None,
        max_pinned_memory_mib=None,
        capacity=(),
    )


def compile_dra(spec: DraSpec) -> DraPolicy:
    return DraPolicy(
        MappingProxyType(
            {
                c.name: DraClass(
                    name=c.name,
                    allowed=c.allowed,
                    driver=c.driver,
                    config_kind=c.kind,
                    max_devices=c.max_devices_per_request,
                    sharing=tuple(c.sharing),
                    max_thread_percentage=c.mps.max_active_thread_percentage,
                    max_pinned_memory_mib=c.mps.max_pinned_memory_mib,
                    capacity=tuple(
                        (name, value, quantities.parse(value)) for name, value in c.capacity.items()
                    ),
                    allow_whole_device=c.allow_whole_device,
                    add_mps=c.adds_mps,
                    max_devices_per_claim=c.max_devices_per_claim,
                )
                for c in spec.device_classes
            }
        )
    )


# The compiled switches: the same fields as the file's `spec.rules`, by their Python names.
Rules = RulesSpec


@dataclass(frozen=True, slots=True, eq=False)
class Policy:
    """A policy compiled for reviews. Built once per load and immutable: nothing a review
    returns may alias it (patch values are built afresh from it for every review)."""

    name: str
    source: str
    shared_resources: frozenset[str]
    runtime_class_name: str
    tolerations: tuple[tuple[tuple[str, Any], ...], ...]
    tolerate_resource_taint: bool
    classes: tuple[NodeClass, ...]
    classes_by_resource: Mapping[str, tuple[NodeClass, ...]]
    profiles: Mapping[str, Profile]
    default_profile: str | None
    rules: Rules
    # Profile names other policies define: lets a denial tell "not allowed here" from "unknown".
    foreign_profiles: frozenset[str] = frozenset()

    # How each rule is applied: `mode`, except where `rule_modes` says otherwise.
    mode: str = names.ENFORCE
    rule_modes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Set on the stand-in for a policy that is not in force (unknown name, file that does not
    # load): (rule, message) refusing every pod that asks for a GPU.
    unavailable: tuple[str, str] | None = None
    # `hostAccess`: host paths pods may mount, as (path, read-only) (rule host-access), and
    # more that none may (rule host-path); whether a Pod Security label is trusted.
    allowed_host_paths: tuple[tuple[str, bool], ...] = ()
    denied_host_paths: tuple[str, ...] = ()
    trust_pod_security: bool = True
    # The policy as it governs namespaces that enforce Pod Security baseline or restricted
    # (their webhook path ends in `/baseline`): rule host-access leaves its checks to Pod
    # Security there (`PolicySet.governing`).
    pod_security: bool = False
    # `dra`: the GPU device classes of dynamic resource allocation; None: the policy does not
    # govern DRA, and rule resource-claims refuses pods with claims.
    dra: DraPolicy | None = None
    # A container's CUDA_MPS_* above its pod's profile is refused (rule mps-limits).
    profiles_are_ceilings: bool = False
    # `exclusiveGpus` (rule exclusive-gpus), and which resources more are GPUs.
    exclusive_gpus: ExclusiveGpus = ExclusiveGpus()
    # The driver capabilities GPU containers may have (rule driver-capabilities); None: any.
    driver_capabilities: tuple[str, ...] | None = None
    # The DRA device classes of GPUs in the set this policy is in (NVIDIA's, and every class
    # a policy lists): claims of them are sent to every entry, and refused where the policy
    # does not govern DRA (`claims.gather`).
    gpu_claim_classes: frozenset[str] = frozenset(names.DRA_NVIDIA_CLASSES)

    def dra_class(self, class_name: str) -> DraClass | None:
        """How the policy's `dra` section governs requests of `class_name`: as it lists it,
        else closed where it is a GPU class of the set (`gpu_claim_classes`); None for
        another class, or where the policy has no `dra` section."""
        if self.dra is None:
            return None
        found = self.dra.classes.get(class_name)
        if found is None and class_name in self.gpu_claim_classes:
            return closed_dra_class(class_name)
        return found

    @property
    def gpu_classes(self) -> tuple[str, ...]:
        """Every DRA class the policy governs, sorted: its own and the set's."""
        own = self.dra.classes if self.dra is not None else ()
        return tuple(sorted({*own, *self.gpu_claim_classes}))

    @property
    def preferred_resource(self) -> str:
        """The shared resource a refusal tells users to ask for instead."""
        return min(self.shared_resources) if self.shared_resources else "nvidia.com/gpu.shared"

    def mode_of(self, rule: str) -> str:
        """How this policy applies `rule`."""
        if rule in names.ALWAYS_ENFORCED:
            return names.ENFORCE
        return self.rule_modes.get(rule, self.mode)


@dataclass(frozen=True, slots=True)
class PolicySet:
    """The policies in force, by name; and the policies that did not load, by name, each
    with the file and the error (their namespaces are refused GPU pods with that reason)."""

    policies: Mapping[str, Policy]
    broken: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    # The policies as they govern namespaces that enforce Pod Security, made once each.
    _under_pod_security: dict[str, Policy] = field(default_factory=dict, compare=False, repr=False)

    def get(self, path: str) -> Policy | None:
        """The policy in force at the webhook path `path` (`<name>`, or `<name>/baseline` for
        namespaces that enforce Pod Security baseline or restricted); None when none is."""
        name, pod_security = split_path(path)
        found = self.policies.get(name)
        if found is None or not pod_security:
            return found
        return self._enforcing_pod_security(found)

    def _enforcing_pod_security(self, policy: Policy) -> Policy:
        if not policy.trust_pod_security:
            return policy
        if policy.unavailable is not None:
            return dataclasses.replace(policy, pod_security=True)
        made = self._under_pod_security.get(policy.name)
        if made is None:
            made = dataclasses.replace(policy, pod_security=True)
            self._under_pod_security[policy.name] = made
        return made

    @property
    def names(self) -> list[str]:
        return sorted(self.policies)

    @property
    def gpu_classes(self) -> tuple[str, ...]:
        """The DRA device classes any policy governs, sorted: NVIDIA's, and every class a
        policy lists (the catch-all entry sends claims of these, to refuse them)."""
        listed = {c for p in self.policies.values() if p.dra for c in p.dra.classes}
        return tuple(sorted({*listed, *names.DRA_NVIDIA_CLASSES}))

    def governing(self, path: str) -> Policy:
        """The policy at the webhook path `path` (see `get`), or the stand-in that says why
        there is none (the name is `names.UNKNOWN_POLICY_PATH` for the catch-all entry)."""
        found = self.get(path)
        if found is not None:
            return found
        name, pod_security = split_path(path)
        if pod_security:
            return self._enforcing_pod_security(self.governing(name))
        known = ", ".join(self.names) or "none"
        if name in self.broken:
            return self._standing_in(
                name,
                names.POLICY_NOT_LOADED_RULE,
                f'policy "{name}" is not in force: {self.broken[name]}. The cluster admin must'
                " fix the policy file; until then pods of this namespace that ask for a GPU"
                " are refused",
            )
        if name == names.UNKNOWN_POLICY_PATH:
            message = (
                f"unknown policy: this namespace's label {names.POLICY_LABEL} names a policy"
                f" that does not exist (policies: {known}). Fix the label, or remove it for the"
                " default policy"
            )
        else:
            message = (
                f'unknown policy: policy "{name}" does not exist (policies: {known}). Fix the'
                f" namespace label {names.POLICY_LABEL}, or add the policy and render the"
                " webhook configurations"
            )
        return self._standing_in(name, names.UNKNOWN_POLICY_RULE, message)

    def _standing_in(self, name: str, rule: str, message: str) -> Policy:
        """`stand_in`, knowing the set's GPU classes (the claims of them it refuses)."""
        return dataclasses.replace(
            stand_in(name, rule, message), gpu_claim_classes=frozenset(self.gpu_classes)
        )


def split_path(path: str) -> tuple[str, bool]:
    """A webhook path's policy name, and whether it is the path of namespaces that enforce
    Pod Security baseline or restricted (`default/baseline` -> ("default", True))."""
    name, sep, level = path.partition("/")
    if sep and level == names.POD_SECURITY_SEGMENT:
        return name, True
    return path, False


def join_path(name: str, *, pod_security: bool) -> str:
    """The webhook path segment(s) after `/<endpoint>/` for a policy name and level: the
    inverse of `split_path`."""
    return f"{name}/{names.POD_SECURITY_SEGMENT}" if pod_security else name


def stand_in(name: str, rule: str, message: str) -> Policy:
    """A policy for a namespace whose own is not in force: no shared GPU and the default
    switches, so that the rules that do not depend on a policy still guard its pods; every
    pod that asks for a GPU is refused by `rule` with `message`."""
    return Policy(
        name=name,
        source="(not in force)",
        shared_resources=frozenset(),
        runtime_class_name=names.DEFAULT_RUNTIME_CLASS,
        tolerations=(),
        tolerate_resource_taint=False,
        classes=(),
        classes_by_resource=MappingProxyType({}),
        profiles=MappingProxyType({}),
        default_profile=None,
        rules=RulesSpec(),
        unavailable=(rule, message),
    )


def compile_node_class(spec: NodeClassSpec, index: int) -> NodeClass:
    r = spec.resource
    product_value = spec.product if spec.renamed else spec.product + PRODUCT_SHARED_SUFFIX
    selector = (
        (f"{r}.sharing-strategy", spec.strategy),
        (f"{r}.product", product_value),
        (f"{r}.replicas", str(spec.replicas)),
    )
    known = dict(selector)
    known[f"{r}.count"] = str(spec.gpus_per_node)
    if spec.memory_mib is not None:
        known[f"{r}.memory"] = str(spec.memory_mib)
    known["nvidia.com/gpu.present"] = "true"
    # GFD labels MPS nodes mps.capable=true; a selector asking for it keeps pods off the rest.
    known["nvidia.com/mps.capable"] = "true" if spec.strategy == "mps" else "false"
    fail = spec.fail_requests_greater_than_one
    if fail is None:
        fail = spec.strategy == "mps"
    mps = spec.strategy == "mps"
    return NodeClass(
        name=spec.name,
        index=index,
        resource=r,
        advertised=advertised_resource(r, spec.renamed),
        product=spec.product,
        strategy=spec.strategy,
        renamed=spec.renamed,
        replicas=spec.replicas,
        memory_mib=spec.memory_mib,
        gpus_per_node=spec.gpus_per_node,
        fail_requests_greater_than_one=fail,
        selector=selector,
        product_label=f"{r}.product",
        known_labels=MappingProxyType(known),
        thread_ceiling=100 // spec.replicas if mps else None,
        memory_ceiling_mib=(spec.memory_mib // spec.replicas) if mps and spec.memory_mib else None,
    )


def compile_policy(doc: PolicyDocument, source: str) -> Policy:
    spec = doc.spec
    classes = tuple(compile_node_class(c, i) for i, c in enumerate(spec.node_classes))
    by_resource: dict[str, list[NodeClass]] = {}
    for c in classes:
        by_resource.setdefault(c.advertised, []).append(c)
    return Policy(
        name=doc.metadata.name,
        source=source,
        # A policy with no node classes shares no device-plugin resource (its namespaces get
        # GPUs through DRA alone).
        shared_resources=frozenset(spec.shared_resources) if classes else frozenset(),
        runtime_class_name=spec.runtime_class_name,
        tolerations=tuple(tuple(t.as_k8s().items()) for t in spec.tolerations),
        tolerate_resource_taint=spec.tolerate_resource_taint,
        classes=classes,
        classes_by_resource=MappingProxyType({k: tuple(v) for k, v in by_resource.items()}),
        profiles=MappingProxyType(
            {
                n: Profile(n, p.active_thread_percentage, p.pinned_memory_mib)
                for n, p in spec.profiles.items()
            }
        ),
        default_profile=spec.default_profile,
        rules=spec.rules,
        mode=spec.mode,
        rule_modes=MappingProxyType(dict(spec.rule_modes)),
        allowed_host_paths=tuple(
            (a.path_prefix.rstrip("/") or "/", a.read_only)
            for a in spec.host_access.allowed_host_paths
        ),
        denied_host_paths=tuple(d.rstrip("/") or "/" for d in spec.host_access.denied_host_paths),
        trust_pod_security=spec.host_access.trust_pod_security,
        dra=None if spec.dra is None else compile_dra(spec.dra),
        profiles_are_ceilings=spec.profiles_are_ceilings,
        exclusive_gpus=compile_exclusive(spec.exclusive_gpus),
        driver_capabilities=(
            None if spec.driver_capabilities is None else tuple(spec.driver_capabilities)
        ),
    )


# --------------------------------------------------------------------------- loading


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(document)"


# What a value of each pattern is, in words, for `policy check` (pydantic says only that a
# string should match the pattern) and the chart's check (its schema carries them).
PATTERN_WORDS = {
    rf"^{_DNS_LABEL}$": "a DNS-1123 label (lower-case letters, digits and '-', starting and"
    " ending with a letter or digit, at most 63 characters)",
    rf"^{_DNS_SUBDOMAIN}$": "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.',"
    " each part starting and ending with a letter or digit, at most 253 characters)",
    rf"^{_LABEL_VALUE}$": "a label value as gpu-feature-discovery writes one (letters, digits,"
    " '-', '_' and '.', starting and ending with a letter or digit, at most 63 characters)",
    rf"^{_RESOURCE_NAME}$": "a resource the NVIDIA device plugin advertises"
    " (nvidia.com/gpu.shared, renamed as by default; nvidia.com/gpu with renameByDefault:"
    " false; a MIG profile's, such as nvidia.com/mig-1g.5gb.shared)",
    rf"^{_BASE_RESOURCE}$": "a device plugin resource before renaming (nvidia.com/gpu, or a MIG"
    " profile's such as nvidia.com/mig-1g.5gb; renamed: true adds .shared itself)",
    rf"^{_RESOURCE_PATTERN}$": "an NVIDIA resource name, * for any characters, such as"
    " nvidia.com/GA102GL_*",
    _HOST_PATH: "an absolute path written clean (no '//', and no '.' or '..' segment)",
    _QUANTITY: quantities.NOT_A_QUANTITY.removeprefix("is not "),
}
# A MIG profile in a name, however the rest of it is misspelt: 1g.5gb, 3g.40gb, 1g.10gb+me.
_MIG_PROFILE = re.compile(r"mig-(\d+g\.\d+gb(?:\+me)?)")


def _not_matching(pattern: str, value: Any) -> str:
    """A pattern failure in words, with the valid name closest to `value` where one is."""
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    if pattern == _HOST_PATH and isinstance(value, str):
        if not value.startswith("/"):
            return f"{shown} is not an absolute path"
        return f"{shown} is not clean (write {hostpaths.clean(value)!r})"
    words = PATTERN_WORDS.get(pattern)
    if words is None:
        return f"{shown} does not match {pattern}"
    said = f"{shown} is not {words}"
    resources = {rf"^{_RESOURCE_NAME}$": True, rf"^{_BASE_RESOURCE}$": False}
    if pattern not in resources or not isinstance(value, str):
        return said
    # The candidates: the plain GPU's names, or those of the MIG profile the value names.
    lower = value.strip().lower()
    profile = _MIG_PROFILE.search(lower)
    base = f"nvidia.com/mig-{profile.group(1)}" if profile else "nvidia.com/gpu"
    candidates = [base + SHARED_SUFFIX, base] if resources[pattern] else [base]
    close = difflib.get_close_matches(lower, candidates, n=1, cutoff=0.6)
    return f"{said}; did you mean {close[0]}?" if close else said


def _not_a_key(value: Any, expected: str) -> str:
    """A mapping's key that is not one of the names it takes (`expected`, as pydantic lists
    them: "'a', 'b' or 'c'"), with the closest of them."""
    allowed = re.findall(r"'([^']*)'", expected)
    close = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{value!r} is not one of the names allowed here{hint} (they are: {', '.join(allowed)})"


def _known_fields(loc: tuple[int | str, ...]) -> list[str]:
    """The fields, as a policy file writes them, of the object at `loc` of a policy document;
    none where that is not an object of the models."""
    current: Any = PolicyDocument
    for part in loc:
        current = _unoptional(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            found = [
                info.annotation
                for name, info in current.model_fields.items()
                if (info.alias or name) == part
            ]
            if not found:
                return []
            current = found[0]
        elif typing.get_origin(current) in (list, dict):
            current = typing.get_args(current)[-1]  # an item's index, a mapping's key
        else:
            return []
    current = _unoptional(current)
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return []
    return [info.alias or name for name, info in current.model_fields.items()]


def _unoptional(annotation: Any) -> Any:
    """`X | None` as X."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def _unknown_field(loc: tuple[int | str, ...]) -> str:
    """An unknown field: the known one it is closest to, else the ones its object takes."""
    *where, key = loc
    known = _known_fields(tuple(where))
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    if not close:  # a case slip (NodeClasses) is close whatever its length
        close = [k for k in known if k.lower() == str(key).lower()][:1]
    if close:
        return f"unknown field: did you mean {close[0]}? (unknown fields are refused, not ignored)"
    if known:
        return (
            "unknown field (a typo? unknown fields are refused, not ignored); the fields"
            f" known here: {', '.join(known)}"
        )
    return "unknown field (a typo? unknown fields are refused, not ignored)"


_FIELD_FIRST = re.compile(r"^([A-Za-z][\w.\[\]-]*): (.*)$", re.DOTALL)


def _describe(exc: pydantic.ValidationError) -> list[str]:
    problems = []
    for err in exc.errors(include_url=False):
        msg = err["msg"]
        loc = tuple(p for p in err["loc"] if p not in ("function-after[_coherent()]",))
        if err["type"] == "extra_forbidden":
            msg = _unknown_field(loc)
        elif err["type"] == "string_pattern_mismatch":
            msg = _not_matching(err.get("ctx", {}).get("pattern", ""), err["input"])
        elif err["type"] == "literal_error" and loc[-1:] == ("[key]",):
            msg = _not_a_key(err["input"], err.get("ctx", {}).get("expected", ""))
        elif err["type"] == "greater_than_equal" and loc[-1:] == ("replicas",):
            msg = f"{err['input']} is not sharing; the device plugin needs at least 2"
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        problems.extend(_placed(loc, msg))
    return problems


def _placed(loc: tuple[int | str, ...], message: str) -> list[str]:
    """A model validator's message at the model's location `loc`, as `<field path>: <reason>`
    lines: several problems come joined by newlines, each naming its field first, and that
    field goes into the path."""
    out = []
    for part in message.split("\n"):
        field = _FIELD_FIRST.match(part)
        if field and loc:
            out.append(f"{_location(loc)}.{field.group(1)}: {field.group(2)}")
        else:
            out.append(f"{_location(loc)}: {part}")
    return out


def parse_documents(text: str, source: str) -> tuple[list[Policy], list[str]]:
    """Validate and compile the policies in one file's text; returns (policies, problems)."""
    try:
        docs = documents.load(text, source)
    except InputError as exc:
        return [], [str(exc)]
    return _compiled(docs, source)


def _compiled(docs: list[Any], source: str) -> tuple[list[Policy], list[str]]:
    """The policies of a file's documents (as `documents.load` reads them), and the problems
    of those that are none."""
    policies: list[Policy] = []
    problems: list[str] = []
    numbered = [(i, d) for i, d in enumerate(docs, 1) if d is not None]
    if not numbered:
        return [], [documents.holds_none(source, "policy document")]
    for number, doc in numbered:
        label = source if len(docs) == 1 else f"{source} (document {number})"
        if not isinstance(doc, dict):
            problems.append(f"{label}: a policy is a mapping, not {type(doc).__name__}")
            continue
        try:
            model = PolicyDocument.model_validate(doc)
        except pydantic.ValidationError as exc:
            problems.extend(f"{label}: {p}" for p in _describe(exc))
            # And what the validators that did not run would say: all of it in one round.
            problems.extend(f"{label}: {p}" for p in unreached_problems(doc))
            continue
        policies.append(compile_policy(model, label))
    return policies, problems


# Not policies: the kustomization that turns the directory into the deploy/ ConfigMap.
NOT_POLICIES = frozenset({"kustomization.yaml", "kustomization.yml"})


def policy_files(directory: Path) -> list[Path]:
    """The policy files of a directory: its *.yaml and *.yml files, the kustomization aside."""
    return sorted(
        p
        for p in directory.iterdir()
        if p.suffix in (".yaml", ".yml") and p.name not in NOT_POLICIES and p.is_file()
    )


def load_directory(directory: str | Path) -> PolicySet:
    """Load every policy in `directory`; raise PolicyError listing every problem found."""
    path = Path(directory)
    if not path.is_dir():
        raise PolicyError([f"{path}: not a directory of policy files"])
    problems: list[str] = []
    loaded: list[Policy] = []
    files = policy_files(path)
    if not files:
        raise PolicyError([f"{path}: holds no *.yaml policy file"])
    for file in files:
        try:
            text = documents.read_file(file)
        except InputError as exc:
            problems.append(str(exc))
            continue
        found, errs = parse_documents(text, str(file))
        loaded.extend(found)
        problems.extend(errs)
    return build_set(loaded, problems)


def _declared(docs: list[Any]) -> list[str]:
    """The policy names documents declare, valid or not (for a file that does not load: its
    namespaces are then told which file and why)."""
    found = []
    for doc in docs:
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if isinstance(name, str) and name:
            found.append(name)
    return found


@dataclass(frozen=True, slots=True)
class FileLoad:
    """One policy file as read: its policies, or why they do not load."""

    source: str
    policies: tuple[Policy, ...]
    problems: tuple[str, ...]
    names: tuple[str, ...]  # what it declares, valid or not

    @classmethod
    def of(cls, text: str, source: str) -> FileLoad:
        """The policies of a file's text."""
        try:
            docs = documents.load(text, source)
        except InputError as exc:
            return cls.unusable(source, str(exc))
        found, problems = _compiled(docs, source)
        if problems:
            return cls(source, (), tuple(problems), tuple(_declared(docs)))
        return cls(source, tuple(found), (), tuple(p.name for p in found))

    @classmethod
    def of_bytes(cls, data: bytes, source: str) -> FileLoad:
        """The policies of a file's bytes."""
        try:
            text = documents.decode(data, source)
        except InputError as exc:
            return cls.unusable(source, str(exc))
        return cls.of(text, source)

    @classmethod
    def unusable(cls, source: str, problem: str) -> FileLoad:
        """A file that holds no document to read, for `problem` (its full line)."""
        return cls(source, (), (problem,), ())


def assemble(files: Iterable[FileLoad]) -> tuple[PolicySet, list[str]]:
    """The policies of the files that load, and the problems of the others: a policy file
    that does not load takes only its own policies out of force (their names go to
    `PolicySet.broken` with the file and the error), never the others'."""
    problems: list[str] = []
    good: list[Policy] = []
    broken: dict[str, str] = {}
    by_name: dict[str, str] = {}
    for f in files:
        clash = [n for n in f.names if n in by_name]
        if f.problems or clash:
            reasons = list(f.problems) or [
                f"{f.source}: metadata.name: policy {n!r} is already defined in {by_name[n]}"
                for n in clash
            ]
            problems.extend(reasons)
            more = f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""
            for name in f.names:
                broken.setdefault(name, reasons[0] + more)
            continue
        for p in f.policies:
            by_name[p.name] = f.source
        good.extend(f.policies)
    loaded = build_set(good)
    return PolicySet(
        loaded.policies,
        MappingProxyType({n: r for n, r in broken.items() if n not in loaded.policies}),
    ), problems


def build_set(policies: Iterable[Policy], problems: list[str] | None = None) -> PolicySet:
    """Assemble compiled policies into a set; two with one name are an error."""
    problems = list(problems or [])
    by_name: dict[str, Policy] = {}
    for p in policies:
        if p.name in by_name:
            problems.append(
                f"{p.source}: metadata.name: policy {p.name!r} is already defined in"
                f" {by_name[p.name].source}"
            )
            continue
        by_name[p.name] = p
    if problems:
        raise PolicyError(problems)
    all_profiles = {n for p in by_name.values() for n in p.profiles}
    # A class one policy lists as a GPU class is one in every policy with a dra section.
    gpu_classes = frozenset(c for p in by_name.values() if p.dra for c in p.dra.classes)
    return PolicySet(
        MappingProxyType(
            {
                name: dataclasses.replace(
                    p,
                    foreign_profiles=frozenset(all_profiles - set(p.profiles)),
                    gpu_claim_classes=frozenset(gpu_classes | set(names.DRA_NVIDIA_CLASSES)),
                )
                for name, p in by_name.items()
            }
        )
    )


def embedded_directory() -> Path:
    """The policies shipped with the package (the wheel embeds the repository's `policies/`)."""
    here = Path(__file__).resolve().parent.parent
    embedded = here / "_embedded" / "policies"
    if embedded.is_dir():
        return embedded
    # A source checkout or an editable install: the repository's own policies/.
    return here.parent / "policies"
