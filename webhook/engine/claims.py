"""Reviewing ResourceClaims and ResourceClaimTemplates: dynamic resource allocation (DRA).

A pod gets DRA devices through the claims it names, and a pod can only name claims (or
templates, one claim per pod) of its own namespace; every claim and template of an opted-in
namespace is created through the API server, where this review judges it against the
policy's `dra` section (docs/dra.md). The spec of both is immutable: a CREATE is the only
write that can change what a claim asks for.

What is judged, for each request of a GPU class the policy governs (`DraPolicy.governed`:
the classes it lists, and NVIDIA's own even where it does not list them), and for each
`firstAvailable` subrequest of one, one by one:

- the class must be allowed (`dra-class-not-allowed`);
- `allocationMode` must be ExactCount (`dra-all-devices`), `count` at most the class's
  `maxDevicesPerRequest` (`dra-too-many-devices`), `adminAccess` unset or false
  (`dra-admin-access`);
- each consumable capacity the class has a ceiling for must be asked for, at most that much
  (`dra-capacity`);
- every configuration of the class's driver that applies to it (its `requests` name it, or
  its request, or are empty) must be one the driver reads, of the class's kind, with the
  fields of that kind (`dra-config`), name a sharing strategy the class allows
  (`dra-sharing`), and keep MPS within the class's ceilings (`dra-mps-limits`);
- where the class allows no whole device (`allowWholeDevice: false`), the configuration the
  driver ends up applying to it must name a sharing strategy (`dra-whole-device`).

And for the claim as a whole: the devices of each class across its requests, at most the
class's `maxDevicesPerClaim` (`dra-too-many-devices`). Configurations that look meant for a
GPU request but that the driver will not apply to it are warned of.

Requests of other classes (a NIC) are not the webhook's business and pass.

The mutating review adds, to each GPU request of an allowed class that says so
(`addMpsConfig`, by default where the class allows MPS) and has no configuration of its
kind, the MPS configuration of the claim's profile (annotation `gpu-share.io/profile`, else
the policy's default): the DRA counterpart of the MPS env limits. The validating review
requires it in place.

`gather` finds all of this before any rule runs (`ClaimFacts`: the findings of the claim
rules, which have no check of their own, and what the MPS configuration would add);
`patch_mps_limits` is rule dra-mps-limits' patch; `reviewing.run_rules` runs them as it runs
a pod's rules (the same modes, the same order of the rules). The near misses are warnings,
told when the claim is not being validated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from webhook.engine.decision import (
    FIELD,
    MALFORMED,
    ErrorType,
    Marker,
    Place,
    Violation,
    added_value,
    shown,
)
from webhook.engine.placing import Finding
from webhook.policy import names, quantities
from webhook.policy.policies import DraClass, DraPolicy, Policy, Profile

if TYPE_CHECKING:
    from webhook.engine.rules import Pass

MIB: Final = 1024 * 1024
MPS: Final = "MPS"
STRATEGIES: Final = ("TimeSlicing", MPS)
INTERVALS: Final = ("Default", "Short", "Medium", "Long")
GPU_CONFIG: Final = "GpuConfig"
MIG_CONFIG: Final = "MigDeviceConfig"
VFIO_CONFIG: Final = "VfioDeviceConfig"
# The fields NVIDIA's driver reads (resource.nvidia.com/v1beta1), kind by kind: full GPUs
# and MIG devices take a sharing section, passthrough devices an IOMMU section. The driver
# decodes strictly, so any other field makes the claim fail on the node: refused here first.
CONFIG_FIELDS: Final = {
    GPU_CONFIG: frozenset({"apiVersion", "kind", "sharing"}),
    MIG_CONFIG: frozenset({"apiVersion", "kind", "sharing"}),
    VFIO_CONFIG: frozenset({"apiVersion", "kind", "iommu"}),
}
# A MIG device's sharing has no time-slice settings: `timeSlicingConfig` is refused apart,
# with its own reason.
SHARING_FIELDS: Final = frozenset({"strategy", "timeSlicingConfig", "mpsConfig"})
TIME_SLICING_FIELDS: Final = frozenset({"interval"})
# A passthrough device's IOMMU section: the backend policy (required: the driver refuses an
# empty one), and whether the IOMMU API device joins the claim's devices.
IOMMU_FIELDS: Final = frozenset({"backendPolicy", "enableAPIDevice"})
IOMMU_BACKENDS: Final = ("PreferIommuFD", "LegacyOnly")
# The name NVIDIA's GPU driver had before (classic DRA): a configuration for it is skipped by
# the driver of today, as any other driver's is.
OLD_DRIVER: Final = "gpu.resource.nvidia.com"
MPS_FIELDS: Final = frozenset(
    {
        "defaultActiveThreadPercentage",
        "defaultPinnedDeviceMemoryLimit",
        "defaultPerDevicePinnedMemoryLimit",
        "multiUser",
    }
)
THREADS: Final = "defaultActiveThreadPercentage"
PINNED: Final = "defaultPinnedDeviceMemoryLimit"
PER_DEVICE: Final = "defaultPerDevicePinnedMemoryLimit"
PROFILE_RULE: Final = "profile"
# Entries of a per-device limit that can mean anything: a device of the allocation (at most
# 32) by its index, or by its UUID.
MAX_PER_DEVICE: Final = 2 * names.DRA_MAX_REQUESTS
# How much of a name (a request, a map key) a message or a field path shows.
SHOWN_NAME: Final = 63


def is_claim(group: str, kind: str) -> bool:
    """Whether an object of `group` and `kind` is a claim or a claim template."""
    return group == names.DRA_GROUP and kind in (names.CLAIM_KIND, names.CLAIM_TEMPLATE_KIND)


def of_object(obj: Mapping[str, Any]) -> bool:
    """Whether `obj` (with its apiVersion and kind) is a claim or a claim template of
    `resource.k8s.io/v1`, the version the webhook is sent (older ones arrive converted) and
    reads. The offline commands say so of the others."""
    kind = obj.get("kind")
    return obj.get("apiVersion") == f"{names.DRA_GROUP}/{names.DRA_VERSION}" and kind in (
        names.CLAIM_KIND,
        names.CLAIM_TEMPLATE_KIND,
    )


class Target(NamedTuple):
    """One request, or one subrequest of a `firstAvailable` request, of a governed class."""

    name: str  # "gpu", or "gpu/large" for a subrequest
    request: str  # the request's name
    field: str  # its field path, relative to the claim spec
    pointer: str  # its JSON Pointer, relative to the claim spec
    spec: Mapping[str, Any]  # the `exactly` object, or the subrequest
    cls: DraClass
    subrequest: bool


class Config(NamedTuple):
    """One entry of `devices.config` of the class's driver."""

    position: int
    driver: str
    requests: frozenset[str]  # empty: every request
    parameters: Any


class MpsAddition(NamedTuple):
    """The MPS configurations the claim is given (rule dra-mps-limits' patch,
    `patch_mps_limits`): one entry per request of `missing` within the class's ceilings."""

    profile: str
    entries: tuple[dict[str, Any], ...]
    # Each request that has no configuration of its kind: (its field, how messages name it).
    missing: tuple[tuple[str, str], ...]
    label: str  # how messages name the claim
    pointer: str  # of `devices.config`
    existing: int | None  # how many entries `devices.config` has (None: no list)


class ClaimFacts:
    """What is known of one claim (or template) under one policy before the rules run: what
    its rules find (`findings`: they have no check of their own), where its spec stands
    (`place`), what the MPS patch would add (`mps`), and the near misses told when it is
    not being validated (`hints`)."""

    __slots__ = ("findings", "hints", "mps", "place")

    def __init__(
        self,
        place: Place,
        findings: tuple[Finding, ...] = (),
        hints: tuple[str, ...] = (),
        mps: MpsAddition | None = None,
    ) -> None:
        self.place: Final = place
        self.findings: Final = findings
        self.hints: Final = hints
        self.mps: Final = mps


class _Reading:
    """One claim (or template) being read: what is found and warned of."""

    def __init__(self, obj: Mapping[str, Any], policy: Policy, dra: DraPolicy) -> None:
        self.policy: Final = policy
        self.dra: Final = dra
        template = obj.get("kind") == names.CLAIM_TEMPLATE_KIND
        self.template: Final = template
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        name = meta.get("name") or meta.get("generateName") or ""
        what = "claim template" if template else "claim"
        self.label: Final = f"{what} {shown(name if isinstance(name, str) else '')}"
        self.place: Final = _place(obj)
        self.violations: list[Violation] = []
        self.warnings: list[str] = []
        self.mps: MpsAddition | None = None
        self.meta: Final[Mapping[str, Any]] = meta
        # Where the claim names its profile (None: the policy's default applies).
        self.profile_field: str | None = None

    def facts(self) -> ClaimFacts:
        return ClaimFacts(
            self.place,
            tuple(Finding(v.rule, v) for v in self.violations),
            tuple(self.warnings),
            self.mps,
        )

    def deny(self, rule: str, type: ErrorType, field: str, *words: str | Marker) -> None:
        self.violations.append(Violation(rule, type, field, words, None, self.place))

    def wrong(self, field: str, expected: str, value: object) -> None:
        self.violations.append(
            Violation(
                MALFORMED,
                ErrorType.TYPE_INVALID,
                field,
                (
                    f"{self.label}: ",
                    FIELD,
                    f": must be {expected}, not {_type_name(value)}: no Kubernetes object has"
                    " this shape. Fix the field (the API server would refuse it too)",
                ),
                None,
                self.place,
            )
        )


def _cut(name: object) -> str:
    """A name of the object (a key, a request) as a message or a field path shows it."""
    text = name if isinstance(name, str) else repr(name)
    return text if len(text) <= SHOWN_NAME else text[: SHOWN_NAME - 3] + "..."


def _value(value: object) -> str:
    """A value of the object for a message: numbers as numbers, others quoted."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return shown(value)


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def gather(obj: Mapping[str, Any], policy: Policy) -> ClaimFacts:
    """What the rules find in a ResourceClaim or ResourceClaimTemplate (see the module), and
    what the MPS patch would add.

    A claim is read from the generic dict, not a typed view: claims are rare beside pods, and
    the typed view is kept for the hot path."""
    place = _place(obj)
    if policy.unavailable is not None:
        return _ungoverned(obj, policy, policy.unavailable)
    dra = policy.dra
    if dra is None and not policy.rules.deny_resource_claims:
        # The policy's own choice (`denyResourceClaims: false`): claims pass, ungoverned.
        return ClaimFacts(place)
    if dra is None:
        return _ungoverned(
            obj,
            policy,
            (
                "resource-claims",
                f'policy "{policy.name}" has no dra section: its pods may not use claims, and'
                " a claim made now would serve them once it has one. Ask for"
                f" {policy.preferred_resource} instead, or ask the cluster admin for a policy"
                " that governs DRA",
            ),
        )
    r = _Reading(obj, policy, dra)
    spec = _claim_spec(r, obj)
    if spec is None:
        return r.facts()
    devices = spec.get("devices")
    if devices is None:
        return r.facts()
    if not isinstance(devices, dict):
        r.wrong("devices", "an object", devices)
        return r.facts()
    targets = _targets(r, devices)
    configs = _configs(r, devices, {t.cls.driver for t in targets})
    if r.violations and any(v.rule == MALFORMED for v in r.violations):
        return r.facts()
    _near_misses(r, devices, targets, configs)
    # The profile matters where a request may be given its MPS configuration.
    profile = _profile(r, obj) if any(t.cls.allowed and _sized(t) for t in targets) else None
    profile_refused = any(v.rule == PROFILE_RULE for v in r.violations)
    missing: list[Target] = []
    opened: list[Target] = []
    # A configuration that applies to several requests of one class is judged once.
    judged: set[tuple[int, str]] = set()
    for t in targets:
        if not _judge_request(r, t):
            continue
        opened.append(t)
        applying = [c for c in configs if _applies(c, t)]
        # Those that name it, and those for every request of its kind; one the driver cannot
        # read at all (an unknown kind) fails every device of the driver on the node.
        kinds = [
            c
            for c in applying
            if c.requests
            or _kind_of(c.parameters) == t.cls.config_kind
            or not _readable(c.parameters)
        ]
        for c in kinds:
            if (c.position, t.cls.name) not in judged:
                judged.add((c.position, t.cls.name))
                _judge_config(r, t, c)
        if not kinds and _sized(t) and profile is not None:
            missing.append(t)
    if missing and profile is not None:
        _add_profile(r, devices, missing, profile)
    _judge_claim_total(r, opened)
    # What the review adds (or, validating, requires) ends those requests with MPS; unless
    # the rule is in dry-run, where nothing is added.
    sized: set[str] = set()
    if r.policy.mode_of("dra-mps-limits") != names.DRY_RUN:
        sized = {t.name for t in missing}
    for t in opened:
        if t.cls.allow_whole_device or t.cls.capacity or t.name in sized:
            continue
        if profile_refused and _sized(t):
            continue  # the unknown profile is the one thing to fix
        _judge_whole(r, t, configs)
    return r.facts()


def _place(obj: Mapping[str, Any]) -> Place:
    """Where the claim's spec stands: a template's is `spec.spec`."""
    if obj.get("kind") == names.CLAIM_TEMPLATE_KIND:
        return Place("/spec/spec", "spec.spec", "")
    return Place("/spec", "spec", "")


def _ungoverned(obj: Mapping[str, Any], policy: Policy, why: tuple[str, str]) -> ClaimFacts:
    """A claim where nothing judges claims: the namespace's policy has no `dra` section, or
    is not in force (its file does not load, or the label names none). A claim of a GPU
    class made now would serve pods once the namespace's policy governs DRA, unreviewed: it
    is refused, saying why; claims of other classes pass."""
    spec = obj.get("spec")
    template = obj.get("kind") == names.CLAIM_TEMPLATE_KIND
    if template and isinstance(spec, dict):
        spec = spec.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    if not isinstance(requests, list):
        return ClaimFacts(_place(obj))
    classes = policy.gpu_claim_classes
    for request in requests[: names.DRA_MAX_REQUESTS]:
        if not isinstance(request, dict):
            continue
        asked = [request.get("exactly")]
        first = request.get("firstAvailable")
        if isinstance(first, list):
            asked += first[: names.DRA_MAX_SUBREQUESTS]
        if any(
            isinstance(a, dict) and isinstance(a.get("deviceClassName"), str)
            and a["deviceClassName"] in classes
            for a in asked
        ):
            rule, message = why
            meta = obj.get("metadata")
            name = meta.get("name") if isinstance(meta, dict) else None
            what = f"{'claim template' if template else 'claim'} {shown(name or '')}"
            v = Violation(rule, ErrorType.FORBIDDEN, "metadata.namespace", (f"{what}: {message}",))
            return ClaimFacts(_place(obj), (Finding(rule, v),))
    return ClaimFacts(_place(obj))


def _claim_spec(r: _Reading, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec = obj.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, dict):
        r.violations.append(
            Violation(
                MALFORMED,
                ErrorType.TYPE_INVALID,
                "spec",
                (
                    f"{r.label}: ",
                    FIELD,
                    f": must be an object, not {_type_name(spec)}: no Kubernetes object has"
                    " this shape. Fix the field (the API server would refuse it too)",
                ),
                None,
                Place("", "", ""),
            )
        )
        return None
    if not r.template:
        return spec
    inner = spec.get("spec")
    if inner is None or isinstance(inner, dict):
        return inner
    r.wrong("", "an object", inner)
    return None


def _objects(
    r: _Reading, node: Mapping[str, Any], key: str, where: str, most: int
) -> list[tuple[int, str, Mapping[str, Any]]]:
    """The objects of the list `node[key]` with their field paths; what is not an object,
    and a list of more than `most` (which the API server refuses, after the mutating
    webhooks), is reported malformed."""
    items = node.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        r.wrong(f"{where}.{key}", "a list", items)
        return []
    if len(items) > most:
        _too_many(r, f"{where}.{key}", len(items), most)
        return []
    out: list[tuple[int, str, Mapping[str, Any]]] = []
    for i, item in enumerate(items):
        at = f"{where}.{key}[{i}]"
        if isinstance(item, dict):
            out.append((i, at, item))
        else:
            r.wrong(at, "an object", item)
    return out


def _too_many(r: _Reading, field: str, found: int, most: int) -> None:
    r.violations.append(
        Violation(
            MALFORMED,
            ErrorType.TOO_MANY,
            field,
            (
                f"{r.label}: ",
                FIELD,
                f": {found} items; Kubernetes takes at most {most} here (the API server would"
                " refuse it too)",
            ),
            None,
            r.place,
        )
    )


def _targets(r: _Reading, devices: Mapping[str, Any]) -> list[Target]:
    """The requests and subrequests of governed classes, in their order."""
    out: list[Target] = []
    for _, where, request in _objects(r, devices, "requests", "devices", names.DRA_MAX_REQUESTS):
        name = request.get("name")
        if not isinstance(name, str) or not _is_label(name):
            _not_a_label(r, f"{where}.name", name)
            continue
        exactly = request.get("exactly")
        if exactly is not None:
            if not isinstance(exactly, dict):
                r.wrong(f"{where}.exactly", "an object", exactly)
            else:
                t = _target(r, exactly, name, name, f"{where}.exactly", subrequest=False)
                if t is not None:
                    out.append(t)
        for _, at, sub in _objects(r, request, "firstAvailable", where, names.DRA_MAX_SUBREQUESTS):
            sub_name = sub.get("name")
            if not isinstance(sub_name, str) or not _is_label(sub_name):
                _not_a_label(r, f"{at}.name", sub_name)
                continue
            t = _target(r, sub, f"{name}/{sub_name}", name, at, subrequest=True)
            if t is not None:
                out.append(t)
    return out


_LABEL: Final = re.compile(names.DNS1123_LABEL)


def _is_label(name: str) -> bool:
    return len(name) <= 63 and _LABEL.fullmatch(name) is not None


def _not_a_label(r: _Reading, field: str, value: object) -> None:
    """A request's name that is no DNS label: the API server refuses it (it is how pods and
    configurations name the request); bad input, as a field of the wrong type is."""
    if not isinstance(value, str):
        r.wrong(field, "a string", value)
        return
    r.violations.append(
        Violation(
            MALFORMED,
            ErrorType.INVALID,
            field,
            (
                f"{r.label}: ",
                FIELD,
                f": {shown(value)} is not a DNS label (lower-case letters, digits and '-', at"
                " most 63 characters). Fix the name (the API server would refuse it too)",
            ),
            None,
            r.place,
        )
    )


def _target(
    r: _Reading, spec: Mapping[str, Any], name: str, request: str, field: str, *, subrequest: bool
) -> Target | None:
    class_name = spec.get("deviceClassName")
    if not isinstance(class_name, str):
        if class_name is not None:
            r.wrong(f"{field}.deviceClassName", "a string", class_name)
        return None
    cls = r.policy.dra_class(class_name)
    if cls is None:
        return None
    pointer = "/" + field.replace(".", "/").replace("[", "/").replace("]", "")
    return Target(name, request, field, pointer, spec, cls, subrequest)


def _configs(r: _Reading, devices: Mapping[str, Any], drivers: set[str]) -> list[Config]:
    """The entries of `devices.config` for the drivers of the governed classes."""
    out: list[Config] = []
    for i, where, entry in _objects(r, devices, "config", "devices", names.DRA_MAX_CONFIGS):
        requests = entry.get("requests")
        if isinstance(requests, list) and len(requests) > names.DRA_MAX_REQUESTS:
            # The API server takes at most 32 names (after the mutating webhooks).
            _too_many(r, f"{where}.requests", len(requests), names.DRA_MAX_REQUESTS)
            continue
        if requests is not None and (
            not isinstance(requests, list) or not all(isinstance(n, str) for n in requests)
        ):
            r.wrong(f"{where}.requests", "a list of strings", requests)
            continue
        opaque = entry.get("opaque")
        if opaque is None:
            continue
        if not isinstance(opaque, dict):
            r.wrong(f"{where}.opaque", "an object", opaque)
            continue
        driver = opaque.get("driver")
        if not isinstance(driver, str):
            r.wrong(f"{where}.opaque.driver", "a string", driver)
            continue
        if driver not in drivers:
            continue
        out.append(Config(i, driver, frozenset(requests or ()), opaque.get("parameters")))
    return out


def _applies(c: Config, t: Target) -> bool:
    """Whether configuration `c` applies to `t`: it is for the driver of `t`'s class, and
    its requests are empty (all), or name the request (all its subrequests), or the
    subrequest itself."""
    return c.driver == t.cls.driver and (
        not c.requests or t.request in c.requests or t.name in c.requests
    )


def _sized(t: Target) -> bool:
    """Whether a request of an allowed class would be given the profile's MPS configuration
    when it has none: its class says so (`addMpsConfig`), allows MPS, and does not share
    devices by capacity (the driver refuses MPS while its consumable shares are on), nor
    does the request ask for capacity."""
    capacity = t.spec.get("capacity")
    return t.cls.add_mps and MPS in t.cls.sharing and not t.cls.capacity and not capacity


KINDS: Final = frozenset(CONFIG_FIELDS)


def _readable(parameters: Any) -> bool:
    """Whether the driver can decode `parameters` as one of its configuration kinds."""
    return (
        isinstance(parameters, dict)
        and parameters.get("apiVersion") == names.DRA_CONFIG_API_VERSION
        and parameters.get("kind") in KINDS
    )


def _kind_of(parameters: Any) -> str | None:
    kind = parameters.get("kind") if isinstance(parameters, dict) else None
    return kind if isinstance(kind, str) else None


def _what(r: _Reading, t: Target) -> str:
    which = "subrequest" if t.subrequest else "request"
    return f'{r.label} {which} "{t.name}": '


def _judge_request(r: _Reading, t: Target) -> bool:
    """The request's own fields; False when its class is not allowed (nothing else said)."""
    cls, spec, what = t.cls, t.spec, _what(r, t)
    if not cls.allowed:
        allowed = ", ".join(r.dra.allowed) or "none"
        r.deny(
            "dra-class-not-allowed",
            ErrorType.FORBIDDEN,
            f"{t.field}.deviceClassName",
            what,
            FIELD,
            f': device class "{cls.name}" is not one policy "{r.policy.name}" allows (it'
            f" allows: {allowed}). Ask for one of those, or ask the cluster admin to allow"
            " the class in the policy's dra section",
        )
        return False
    mode = spec.get("allocationMode")
    if mode is not None and mode != "ExactCount":
        if not isinstance(mode, str):
            r.wrong(f"{t.field}.allocationMode", "a string", mode)
            return False
        if mode == "All":
            words = (
                f': All asks for every matching device of class "{cls.name}" on the node.'
                f" Remove it, and set count (at most {cls.max_devices})"
            )
        else:
            words = (
                f": {shown(mode)} is no allocation mode the webhook knows. Use ExactCount, with"
                f" count at most {cls.max_devices}"
            )
        r.deny(
            "dra-all-devices",
            ErrorType.FORBIDDEN if mode == "All" else ErrorType.NOT_SUPPORTED,
            f"{t.field}.allocationMode",
            what,
            FIELD,
            words,
        )
    else:
        count = spec.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool):
            r.wrong(f"{t.field}.count", "an integer", count)
        elif count < 1:
            r.wrong(f"{t.field}.count", "a number of devices (1 or more)", count)
        elif count > cls.max_devices:
            r.deny(
                "dra-too-many-devices",
                ErrorType.FORBIDDEN,
                f"{t.field}.count",
                what,
                FIELD,
                f': {count} devices of class "{cls.name}"; policy "{r.policy.name}" allows'
                f" at most {cls.max_devices} per request. Set count to {cls.max_devices} or"
                " less",
            )
    _forbidden(
        r,
        t,
        "adminAccess",
        bool,
        rule="dra-admin-access",
        words=f': admin access reaches devices of class "{cls.name}" that are in use by others,'
        " outside any allocation. Remove it (monitoring tools belong in a namespace that has"
        " not opted in)",
    )
    _forbidden(
        r,
        t,
        "tolerations",
        list,
        rule="dra-device-tolerations",
        words=f': tolerating device taints reaches GPUs of class "{cls.name}" that an admin took'
        " out of use (maintenance, reserved, unhealthy). Remove them",
    )
    if cls.capacity:
        _judge_capacity(r, t)
    return True


def _forbidden(r: _Reading, t: Target, key: str, kind: type, *, rule: str, words: str) -> None:
    """A field of the request that a GPU request may not set (true, or not empty)."""
    value = t.spec.get(key)
    if value is not None and not isinstance(value, kind):
        r.wrong(f"{t.field}.{key}", "a boolean" if kind is bool else "a list", value)
    elif value:
        r.deny(rule, ErrorType.FORBIDDEN, f"{t.field}.{key}", _what(r, t), FIELD, words)


def _judge_capacity(r: _Reading, t: Target) -> None:
    cls, what = t.cls, _what(r, t)
    capacity = t.spec.get("capacity")
    asked: Mapping[str, Any] = {}
    if capacity is not None:
        if not isinstance(capacity, dict):
            r.wrong(f"{t.field}.capacity", "an object", capacity)
            return
        raw = capacity.get("requests")
        if raw is not None and not isinstance(raw, dict):
            r.wrong(f"{t.field}.capacity.requests", "an object", raw)
            return
        asked = raw or {}
    # A capacity of the driver may be named bare (`memory`) or qualified by the driver's
    # domain (`gpu.nvidia.com/memory`): the same capacity.
    own = f"{cls.driver}/"
    by_name: dict[str, list[tuple[str, Any]]] = {}
    for key, value in asked.items():
        # Written both ways, each is judged.
        by_name.setdefault(key.removeprefix(own), []).append((key, value))
    for name, written, ceiling in cls.capacity:
        bare = name.removeprefix(own)
        found = by_name.get(bare)
        field = f"{t.field}.capacity.requests"
        if not found:
            r.deny(
                "dra-capacity",
                ErrorType.REQUIRED,
                field,
                what,
                FIELD,
                f": no {bare} asked for; without it the driver may give the whole device of"
                f' class "{cls.name}". Set capacity.requests.{bare} to at most {written}',
            )
            continue
        for key, value in found:
            try:
                amount = quantities.parse(value)
            except quantities.QuantityError as exc:
                r.deny(
                    "dra-capacity",
                    ErrorType.INVALID,
                    f"{field}[{_cut(key)}]",
                    what,
                    FIELD,
                    f": {shown(value)} {exc}. Set a quantity of at most {written}",
                )
                continue
            if amount <= 0:
                r.deny(
                    "dra-capacity",
                    ErrorType.INVALID,
                    f"{field}[{_cut(key)}]",
                    what,
                    FIELD,
                    f": {shown(value)} is not more than zero. Set a quantity of at most {written}",
                )
            elif amount > ceiling:
                r.deny(
                    "dra-capacity",
                    ErrorType.FORBIDDEN,
                    f"{field}[{_cut(key)}]",
                    what,
                    FIELD,
                    f': {shown(value)} is more than policy "{r.policy.name}" allows of class'
                    f' "{cls.name}" ({written}). Ask for {written} or less',
                )


def _judge_config(r: _Reading, t: Target, c: Config) -> None:
    """One configuration that applies to `t` (see the module)."""
    cls, what = t.cls, _what(r, t)
    base = f"devices.config[{c.position}].opaque.parameters"
    p = c.parameters
    if not isinstance(p, dict):
        r.deny(
            "dra-config",
            ErrorType.TYPE_INVALID,
            base,
            what,
            FIELD,
            f": the {cls.driver} driver reads an object here, not {_type_name(p)}. Write a"
            f" {cls.config_kind} of {names.DRA_CONFIG_API_VERSION}",
        )
        return
    api_version, kind = p.get("apiVersion"), p.get("kind")
    if api_version != names.DRA_CONFIG_API_VERSION or kind != cls.config_kind:
        r.deny(
            "dra-config",
            ErrorType.NOT_SUPPORTED,
            base,
            what,
            FIELD,
            f": {shown(api_version)} {shown(kind)} is not what the {cls.driver} driver takes"
            f' for devices of class "{cls.name}" (the claim would fail on the node). Write'
            f" apiVersion {names.DRA_CONFIG_API_VERSION}, kind {cls.config_kind}",
        )
        return
    if kind == VFIO_CONFIG:
        if "sharing" in p:
            _bad_config(r, t, f"{base}.sharing", "passthrough devices are not shared; remove it")
        elif _known_fields(r, t, p, CONFIG_FIELDS[VFIO_CONFIG], base):
            _judge_iommu(r, t, p.get("iommu"), f"{base}.iommu")
        return
    if not _known_fields(r, t, p, CONFIG_FIELDS[kind], base):
        return
    sharing = p.get("sharing")
    if sharing is None:
        return
    at = f"{base}.sharing"
    if not isinstance(sharing, dict):
        _bad_config(r, t, at, f"must be an object, not {_type_name(sharing)}")
        return
    if not _known_fields(r, t, sharing, SHARING_FIELDS, at):
        return
    strategy = sharing.get("strategy")
    if strategy not in STRATEGIES:
        _bad_config(
            r,
            t,
            f"{at}.strategy",
            f"{shown(strategy) if strategy is not None else 'no strategy'}: the driver knows"
            " TimeSlicing and MPS",
        )
        return
    assert isinstance(strategy, str)
    if strategy not in cls.sharing:
        offered = " or ".join(cls.sharing)
        fix = (
            f"Use {offered}, or remove the sharing section"
            if offered
            else "Remove the sharing section (the driver then time-slices by default)"
        )
        r.deny(
            "dra-sharing",
            ErrorType.NOT_SUPPORTED,
            f"{at}.strategy",
            what,
            FIELD,
            f': {strategy} is not a sharing strategy policy "{r.policy.name}" allows on class'
            f' "{cls.name}". {fix}',
        )
        return
    slicing, mps = sharing.get("timeSlicingConfig"), sharing.get("mpsConfig")
    if strategy == "TimeSlicing":
        if mps is not None:
            _bad_config(r, t, f"{at}.mpsConfig", "is for strategy MPS; remove it")
        if slicing is None:
            return
        if kind == MIG_CONFIG:
            _bad_config(
                r, t, f"{at}.timeSlicingConfig", "MIG devices take no time-slice; remove it"
            )
            return
        if not isinstance(slicing, dict):
            _bad_config(r, t, f"{at}.timeSlicingConfig", "must be an object")
            return
        if not _known_fields(r, t, slicing, TIME_SLICING_FIELDS, f"{at}.timeSlicingConfig"):
            return
        interval = slicing.get("interval")
        if interval is not None and interval not in INTERVALS:
            _bad_config(
                r,
                t,
                f"{at}.timeSlicingConfig.interval",
                f"{shown(interval)}: the driver knows {', '.join(INTERVALS)}",
            )
        return
    if slicing is not None:
        _bad_config(r, t, f"{at}.timeSlicingConfig", "is for strategy TimeSlicing; remove it")
    if mps is None:
        mps = {}
    if not isinstance(mps, dict):
        _bad_config(r, t, f"{at}.mpsConfig", "must be an object")
        return
    if not _known_fields(r, t, mps, MPS_FIELDS, f"{at}.mpsConfig"):
        return
    _judge_mps(r, t, mps, f"{at}.mpsConfig")


def _judge_iommu(r: _Reading, t: Target, iommu: Any, at: str) -> None:
    """A passthrough device's `iommu` section, as the driver decodes and checks it."""
    if iommu is None:
        return
    if not isinstance(iommu, dict):
        _bad_config(r, t, at, f"must be an object, not {_type_name(iommu)}")
        return
    if not _known_fields(r, t, iommu, IOMMU_FIELDS, at):
        return
    backend = iommu.get("backendPolicy")
    if backend not in IOMMU_BACKENDS:
        said = shown(backend) if backend is not None else "unset"
        _bad_config(
            r,
            t,
            f"{at}.backendPolicy",
            f"{said}: the driver knows {' and '.join(IOMMU_BACKENDS)} (and refuses any other)",
        )
    api = iommu.get("enableAPIDevice")
    if api is not None and not isinstance(api, bool):
        _bad_config(r, t, f"{at}.enableAPIDevice", f"must be true or false, not {_type_name(api)}")


def _known_fields(
    r: _Reading, t: Target, node: Mapping[str, Any], known: frozenset[str], at: str
) -> bool:
    unknown = sorted(k for k in node if k not in known)
    if not unknown:
        return True
    _bad_config(
        r,
        t,
        f"{at}.{unknown[0]}",
        "is no field the driver reads (it refuses unknown fields, on the node); remove it",
    )
    return False


def _bad_config(r: _Reading, t: Target, field: str, words: str) -> None:
    r.deny(
        "dra-config",
        ErrorType.INVALID,
        field,
        _what(r, t),
        FIELD,
        f": {words}",
    )


def _judge_mps(r: _Reading, t: Target, mps: Mapping[str, Any], at: str) -> None:
    cls, what = t.cls, _what(r, t)
    threads = mps.get(THREADS)
    ceiling = cls.max_thread_percentage
    if threads is not None and (
        not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 100
    ):
        r.deny(
            "dra-mps-limits",
            ErrorType.INVALID,
            f"{at}.{THREADS}",
            what,
            FIELD,
            f": {_value(threads)} is not a percentage the webhook admits (a whole number 1..100)",
        )
    elif ceiling is not None and (threads is None or threads > ceiling):
        said = "unset (100%)" if threads is None else f"{threads}%"
        r.deny(
            "dra-mps-limits",
            ErrorType.FORBIDDEN,
            f"{at}.{THREADS}",
            what,
            FIELD,
            f': {said} is above the ceiling of class "{cls.name}" in policy'
            f' "{r.policy.name}" ({ceiling}%). Set {THREADS} to {ceiling} or less',
        )
    limit = cls.max_pinned_memory_mib
    pinned = mps.get(PINNED)
    if pinned is not None or limit is not None:
        _judge_pinned(r, t, pinned, f"{at}.{PINNED}", limit, required=True)
    per_device = mps.get(PER_DEVICE)
    if per_device is None:
        return
    if not isinstance(per_device, dict):
        _bad_config(r, t, f"{at}.{PER_DEVICE}", "must be an object")
        return
    if len(per_device) > MAX_PER_DEVICE:
        _bad_config(
            r,
            t,
            f"{at}.{PER_DEVICE}",
            f"{len(per_device)} entries; an allocation holds at most {names.DRA_MAX_REQUESTS}"
            " devices, each named by its index or its UUID: write at most"
            f" {MAX_PER_DEVICE}",
        )
        return
    for key, value in per_device.items():
        _judge_pinned(r, t, value, f"{at}.{PER_DEVICE}[{_cut(key)}]", limit, required=False)


def _judge_pinned(
    r: _Reading, t: Target, value: Any, field: str, limit: int | None, *, required: bool
) -> None:
    cls, what = t.cls, _what(r, t)
    if value is None:
        if required and limit is not None:
            r.deny(
                "dra-mps-limits",
                ErrorType.REQUIRED,
                field,
                what,
                FIELD,
                f': unset, so unlimited; class "{cls.name}" in policy "{r.policy.name}" allows'
                f" {limit}Mi. Set it to {limit}Mi or less",
            )
        return
    try:
        amount = quantities.parse(value)
    except quantities.QuantityError as exc:
        r.deny(
            "dra-mps-limits",
            ErrorType.INVALID,
            field,
            what,
            FIELD,
            f": {shown(value)} {exc}. Write a quantity such as 4Gi",
        )
        return
    if amount < MIB:
        r.deny(
            "dra-mps-limits",
            ErrorType.INVALID,
            field,
            what,
            FIELD,
            f": {shown(value)} is under 1Mi, which the driver refuses. Write a quantity such"
            " as 4Gi",
        )
    elif limit is not None and amount > Fraction(limit * MIB):
        r.deny(
            "dra-mps-limits",
            ErrorType.FORBIDDEN,
            field,
            what,
            FIELD,
            f': {shown(value)} is above the ceiling of class "{cls.name}" in policy'
            f' "{r.policy.name}" ({limit}Mi). Set it to {limit}Mi or less',
        )


# ------------------------------------------------------------- what a request ends with


def _effective(configs: list[Config], t: Target) -> Config | None:
    """The configuration NVIDIA's driver applies to the device of `t`: the last of the
    claim's that names it (`req`, or `req/sub` for a subrequest: the driver compares names
    exactly, so one naming only the request of a subrequest is not it), or that names no
    request and is of the kind of `t`'s class. None: the driver's own default, the whole
    device. (A DeviceClass's own configuration comes before the claim's, and the webhook
    does not see it.)"""
    for config in configs[::-1]:
        if config.driver != t.cls.driver:
            continue
        if t.name in config.requests:
            return config
        if not config.requests and _kind_of(config.parameters) == t.cls.config_kind:
            return config
    return None


def _shares(parameters: Any) -> bool:
    """Whether a configuration names a sharing strategy (one the driver knows)."""
    sharing = parameters.get("sharing") if isinstance(parameters, dict) else None
    return isinstance(sharing, dict) and sharing.get("strategy") in STRATEGIES


def _judge_whole(r: _Reading, t: Target, configs: list[Config]) -> None:
    """A request of a class that allows no whole device must end with a sharing
    configuration (`allowWholeDevice: false`, rule dra-whole-device)."""
    cls = t.cls
    found = _effective(configs, t)
    if found is not None and (
        _shares(found.parameters) or _kind_of(found.parameters) != cls.config_kind
    ):
        return  # (one of another kind is refused by dra-config)
    offered = " or ".join(cls.sharing)
    refusal = f'; policy "{r.policy.name}" allows no whole device of class "{cls.name}"'
    if found is not None:
        r.deny(
            "dra-whole-device",
            ErrorType.FORBIDDEN,
            f"devices.config[{found.position}].opaque.parameters",
            _what(r, t),
            FIELD,
            f": a {cls.config_kind} without sharing gives the whole device{refusal}. Add"
            f" sharing with strategy {offered}",
        )
        return
    parents = [c for c in configs if t.subrequest and t.request in c.requests]
    skipped = ""
    if parents:
        skipped = (
            f' (devices.config[{parents[-1].position}] names request "{_cut(t.request)}";'
            f' the driver applies to the subrequest only a configuration naming "{_cut(t.name)}")'
        )
    fix = f'Add a {cls.config_kind} for "{_cut(t.name)}" with sharing strategy {offered}'
    r.deny(
        "dra-whole-device",
        ErrorType.FORBIDDEN,
        t.field,
        _what(r, t),
        FIELD,
        f": no sharing configuration{skipped}, so the driver gives the whole device{refusal}."
        f" {fix}",
    )


def _count(t: Target) -> int | None:
    """How many devices `t` takes: its count (ExactCount); None where that is not a number
    of devices (reported on its own)."""
    mode = t.spec.get("allocationMode")
    count = t.spec.get("count", 1)
    if mode not in (None, "ExactCount") or not isinstance(count, int) or isinstance(count, bool):
        return None
    return count if count >= 1 else None


def _judge_claim_total(r: _Reading, opened: list[Target]) -> None:
    """The devices of each class one claim takes across its requests, at most the class's
    `maxDevicesPerClaim` (rule dra-too-many-devices). A firstAvailable request counts, per
    class, its largest subrequest: the one the scheduler may choose."""
    by_request: dict[str, dict[str, int]] = {}
    classes: dict[str, DraClass] = {}
    for t in opened:
        count = _count(t)
        if t.cls.max_devices_per_claim is None or count is None:
            continue
        classes[t.cls.name] = t.cls
        largest = by_request.setdefault(t.request, {})
        largest[t.cls.name] = max(largest.get(t.cls.name, 0), count)
    for name, cls in classes.items():
        counts = [largest[name] for largest in by_request.values() if name in largest]
        total, most = sum(counts), cls.max_devices_per_claim
        if most is None or total <= most:
            continue
        many = f"{len(counts)} requests" if len(counts) > 1 else "1 request"
        r.deny(
            "dra-too-many-devices",
            ErrorType.FORBIDDEN,
            "devices.requests",
            f"{r.label}: ",
            FIELD,
            f': {total} devices of class "{name}" in {many}; policy "{r.policy.name}" allows'
            f" at most {most} per claim. Ask for {most} or fewer in all",
        )


def _near_misses(
    r: _Reading, devices: Mapping[str, Any], targets: list[Target], configs: list[Config]
) -> None:
    """Configurations that look meant for a GPU request but that the driver will not apply
    to it, warned of: one for NVIDIA's driver by its old name (or of NVIDIA's kinds, for
    another driver), and one naming the request of `firstAvailable` subrequests (the driver
    applies to a subrequest only a configuration naming `req/sub`)."""
    if not targets:
        return
    drivers = {t.cls.driver for t in targets}
    asked = {t.name for t in targets} | {t.request for t in targets}
    entries = devices.get("config")
    at = f"{r.place.field}.devices.config"
    for i, entry in enumerate(entries if isinstance(entries, list) else ()):
        opaque = entry.get("opaque") if isinstance(entry, dict) else None
        driver = opaque.get("driver") if isinstance(opaque, dict) else None
        if not isinstance(driver, str) or driver in drivers:
            continue
        requests = entry.get("requests") or []
        if requests and not any(n in asked for n in requests):
            continue
        assert isinstance(opaque, dict)
        # (Short, as every warning is shown: the field first, the fix last.)
        if driver == OLD_DRIVER:
            r.warnings.append(
                f"{at}[{i}].opaque.driver: {OLD_DRIVER} is an old name the driver skips; use"
                f" {names.DRA_DRIVER}"
            )
        elif _readable(opaque.get("parameters")):
            meant = " or ".join(sorted(drivers))
            r.warnings.append(
                f"{at}[{i}].opaque.driver: not {meant}, the GPU driver, so it skips this"
                f" {_kind_of(opaque.get('parameters'))}"
            )
    subrequests: dict[str, list[str]] = {}
    for t in targets:
        if t.subrequest:
            subrequests.setdefault(t.request, []).append(t.name)
    for c in configs:
        for name in sorted(subrequests.keys() & c.requests):
            subs = subrequests[name]
            listed = ", ".join(_cut(s) for s in subs[:3]) + (", ..." if len(subs) > 3 else "")
            r.warnings.append(
                f"{at}[{c.position}].requests: {_cut(name)} reaches no subrequest on NVIDIA's"
                f" driver; name {listed}"
            )


# --------------------------------------------------------------------------- the profile


def _annotations(node: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = node.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}


def _profile(r: _Reading, obj: Mapping[str, Any]) -> Profile | None:
    """The claim's profile (its annotation; a template's in `spec.metadata`, which the
    claims made from it carry, else its own), else the policy's default."""
    key = names.ANNOTATION_PROFILE
    own = _annotations(obj)
    wanted: Any = own.get(key)
    field = f"metadata.annotations[{key}]"
    if r.template:
        spec = obj.get("spec")
        inner = _annotations(spec) if isinstance(spec, dict) else {}
        if key in inner:
            wanted, field = inner[key], f"spec.metadata.annotations[{key}]"
        elif wanted is not None:
            r.warnings.append(
                f"put {key} in spec.metadata.annotations: the claims made from a template"
                " carry only those"
            )
    policy = r.policy
    if wanted is None:
        return policy.profiles[policy.default_profile] if policy.default_profile else None
    found = policy.profiles.get(wanted) if isinstance(wanted, str) else None
    if found is not None:
        r.profile_field = field
        return found
    offered = ", ".join(sorted(policy.profiles)) or "none"
    r.violations.append(
        Violation(
            PROFILE_RULE,
            ErrorType.NOT_SUPPORTED,
            field,
            (
                f"{r.label}: unknown profile: {shown(wanted)} (",
                FIELD,
                f'); policy "{policy.name}" offers: {offered}. Use one of them, or remove the'
                " annotation",
            ),
            None,
            Place("", "", ""),
        )
    )
    return None


def _add_profile(
    r: _Reading, devices: Mapping[str, Any], missing: list[Target], profile: Profile
) -> None:
    """What giving each request in `missing` the MPS configuration of `profile` adds (one
    entry per request: the subrequests of one request may be of classes of different kinds);
    a profile above the class's ceilings is refused instead."""
    entries: list[dict[str, Any]] = []
    for t in missing:
        cls = t.cls
        threads = profile.active_thread_percentage
        pinned = profile.pinned_memory_mib
        above = []
        if (
            threads is not None
            and cls.max_thread_percentage is not None
            and threads > cls.max_thread_percentage
        ):
            above.append(f"{threads}% of threads (ceiling {cls.max_thread_percentage}%)")
        if (
            pinned is not None
            and cls.max_pinned_memory_mib is not None
            and pinned > cls.max_pinned_memory_mib
        ):
            above.append(f"{pinned}Mi pinned (ceiling {cls.max_pinned_memory_mib}Mi)")
        threads = threads if threads is not None else cls.max_thread_percentage
        pinned = pinned if pinned is not None else cls.max_pinned_memory_mib
        if above:
            where = f"{t.field}.deviceClassName"
            place = r.place
            if r.profile_field is not None:
                where, place = r.profile_field, Place("", "", "")
            r.violations.append(
                Violation(
                    "dra-mps-limits",
                    ErrorType.FORBIDDEN,
                    where,
                    (
                        _what(r, t),
                        f'profile "{profile.name}" gives {" and ".join(above)} on class'
                        f' "{cls.name}" of policy "{r.policy.name}" (',
                        FIELD,
                        "). Use a smaller profile, or write an MPS configuration within the"
                        " ceilings",
                    ),
                    None,
                    place,
                )
            )
            continue
        mps: dict[str, Any] = {}
        if threads is not None:
            mps[THREADS] = threads
        if pinned is not None:
            mps[PINNED] = f"{pinned}Mi"
        entries.append(
            {
                "requests": [t.name],
                "opaque": {
                    "driver": cls.driver,
                    "parameters": {
                        "apiVersion": names.DRA_CONFIG_API_VERSION,
                        "kind": cls.config_kind,
                        "sharing": {"strategy": MPS, "mpsConfig": mps},
                    },
                },
            }
        )
    if not entries:
        return
    existing = devices.get("config")
    r.mps = MpsAddition(
        profile.name,
        tuple(entries),
        tuple((t.field, _what(r, t)) for t in missing),
        r.label,
        f"{r.place.pointer}/devices/config",
        len(existing) if isinstance(existing, list) else None,
    )


def patch_mps_limits(r: Pass[ClaimFacts]) -> None:
    """Add the MPS configuration of the claim's profile (`MpsAddition`). Validating, it must
    be in place already: each request without it is refused."""
    adding = r.facts.mps
    if adding is None:
        return
    if r.require:
        for field, what in adding.missing:
            r.deny(
                "dra-mps-limits",
                ErrorType.REQUIRED,
                field,
                what,
                FIELD,
                f': no MPS configuration, where profile "{adding.profile}" applies; the mutating'
                " webhook adds it: it did not run, or a later change took it away. Create the"
                " claim again",
            )
        return
    count = adding.existing or 0
    if count + len(adding.entries) > names.DRA_MAX_CONFIGS:
        r.deny(
            "dra-mps-limits",
            ErrorType.FORBIDDEN,
            "devices.config",
            f"{adding.label}: ",
            FIELD,
            f': no room for the MPS configuration of profile "{adding.profile}" (a claim has at'
            f" most {names.DRA_MAX_CONFIGS}). Write one MPS configuration for the GPU requests",
        )
        return
    if adding.existing is not None:
        for entry in adding.entries:
            op = {"op": "add", "path": f"{adding.pointer}/-", "value": entry}
            r.add("dra-mps-limits", op, *_entry_words(entry))
        return
    whole: dict[str, Any] = {"op": "add", "path": adding.pointer, "value": list(adding.entries)}
    first, *rest = adding.entries
    r.add("dra-mps-limits", whole, *_entry_words(first))
    for entry in rest:
        # (One operation adds them all; each entry is said on its own.)
        r.say("dra-mps-limits", *_entry_words(entry))


def _entry_words(entry: Mapping[str, Any]) -> tuple[str, str]:
    """An MPS configuration the patch adds, in rule dra-mps-limits' words: `config of request
    "gpu"` and `GpuConfig, sharing MPS, defaultActiveThreadPercentage=25, ...`."""
    named = entry["requests"]
    topic = "config of " + ", ".join(
        f'{"subrequest" if "/" in n else "request"} "{n}"' for n in named
    )
    parameters = entry["opaque"]["parameters"]
    sharing = parameters["sharing"]
    items = [str(parameters["kind"]), f"sharing {sharing['strategy']}"]
    items += [f"{k}={added_value(v)}" for k, v in sharing["mpsConfig"].items()]
    return topic, ", ".join(items)


# --------------------------------------------------------------------------- untouched

# The rule of the MPS patch, as its row names it.
_MPS_RULE: Final = "dra-mps-limits"


def unchanged(obj: Mapping[str, Any], policy: Policy) -> str:
    """Why a review of a claim or template that refused nothing left it as it was, in a few
    words (`mutate` and `audit` say it): the counterpart of `hints.unchanged`. It counts
    a configuration as the request's own as `gather` does (`_counted`)."""
    if policy.unavailable is not None:
        # The catch-all entry, like the entry of a policy with no dra section, is sent no claim.
        if policy.name == names.UNKNOWN_POLICY_PATH:
            label = names.POLICY_LABEL
            return f"claims are not reviewed: the namespace's label {label} names no policy"
        if policy.unavailable[0] == names.UNKNOWN_POLICY_RULE:
            return f'claims are not reviewed: no policy is named "{policy.name}"'
        return f'claims are not reviewed under policy "{policy.name}": it is not in force'
    dra = policy.dra
    if dra is None:
        return (
            f'claims are not reviewed under policy "{policy.name}" (no dra section); its pods'
            " may not use claims"
        )
    devices = _devices_of(obj)
    requests = _requests_of(devices)
    targets = [(name, c, cls) for name, c in requests if (cls := policy.dra_class(c)) is not None]
    if not targets:
        other = sorted({class_name for _, class_name in requests})
        if not other:
            return "it asks for no device"
        return (
            f'it asks only for devices of classes policy "{policy.name}" does not govern'
            f" ({', '.join(other)}): the webhook leaves them alone"
        )
    if policy.mode == names.DRY_RUN:
        return f'policy "{policy.name}" is in dry-run mode: it changes nothing'
    configs = _configs_of(devices)
    profile = _profile_named(obj, policy)
    configured: list[str] = []
    without_mps: list[str] = []
    not_added: list[str] = []
    unsized = sized = False
    for name, class_name, cls in targets:
        if any(_counted(c, name, cls) for c in configs):
            configured.append(f'{_request_word(name)} "{name}" ({cls.config_kind})')
        elif MPS not in cls.sharing:
            shared = " or ".join(cls.sharing) or "no sharing"
            without_mps.append(f'class "{class_name}" ({shared})')
        elif not cls.add_mps:
            why = "its devices are shared by capacity" if cls.capacity else "addMpsConfig: false"
            not_added.append(f'class "{class_name}" ({why})')
        elif profile is None:
            unsized = True
        else:
            sized = True  # the review adds its configuration, unless the rule is in dry-run
    reasons = []
    if configured:
        reasons.append(f"it is already configured: {', '.join(configured)}")
    if without_mps:
        reasons.append(
            f'policy "{policy.name}" shares no device of {", ".join(dict.fromkeys(without_mps))}'
            " with MPS, so it adds no MPS configuration"
        )
    if not_added:
        reasons.append(
            f'policy "{policy.name}" adds no MPS configuration to requests of'
            f" {', '.join(dict.fromkeys(not_added))}"
        )
    if unsized:
        reasons.append(
            f"no profile applies (no {names.ANNOTATION_PROFILE} annotation, and policy"
            f' "{policy.name}" has no defaultProfile)'
        )
    mps_rule = _MPS_RULE
    if sized and policy.mode_of(mps_rule) == names.DRY_RUN:
        reasons.append(
            f'rule {mps_rule} is in dry-run mode in policy "{policy.name}": the MPS'
            f' configuration of profile "{profile}" is not added yet'
        )
    return "; ".join(reasons) or "it is already as the webhook leaves it"


def _request_word(name: str) -> str:
    return "subrequest" if "/" in name else "request"


def _devices_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    if obj.get("kind") == names.CLAIM_TEMPLATE_KIND and isinstance(spec, dict):
        spec = spec.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    return devices if isinstance(devices, dict) else {}


def _requests_of(devices: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, device class) of each request and each `firstAvailable` subrequest
    (`req/sub`)."""
    out: list[tuple[str, str]] = []
    requests = devices.get("requests")
    for request in requests if isinstance(requests, list) else ():
        if not isinstance(request, dict) or not isinstance(request.get("name"), str):
            continue
        name = request["name"]
        exactly = request.get("exactly")
        if isinstance(exactly, dict) and isinstance(exactly.get("deviceClassName"), str):
            out.append((name, exactly["deviceClassName"]))
        first = request.get("firstAvailable")
        for sub in first if isinstance(first, list) else ():
            if isinstance(sub, dict) and isinstance(sub.get("deviceClassName"), str):
                out.append((f"{name}/{sub.get('name')}", sub["deviceClassName"]))
    return out


# (driver, requests, parameters' kind) of an opaque configuration.
_Said = tuple[str, tuple[str, ...], str | None]


def _configs_of(devices: Mapping[str, Any]) -> list[_Said]:
    """(driver, requests, parameters' kind) of each opaque configuration."""
    out: list[_Said] = []
    raw = devices.get("config")
    for entry in raw if isinstance(raw, list) else ():
        opaque = entry.get("opaque") if isinstance(entry, dict) else None
        if not isinstance(opaque, dict):
            continue
        requests = entry.get("requests")
        named = tuple(str(r) for r in requests) if isinstance(requests, list) else ()
        parameters = opaque.get("parameters")
        kind = parameters.get("kind") if isinstance(parameters, dict) else None
        out.append((str(opaque.get("driver")), named, kind if isinstance(kind, str) else None))
    return out


def _counted(config: _Said, name: str, cls: DraClass) -> bool:
    """Whether a configuration counts as the request's own, as `gather` counts it: one
    of the class's driver that names the request (or, for a subrequest, its request), or
    names none and is of the class's kind."""
    driver, requests, kind = config
    if driver != cls.driver:
        return False
    if not requests:
        return kind == cls.config_kind
    return name in requests or name.partition("/")[0] in requests


def _profile_named(obj: Mapping[str, Any], policy: Policy) -> str | None:
    """The profile that sizes the claim's MPS configuration: its annotation (a template's in
    spec.metadata, else its own), else the policy's default."""
    key = names.ANNOTATION_PROFILE
    wanted = _annotations(obj).get(key)
    spec = obj.get("spec")
    if obj.get("kind") == names.CLAIM_TEMPLATE_KIND and isinstance(spec, dict):
        inner = _annotations(spec)
        if key in inner:
            wanted = inner[key]
    if wanted is None:
        return policy.default_profile
    return str(wanted)
