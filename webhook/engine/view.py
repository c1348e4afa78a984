"""The view: the fields the rules read, decoded once into typed, closed structs.

A review decodes the object it is sent straight into these `msgspec` structs (`decode`, from
the request's bytes; `convert`, from what a command read out of a file): each holds exactly
the fields a rule reads, and whatever else the object holds is skipped without being built.
The rules read the structs, never the object, so what a review depends on is written down
here, in one place. A field a rule reads is typed as Kubernetes types it; every field is
optional, as the API server's defaults may leave it out.

A field of the wrong JSON type (a list where an object belongs, a number where a string
belongs) stops the typed decode, which names the first only. The object is then read again,
from its generic form, by `_Reader`: every such field is a shape `Problem` with its path
(`spec.containers[0].env: must be a list, not a number`) and counts as absent, and the same
structs are built of the rest, so the rules run as they do on any object. The API server
never sends such an object (it decodes the body into a typed Pod first); whoever else
reaches the port gets a refusal that says what is wrong. The typed decode is at least as
strict as the reader: what it takes, the reader finds nothing wrong with.

`templates(obj, kinds)` finds the pod specs an object carries (a Pod's own, a workload's pod
templates), each a `Template`: its place in the object, its metadata and spec.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import msgspec

from webhook.engine.decision import OBJECT, Place
from webhook.engine.structs import (
    Affinity,
    Annotations,
    Capabilities,
    Container,
    EnvVar,
    HostPath,
    Meta,
    Names,
    NodeAffinity,
    PodObject,
    PodSpec,
    Required,
    Requirement,
    Resources,
    SecurityContext,
    Template,
    Term,
    Volume,
    VolumeMount,
    decode_any,
    decode_cronjob,
    decode_head,
    decode_named,
    decode_pod,
    decode_workload,
)
from webhook.policy import names
from webhook.policy.kinds import BUILTIN, EACH_ITEM, EACH_VALUE, Kind, Kinds, TemplatePath

# `names` the loops below read, as Final constants the compiled core reads directly.
_MIRROR_ANNOTATION: Final = names.MIRROR_ANNOTATION

CONTAINER_GROUPS = ("initContainers", "containers", "ephemeralContainers")

# --------------------------------------------------------------------------- templates


class Problem(NamedTuple):
    """A field whose JSON type no Kubernetes object has."""

    field: str  # its path, relative to the pod spec it is in (or to the object)
    expected: str  # "a list"
    found: str  # "a number"


class Found:
    """A pod spec inside a reviewed object: where it stands, its metadata and spec as the
    rules read them, and the shape problems found in them (their paths relative to it). A
    native class of the compiled core, as `Pod`."""

    __slots__ = ("node", "place", "problems", "source", "template")

    def __init__(
        self,
        place: Place,
        template: Template,
        problems: tuple[Problem, ...],
        node: Any,
        source: Source | None = None,
    ) -> None:
        self.place: Final = place
        self.template: Final = template
        self.problems: Final = problems
        # The pod spec as sent, in generic form: here when it was read from it, else made
        # from the object's when asked for (`generic`).
        self.node: Final = node
        self.source: Final = source

    def generic(self) -> Any:
        """The pod spec as sent, as dicts and lists (what a patch copies of it)."""
        if self.node is not None or self.source is None:
            return self.node
        node = self.source.generic
        for step in self.place.pointer.split("/")[1:]:
            node = node.get(step) if isinstance(node, dict) else None
        return node

    def __repr__(self) -> str:
        return f"Found({self.place!r}, {self.template!r}, {self.problems!r})"


def type_name(value: object) -> str:
    """A JSON value's type as a message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def group_of(api_version: object) -> str:
    """The API group of an `apiVersion` ("apps/v1" -> "apps", "v1" -> "")."""
    if not isinstance(api_version, str):
        return ""
    group, _, _ = api_version.rpartition("/")
    return group


class Unreadable(ValueError):
    """The object's bytes hold what JSON readers refuse where the typed decode skipped it (a
    number beyond a float's range): the body is not JSON, as a generic reading says."""


# The JSON values of an object read without its typed view (a kind of another project, a
# claim, an object with a field of another type than Kubernetes gives it): a generic reading
# costs up to about 100 bytes and a microsecond a value, holding the interpreter all along.
# The largest object etcd stores (1.5 MiB) holds fewer than 180,000.
MAX_GENERIC_VALUES: Final = 250_000
_NOT_COUNTED: Final = bytes(c for c in range(256) if c not in b",:{[")
# A JSON string (what `json_values` leaves out of its count).
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_values(data: bytes, most: int) -> int | None:
    """How many JSON values `data` holds (objects, lists, their members and items) where it
    is more than `most`; None where it is not. Counted by the characters that open or
    separate them: first in one pass over the bytes, which counts those in strings too and
    so is never less; where that passes `most`, again with the strings left out."""
    if len(data) <= most:
        return None
    if len(data.translate(None, _NOT_COUNTED)) <= most:
        return None
    values = len(_STRING.sub(b"", data).translate(None, _NOT_COUNTED))
    return values if values > most else None


class TooLarge(Unreadable):
    """An object of more than MAX_GENERIC_VALUES values, to be read generically."""

    def __init__(self, values: int) -> None:
        super().__init__(
            f"the object holds {values:,} JSON values; one read without the typed view is read"
            f" only up to {MAX_GENERIC_VALUES:,}"
        )
        self.values = values


class Source:
    """An object under review as it came: the bytes of JSON the API server sent (the
    server), or the value a command read from a file. Its generic form is made once, and
    only when asked for; so is its typed decode (`typed_object`), unless the codec decoded
    it with the request (`Source.decoded`)."""

    __slots__ = (
        "_binary",
        "_cut",
        "_decoded",
        "_generic",
        "_made",
        "_raw",
        "_typed",
        "length",
        "outline",
    )

    def __init__(self, raw: bytes | Any) -> None:
        self._raw = raw
        # A built-in workload decoded typed: its kind and the metadata on the way to its
        # template, in generic form (`templates` sets it; what hints read of a workload).
        self.outline: dict[str, Any] | None = None
        # At most as many bytes of JSON as this (None: not known; a value read from a file).
        self.length: int | None = len(raw) if isinstance(raw, bytes) else None
        # Gives the bytes of an object decoded with its request, when they are first asked for.
        self._cut: Callable[[], bytes] | None = None
        self._binary = isinstance(raw, bytes)
        self._made = not self._binary
        self._generic: Any = None if not self._made else raw
        self._decoded = self._made
        self._typed: PodObject | None = None

    @staticmethod
    def decoded(typed: PodObject, cut: Callable[[], bytes], length: int) -> Source:
        """An object of JSON bytes whose typed decode (`typed_object`) was made in the same
        pass as the request that holds it; `cut` gives its bytes (read only by the slower
        paths: its generic form, a workload's templates); `length` is at least theirs."""
        source = Source(b"")
        source.length = length
        source._typed = typed
        source._decoded = True
        source._cut = cut
        return source

    @property
    def raw(self) -> bytes | Any:
        """The object as it came: its bytes of JSON, or the value read from a file."""
        cut = self._cut
        if cut is not None:
            self._cut = None
            self._raw = cut()
        return self._raw

    @property
    def binary(self) -> bool:
        """Whether the object came as bytes of JSON (not as a value read from a file)."""
        return self._binary

    @property
    def generic(self) -> Any:
        """The object as dicts and lists (JSON values)."""
        if not self._made:
            raw = self.raw
            values = json_values(raw, MAX_GENERIC_VALUES)
            if values is not None:
                raise TooLarge(values)
            try:
                self._generic = decode_any(raw)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                reason = str(exc)
            else:
                self._made = True
                return self._generic
            raise Unreadable(f"body is not JSON: {reason}")
        return self._generic


# What the engine takes as an object: as it came (bytes of JSON, or a value read from a
# file), or already a Source.
Object = Source | bytes | Mapping[str, Any]


def as_source(obj: Object) -> Source:
    return obj if isinstance(obj, Source) else Source(obj)


def typed_object(source: Source) -> PodObject | None:
    """The object's bytes decoded once as a Pod's fields: what names it and what it is, for
    any kind (a workload's own spec holds none of a pod spec's fields), and for a Pod its
    template. None for an object read from a file, or one with a field of another type
    (the slower readings say what is wrong)."""
    if not source._decoded:
        source._decoded = True
        try:
            source._typed = decode_pod(source.raw)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            source._typed = None
    return source._typed


def meta_of(source: Source) -> Names:
    """What names the object (its metadata's name, generateName and namespace, as sent)."""
    if source.binary:
        typed = typed_object(source)
        if typed is not None:
            m = typed.metadata
            return Names(m.name, m.generateName, m.namespace) if m is not None else Names()
        try:
            meta = decode_named(source.raw).metadata
        except (msgspec.DecodeError, RecursionError):
            meta = None
        return meta if meta is not None else Names()
    obj = source.raw
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return Names()
    return Names(meta.get("name"), meta.get("generateName"), meta.get("namespace"))


def head(source: Source) -> tuple[str, str]:
    """The object's (group, kind), as its own apiVersion and kind say; ("", "") when it
    says none."""
    if source.binary:
        typed = typed_object(source)
        try:
            found = typed if typed is not None else decode_head(source.raw)
            api, kind = found.apiVersion, found.kind
        except (msgspec.DecodeError, RecursionError):
            return "", ""
    else:
        obj = source.raw
        if not isinstance(obj, Mapping):
            return "", ""
        api, kind = obj.get("apiVersion"), obj.get("kind")
    return group_of(api), kind if isinstance(kind, str) else ""


def templates(obj: Object, kinds: Kinds = BUILTIN) -> tuple[list[Found], list[Problem]]:
    """The pod specs the object carries, and shape problems on the way to them (their
    fields are paths in the object). None for kinds without templates, and none for mirror
    pods (the kubelet's copies of static pods, which the API server lets nobody change; the
    webhook configurations keep them out too)."""
    source = as_source(obj)
    group, kind = head(source)
    if kind == "Pod" and group == "":
        return _pod(source)
    found = kinds.get((group, kind))
    if found is None:
        return [], []
    if found.builtin and source.binary:
        typed = _typed_workload(source, found)
        if typed is not None:
            return typed, []
    walk = _Walk(found)
    for path in found.paths:
        walk.walk(source.generic, path)
    if len(walk.problems) >= MAX_PROBLEMS:
        walk.problems.append(TOO_MANY)
    return walk.found, walk.problems


def _pod(source: Source) -> tuple[list[Found], list[Problem]]:
    if source.binary:
        pod = typed_object(source)
        if pod is not None:
            if _mirror(pod.metadata):
                return [], []
            template = Template(pod.metadata, pod.spec)
            if not _unnamed(template):
                return [Found(OBJECT, template, (), None, source)], []
    obj = source.generic
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if isinstance(annotations, dict) and _MIRROR_ANNOTATION in annotations:
        return [], []
    return [read(obj, OBJECT)], []


def _unnamed(template: Template) -> bool:
    """Whether a container has an empty name: a shape problem only the reader reports."""
    spec = template.spec
    if spec is None:
        return False
    return any(
        c.name == ""
        for items in (spec.initContainers, spec.containers, spec.ephemeralContainers)
        if items
        for c in items
    )


def _mirror(meta: Meta | None) -> bool:
    return meta is not None and bool(meta.annotations) and (
        _MIRROR_ANNOTATION in (meta.annotations or {})
    )


def _typed_workload(source: Source, kind: Kind) -> list[Found] | None:
    """The template of a built-in workload, decoded typed; None when that fails (the walk
    and the reader say why)."""
    raw = source.raw
    try:
        if kind.paths == (("spec", "template"),):
            workload = decode_workload(raw)
            spec = workload.spec
            outline = _outline(workload.kind, workload.metadata)
        elif kind.paths == (("spec", "jobTemplate", "spec", "template"),):
            cronjob = decode_cronjob(raw)
            job = cronjob.spec.jobTemplate if cronjob.spec is not None else None
            spec = job.spec if job is not None else None
            outline = _outline(cronjob.kind, cronjob.metadata)
            outline["spec"] = {"jobTemplate": _outline(None, job.metadata if job else None)}
        else:
            return None
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None
    if spec is None or spec.template is None:
        return []
    if _unnamed(spec.template):
        return None
    source.outline = outline
    path = kind.paths[0]
    place = Place("/" + "/".join(path), ".".join(path), "")
    return [Found(place, spec.template, (), None, source)]


def _outline(kind: Any, meta: Annotations | None) -> dict[str, Any]:
    annotations = meta.annotations if meta is not None else None
    return {"kind": kind, "metadata": {} if annotations is None else {"annotations": annotations}}


# What one object may hold, each counted across its pod specs: pod specs, containers (init,
# regular and ephemeral together) and required node selector terms. Each costs its own rule
# work and patch operations (a container about 35 bytes of memory per byte sent, a term 80):
# unbounded, a 7 MiB body costs seconds and hundreds of MiB. No workload comes near it.
MAX_ITEMS: Final = 1000


# The entries of every list and map the rules read, across one object (containers and their
# env, mounts, resources and capabilities, volumes, claims, tolerations, node selection,
# annotations, labels): each costs the rules up to ~300 bytes. Fifty per container at
# MAX_ITEMS containers.
MAX_ENTRIES: Final = 50_000


class Size(NamedTuple):
    """How much of what `MAX_ITEMS` and `MAX_ENTRIES` bound an object holds."""

    pod_specs: int  # MAX_ITEMS + 1 where the walk stopped there
    containers: int
    terms: int
    entries: int


def size(found: Sequence[Found], length: int | None = None) -> Size:
    """What `found`, pod specs of an object of at most `length` bytes of JSON (None: not
    known), holds of what MAX_ITEMS and MAX_ENTRIES bound. An item takes at least three bytes
    and an entry two: only what `length` leaves possible is counted (none, in most reviews)."""
    if length is not None and length <= 3 * MAX_ITEMS:
        return Size(len(found), 0, 0, 0)
    count_entries = length is None or length > 2 * MAX_ENTRIES
    containers = terms = entries = 0
    for f in found:
        meta = f.template.metadata
        if count_entries and meta is not None:
            entries += _length(meta.annotations) + _length(meta.labels)
        spec = f.template.spec
        if spec is None:
            continue
        for group in (spec.initContainers, spec.containers, spec.ephemeralContainers):
            if group:
                containers += len(group)
                if count_entries:
                    for c in group:
                        entries += _container_entries(c)
        for term in required_terms(spec) or ():
            terms += 1
            if count_entries:
                for part in (term.matchExpressions, term.matchFields):
                    if part:
                        entries += len(part)
                        for requirement in part:
                            entries += _length(requirement.values)
        if count_entries:
            entries += (
                _length(spec.volumes)
                + _length(spec.resourceClaims)
                + _length(spec.tolerations)
                + _length(spec.nodeSelector)
            )
    return Size(len(found), containers, terms, entries + containers + terms)


def _container_entries(c: Container) -> int:
    n = _length(c.env) + _length(c.envFrom) + _length(c.volumeMounts)
    r = c.resources
    if r is not None:
        n += _length(r.limits) + _length(r.requests) + _length(r.claims)
    sc = c.securityContext
    caps = sc.capabilities if sc is not None else None
    if caps is not None:
        n += _length(caps.add)
    return n


def _length(value: object) -> int:
    """The entries of a list or map (a value of another type: none)."""
    return len(value) if isinstance(value, (list, dict)) else 0


# The longest name or key the view takes (a qualified name); `_LONGEST` says so in problems.
MAX_NAME: Final = names.MAX_NAME_LENGTH
_LONGEST: Final = f"a name of at most {MAX_NAME:,} characters"
# The longest path the view takes (Linux's); `_LONGEST_PATH` says so in problems.
MAX_PATH: Final = names.MAX_PATH_LENGTH
_LONGEST_PATH: Final = f"a path of at most {MAX_PATH:,} characters"


def shown_key(key: str) -> str:
    """A map key in a field's path: cut short where it is longer than a name can be."""
    return key if len(key) <= MAX_NAME else key[:60] + "..."


# Shape problems read in one object before the reading stops: the object is refused (400)
# at the first, and a list of a million nulls must not cost a million problems.
MAX_PROBLEMS: Final = 1000
# The last problem of a reading that stopped there.
TOO_MANY: Final = Problem(
    "", f"an object of fewer than {MAX_PROBLEMS:,} shape problems", "more (the rest was not read)"
)


class _TooMany(Exception):
    """The reader found MAX_PROBLEMS problems: it stops."""


@dataclass(slots=True)
class _Walk:
    """What a walk along a kind's template paths, over the generic object, finds."""

    kind: Kind
    found: list[Found] = dataclasses.field(default_factory=list)
    problems: list[Problem] = dataclasses.field(default_factory=list)

    def walk(self, node: Any, path: TemplatePath, pointer: str = "", where: str = "") -> None:
        if not path:
            if node is None:
                return
            if not isinstance(node, dict):
                self.problems.append(Problem(where, "an object", type_name(node)))
                return
            label = "" if self.kind.builtin else f"{self.kind.kind} {where}"
            self.found.append(read(node, Place(pointer, where, label)))
            return
        if node is None:
            return
        step, rest = path[0], path[1:]
        if step == EACH_ITEM:
            if not isinstance(node, list):
                self.problems.append(Problem(where, "a list", type_name(node)))
                return
            for i, item in enumerate(node):
                if len(self.problems) >= MAX_PROBLEMS or len(self.found) > MAX_ITEMS:
                    return
                self.walk(item, rest, f"{pointer}/{i}", f"{where}[{i}]")
            return
        if step == EACH_VALUE:
            if not isinstance(node, dict):
                self.problems.append(Problem(where, "an object", type_name(node)))
                return
            for key, item in node.items():
                if len(self.problems) >= MAX_PROBLEMS or len(self.found) > MAX_ITEMS:
                    return
                if len(key) > MAX_NAME:
                    # (Each message about what is under it would repeat it.)
                    at = f"{where}.{shown_key(key)}"
                    self.problems.append(Problem(at, _LONGEST, f"one of {len(key):,}"))
                    continue
                self.walk(item, rest, f"{pointer}/{escape(str(key))}", f"{where}.{key}")
            return
        if not isinstance(node, dict):
            self.problems.append(Problem(where, "an object", type_name(node)))
            return
        self.walk(node.get(step), rest, f"{pointer}/{step}", f"{where}.{step}" if where else step)


def escape(key: str) -> str:
    """A JSON Pointer reference token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


# --------------------------------------------------------------------------- reading


def read(node: Mapping[str, Any], place: Place) -> Found:
    """A pod spec's generic form as the structs the rules read, and its shape problems.

    What no Kubernetes object has (a field of another type) is a problem and counts as
    absent; a list item that is not an object is left out of what the rules see but keeps
    the others' places. Fields take the structs' defaults where the object leaves them out."""
    if isinstance(node, dict):
        try:
            template = msgspec.convert(node, Template)
        except msgspec.ValidationError:
            pass
        else:
            if not _unnamed(template):
                return Found(place, template, (), node)
    template, problems = read_generic(node)
    return Found(place, template, tuple(problems), node)


def read_generic(node: Any) -> tuple[Template, list[Problem]]:
    """What the reader makes of a pod spec's generic form: the structs, and every problem
    (up to MAX_PROBLEMS, then TOO_MANY and nothing for the rules: it is refused anyway)."""
    r = _Reader()
    try:
        return r.template(node), r.problems
    except _TooMany:
        return Template(), [*r.problems, TOO_MANY]


class _Reader:
    """Reads a generic pod spec into the structs, recording each shape problem with its
    path. A field of the wrong type counts as absent (a list item: as an empty one)."""

    __slots__ = ("problems",)

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def wrong(self, where: str, expected: str, value: object) -> None:
        self.add(Problem(where, expected, type_name(value)))

    def add(self, problem: Problem) -> None:
        self.problems.append(problem)
        if len(self.problems) >= MAX_PROBLEMS:
            raise _TooMany

    def obj(self, parent: Mapping[str, Any], key: str, where: str) -> dict[str, Any] | None:
        value = parent.get(key)
        if value is None or isinstance(value, dict):
            return value
        self.wrong(f"{where}.{key}", "an object", value)
        return None

    def items(self, parent: Mapping[str, Any], key: str, where: str) -> list[Any] | None:
        value = parent.get(key)
        if value is None or isinstance(value, list):
            return value
        self.wrong(f"{where}.{key}", "a list", value)
        return None

    def text(self, parent: Mapping[str, Any], key: str, where: str) -> str | None:
        value = parent.get(key)
        if value is None or isinstance(value, str):
            return value
        self.wrong(f"{where}.{key}", "a string", value)
        return None

    def name(self, parent: Mapping[str, Any], key: str, where: str) -> str | None:
        """A name or key the messages may echo: a string of at most MAX_NAME characters."""
        value = self.text(parent, key, where)
        return value if value is None or self.short(value, f"{where}.{key}") else None

    def path(self, parent: Mapping[str, Any], key: str, where: str) -> str | None:
        """A path the rules clean: a string of at most MAX_PATH characters."""
        value = self.text(parent, key, where)
        return value if value is None or self.short(value, f"{where}.{key}", path=True) else None

    def short(self, value: str, where: str, *, path: bool = False) -> bool:
        """Whether `value`, a name or key (or a path), is within MAX_NAME (MAX_PATH)
        characters; else a problem."""
        if len(value) <= (MAX_PATH if path else MAX_NAME):
            return True
        self.add(Problem(where, _LONGEST_PATH if path else _LONGEST, f"one of {len(value):,}"))
        return False

    def keyed(self, value: dict[str, Any] | None, where: str) -> dict[str, Any] | None:
        """A map whose keys are names: its entries whose key is within MAX_NAME."""
        if value is None or all(len(k) <= MAX_NAME for k in value):
            return value
        return {k: v for k, v in value.items() if self.short(k, f"{where}.{shown_key(k)}")}

    def flag(self, parent: Mapping[str, Any], key: str, where: str) -> bool | None:
        value = parent.get(key)
        if value is None or isinstance(value, bool):
            return value
        self.wrong(f"{where}.{key}", "a boolean", value)
        return None

    def template(self, node: Any) -> Template:
        if not isinstance(node, Mapping):
            return Template()
        raw_meta = node.get("metadata")
        meta: Meta | None = None
        if raw_meta is not None and not isinstance(raw_meta, dict):
            self.wrong("metadata", "an object", raw_meta)
        elif isinstance(raw_meta, dict):
            meta = Meta(
                self.annotations(raw_meta),
                raw_meta.get("labels"),
                raw_meta.get("name"),
                raw_meta.get("generateName"),
                raw_meta.get("namespace"),
            )
        raw_spec = node.get("spec")
        spec: PodSpec | None = None
        if raw_spec is not None and not isinstance(raw_spec, dict):
            self.wrong("spec", "an object", raw_spec)
        elif isinstance(raw_spec, dict):
            spec = self.spec(raw_spec)
        return Template(meta, spec)

    def annotations(self, meta: Mapping[str, Any]) -> dict[str, str] | None:
        """The annotations, a value that is not a string as its text (the rules still see
        its key; the compiled core checks each value is a string where it reads it)."""
        value = meta.get("annotations")
        if value is None:
            return None
        if not isinstance(value, dict):
            self.wrong("metadata.annotations", "an object", value)
            return None
        strings = True
        for k, v in value.items():
            if not isinstance(v, str):
                self.wrong(f"metadata.annotations.{shown_key(k)}", "a string", v)
                strings = False
        kept = self.keyed(value, "metadata.annotations")
        if strings or kept is None:
            return kept
        return {k: v if isinstance(v, str) else str(v) for k, v in kept.items()}

    def spec(self, spec: Mapping[str, Any]) -> PodSpec:
        groups: dict[str, list[Container] | None] = {}
        for group in CONTAINER_GROUPS:
            items = self.items(spec, group, "spec")
            if items is None:
                groups[group] = None
                continue
            containers = []
            for i, raw in enumerate(items):
                if not isinstance(raw, dict):
                    self.wrong(f"spec.{group}[{i}]", "an object", raw)
                    containers.append(Container(name=_LEFT_OUT))
                    continue
                containers.append(self.container(raw, f"spec.{group}[{i}]"))
            groups[group] = containers
        volumes: list[Volume] | None = None
        raw_volumes = self.items(spec, "volumes", "spec")
        if raw_volumes is not None:
            volumes = []
            for i, raw in enumerate(raw_volumes):
                if not isinstance(raw, dict):
                    self.wrong(f"spec.volumes[{i}]", "an object", raw)
                    volumes.append(Volume(name=_LEFT_OUT))
                    continue
                volumes.append(self.volume(raw, f"spec.volumes[{i}]"))
        claims = self.items(spec, "resourceClaims", "spec")
        tolerations: list[dict[str, Any]] | None = None
        raw_tolerations = self.items(spec, "tolerations", "spec")
        if raw_tolerations is not None:
            for i, t in enumerate(raw_tolerations):
                if not isinstance(t, dict):
                    self.wrong(f"spec.tolerations[{i}]", "an object", t)
            tolerations = [t for t in raw_tolerations if isinstance(t, dict)]
        host_pid = self.flag(spec, "hostPID", "spec")
        host_ipc = self.flag(spec, "hostIPC", "spec")
        host_network = self.flag(spec, "hostNetwork", "spec")
        runtime_class = self.name(spec, "runtimeClassName", "spec")
        node_selector = self.strings(spec, "nodeSelector", "spec")
        affinity = self.affinity(spec)
        return PodSpec(
            groups["initContainers"],
            groups["containers"],
            groups["ephemeralContainers"],
            volumes,
            claims,
            tolerations,
            host_pid,
            host_ipc,
            host_network,
            runtime_class,
            node_selector,
            affinity,
        )

    def strings(self, parent: Mapping[str, Any], key: str, where: str) -> dict[str, str] | None:
        """A map of strings (a nodeSelector): its entries that are strings."""
        value = self.keyed(self.obj(parent, key, where), f"{where}.{key}")
        if value is None:
            return None
        kept = {}
        for k, v in value.items():
            at = f"{where}.{key}.{shown_key(k)}"
            if not isinstance(v, str):
                self.wrong(at, "a string", v)
            elif self.short(v, at):
                kept[k] = v
        return kept

    def container(self, raw: Mapping[str, Any], where: str) -> Container:
        get = raw.get
        name = get("name")
        if name == "":
            # (The API server requires a name; an empty one names no container.)
            self.add(Problem(f"{where}.name", "a name", "an empty string"))
        elif name is not None and not isinstance(name, str):
            self.wrong(f"{where}.name", "a string", name)
            name = None
        elif name is not None and not self.short(name, f"{where}.name"):
            name = None
        resources = None
        raw_resources = get("resources")
        # (A value that is empty or false is no resources, whatever its type.)
        if raw_resources and not isinstance(raw_resources, dict):
            self.wrong(f"{where}.resources", "an object", raw_resources)
        elif isinstance(raw_resources, dict):
            at = f"{where}.resources"
            resources = Resources(
                self.keyed(self.obj(raw_resources, "limits", at), f"{at}.limits"),
                self.keyed(self.obj(raw_resources, "requests", at), f"{at}.requests"),
                self.items(raw_resources, "claims", f"{where}.resources"),
            )
        env: list[EnvVar] | None = None
        raw_env = self.items(raw, "env", where)
        if raw_env is not None:
            env = []
            for i, var in enumerate(raw_env):
                if not isinstance(var, dict):
                    self.wrong(f"{where}.env[{i}]", "an object", var)
                    env.append(EnvVar())
                    continue
                env.append(self.variable(var, f"{where}.env[{i}]"))
        env_from = self.items(raw, "envFrom", where)
        security = None
        sc = get("securityContext")
        if sc and not isinstance(sc, dict):
            self.wrong(f"{where}.securityContext", "an object", sc)
        elif isinstance(sc, dict):
            at = f"{where}.securityContext"
            caps = self.obj(sc, "capabilities", at)
            # (Only a capabilities object that holds something is read further.)
            added = self.items(caps, "add", f"{at}.capabilities") if caps else None
            security = SecurityContext(
                self.flag(sc, "privileged", at), Capabilities(added) if caps is not None else None
            )
        mounts: list[VolumeMount] | None = None
        raw_mounts = self.items(raw, "volumeMounts", where)
        if raw_mounts is not None:
            mounts = []
            for i, m in enumerate(raw_mounts):
                if not isinstance(m, dict):
                    self.wrong(f"{where}.volumeMounts[{i}]", "an object", m)
                    mounts.append(VolumeMount(name=_LEFT_OUT))
                    continue
                at = f"{where}.volumeMounts[{i}]"
                mounts.append(
                    VolumeMount(
                        self.name(m, "name", at),
                        self.path(m, "mountPath", at),
                        self.flag(m, "readOnly", at),
                    )
                )
        restart = self.text(raw, "restartPolicy", where)
        return Container(name, resources, env, env_from, security, mounts, restart)

    def variable(self, var: Mapping[str, Any], where: str) -> EnvVar:
        name = self.name(var, "name", where)
        value = self.text(var, "value", where)
        value_from = var.get("valueFrom")
        if value_from is not None and not isinstance(value_from, dict):
            self.wrong(f"{where}.valueFrom", "an object", value_from)
            # Present, of an unknown shape: what it holds cannot be read at admission.
            value_from = {}
        return EnvVar(name, value, value_from)

    def volume(self, raw: Mapping[str, Any], where: str) -> Volume:
        name = self.name(raw, "name", where)
        host = self.obj(raw, "hostPath", where)
        path = None
        if host is not None:
            path = host.get("path")
            if not isinstance(path, str):
                self.wrong(f"{where}.hostPath.path", "a string", path)
                path = ""
            elif not self.short(path, f"{where}.hostPath.path", path=True):
                path = ""
        return Volume(name, HostPath(path) if path is not None else None)

    def affinity(self, spec: Mapping[str, Any]) -> Affinity | None:
        """The pod's required node affinity, each term's expressions shape-checked; a term
        that is not an object matches no node (an empty one)."""
        affinity = self.obj(spec, "affinity", "spec")
        if affinity is None:
            return None
        at = "spec.affinity"
        node_affinity = self.obj(affinity, "nodeAffinity", at)
        if node_affinity is None:
            return Affinity()
        at += ".nodeAffinity"
        required = self.obj(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", at)
        if required is None:
            return Affinity(NodeAffinity())
        at += ".requiredDuringSchedulingIgnoredDuringExecution"
        raw_terms = self.items(required, "nodeSelectorTerms", at)
        terms: list[Term] | None = None
        if raw_terms is not None:
            at += ".nodeSelectorTerms"
            terms = [self.term(term, f"{at}[{i}]") for i, term in enumerate(raw_terms)]
        return Affinity(NodeAffinity(Required(terms)))

    def term(self, term: Any, at: str) -> Term:
        if not isinstance(term, dict):
            self.wrong(at, "an object", term)
            return Term()
        parts: dict[str, list[Requirement] | None] = {}
        for part in ("matchExpressions", "matchFields"):
            exprs = self.items(term, part, at)
            if exprs is None:
                # One of another type is there, and says nothing a requirement could.
                parts[part] = [Requirement()] if term.get(part) else None
                continue
            found = []
            for j, expr in enumerate(exprs):
                e_at = f"{at}.{part}[{j}]"
                if not isinstance(expr, dict):
                    self.wrong(e_at, "an object", expr)
                    found.append(Requirement())
                    continue
                key = self.name(expr, "key", e_at)
                operator = self.name(expr, "operator", e_at)
                values = self.items(expr, "values", e_at)
                for k, v in enumerate(values or ()):
                    if not isinstance(v, str):
                        self.wrong(f"{e_at}.values[{k}]", "a string", v)
                if values is not None and not all(
                    isinstance(v, str) and len(v) <= MAX_NAME for v in values
                ):
                    # As text, as for an annotation; one too long left out.
                    texts = [v if isinstance(v, str) else str(v) for v in values]
                    values = [
                        v for k, v in enumerate(texts) if self.short(v, f"{e_at}.values[{k}]")
                    ]
                found.append(Requirement(key, operator, values))
            parts[part] = found
        return Term(parts["matchExpressions"], parts["matchFields"])


# The name of a list item that is not an object: the rules leave it out.
_LEFT_OUT: Final = "\0"


def left_out(name: str | None) -> bool:
    """Whether a container, volume or mount is an item the reader found no object in."""
    return name == _LEFT_OUT


# --------------------------------------------------------------------------- reading the view


def env_value(var: EnvVar) -> str | None:
    """A variable's literal value ("" when left out); None when it comes from `valueFrom`."""
    return None if var.valueFrom is not None else (var.value or "")


def limits(c: Container) -> Mapping[str, Any]:
    r = c.resources
    return (r.limits if r is not None else None) or _EMPTY


def requests(c: Container) -> Mapping[str, Any]:
    r = c.resources
    return (r.requests if r is not None else None) or _EMPTY


_EMPTY: Final[Mapping[str, Any]] = {}


def capabilities(c: Container) -> tuple[str, ...]:
    """The capabilities a container adds, as written (not strings: as text)."""
    sc = c.securityContext
    caps = sc.capabilities if sc is not None else None
    added = caps.add if caps is not None else None
    return tuple(str(a) for a in added) if added else ()


def privileged(c: Container) -> bool:
    sc = c.securityContext
    return sc is not None and bool(sc.privileged)


def uses_claims(c: Container) -> bool:
    r = c.resources
    return r is not None and bool(r.claims)


def annotations_of(p: Pod) -> Mapping[str, Any]:
    meta = p.meta
    return (meta.annotations if meta is not None else None) or _EMPTY


def annotation(p: Pod, name: str) -> Any:
    """The value of annotation `name` as it was in the object (None when absent)."""
    return annotations_of(p).get(name)


def required_terms(spec: PodSpec | None) -> list[Term] | None:
    """The pod's required node selector terms (None: none)."""
    affinity = spec.affinity if spec is not None else None
    node = affinity.nodeAffinity if affinity is not None else None
    required = node.requiredDuringSchedulingIgnoredDuringExecution if node is not None else None
    # (No terms, or an empty list of them, is no required affinity.)
    return (required.nodeSelectorTerms or None) if required is not None else None


def affinity_depth(spec: PodSpec | None) -> int:
    """How deep the pod's required node affinity goes, as objects: 0 no affinity, 1
    affinity, 2 nodeAffinity, 3 the required selector (where a patch adds)."""
    affinity = spec.affinity if spec is not None else None
    if affinity is None:
        return 0
    node = affinity.nodeAffinity
    if node is None:
        return 1
    return 3 if node.requiredDuringSchedulingIgnoredDuringExecution is not None else 2


def old_ephemeral(source: Source | None) -> frozenset[str] | None:
    """The names of the ephemeral containers of the pod before an update; None: no update."""
    if source is None:
        return None
    obj = source.generic
    spec = obj.get("spec") if isinstance(obj, dict) else None
    items = spec.get("ephemeralContainers") if isinstance(spec, dict) else None
    if not isinstance(items, list):
        return frozenset()
    return frozenset(
        c["name"] for c in items if isinstance(c, dict) and isinstance(c.get("name"), str)
    )


def names_of(items: Sequence[Any] | None) -> tuple[str, ...]:
    """The names of a pod's resource claims; an entry without one by its place."""
    if not items:
        return ()
    return tuple(
        c["name"] if isinstance(c, dict) and isinstance(c.get("name"), str) else f"[{i}]"
        for i, c in enumerate(items)
    )


# --------------------------------------------------------------------------- the pod reviewed


# The classes of the pod reviewed are plain classes with Final attributes, not named tuples:
# made for every pod, container and volume of every review, they are native classes of the
# compiled core (hatch_build.py), many times cheaper to make (as `facts.Facts`).


class Slot:
    """One container of the pod under review: where it stands, and whether it is judged."""

    __slots__ = (
        "c",
        "env",
        "env_names",
        "group",
        "judged",
        "limits",
        "name",
        "position",
        "privileged",
        "requests",
        "uses_claims",
    )

    def __init__(self, group: str, position: int, name: str, c: Container, judged: bool) -> None:
        self.group: Final = group  # "initContainers", "containers" or "ephemeralContainers"
        self.position: Final = position  # in its group's list
        self.name: Final = name  # its name, or "containers[1]" where it has none
        self.c: Final = c
        # False for ephemeral containers that were there before an update: they were judged
        # when added, and cannot be changed.
        self.judged: Final = judged
        # Its variables and their names, in order: read once here, as the rules look
        # through them for one name after another.
        env: Sequence[EnvVar] = c.env or ()
        self.env: Final = env
        self.env_names: Final = tuple(var.name for var in env)
        # What several rules read of it, read once here (an attribute of a Struct costs the
        # compiled core a generic lookup): `limits`, `requests`, `privileged`, `uses_claims`.
        self.limits: Final = limits(c)
        self.requests: Final = requests(c)
        self.privileged: Final = privileged(c)
        self.uses_claims: Final = uses_claims(c)

    def variable(self, name: str) -> tuple[int, EnvVar] | None:
        """The definition of `name` that wins (the last one, as the kubelet reads env), with
        its place in the env list."""
        found = self.env_names
        for i in range(len(found) - 1, -1, -1):
            if found[i] == name:
                return i, self.env[i]
        return None

    @property
    def field(self) -> str:
        """Its field path in the pod spec: "spec.containers[0]"."""
        return f"spec.{self.group}[{self.position}]"

    def __repr__(self) -> str:
        return f"Slot({self.group!r}, {self.position!r}, {self.name!r})"


class Pod:
    """One pod (or pod template) under review: its template, where it stands in the
    object, its containers in order, and the shape problems found in it."""

    __slots__ = ("containers", "ephemeral_update", "found", "meta", "place", "problems", "spec")

    def __init__(
        self,
        place: Place,
        meta: Meta | None,
        spec: PodSpec | None,
        containers: tuple[Slot, ...],
        problems: tuple[Problem, ...],
        *,
        ephemeral_update: bool,
        found: Found,
    ) -> None:
        self.place: Final = place
        self.meta: Final = meta
        self.spec: Final = spec
        self.containers: Final = containers
        self.problems: Final = problems
        # An ephemeral-containers update: only new ephemeral containers are judged, and the
        # rules of the pod as a whole (placement, volumes, host namespaces) are not run again.
        self.ephemeral_update: Final = ephemeral_update
        self.found: Final = found

    @property
    def template(self) -> Template:
        return Template(self.meta, self.spec)

    def with_meta(self, meta: Meta | None) -> Pod:
        """The same pod with other metadata."""
        return Pod(
            self.place,
            meta,
            self.spec,
            self.containers,
            self.problems,
            ephemeral_update=self.ephemeral_update,
            found=self.found,
        )

    def __repr__(self) -> str:
        return f"Pod({self.place!r}, {len(self.containers)} containers)"


def pod(found: Found, old: frozenset[str] | None = None) -> Pod:
    """The pod under review of `found`. `old`: the names of the ephemeral containers of the
    pod before an update of them (None: no such update)."""
    spec = found.template.spec
    slots: list[Slot] = []
    if spec is not None:
        for group, items in (
            ("initContainers", spec.initContainers),
            ("containers", spec.containers),
            ("ephemeralContainers", spec.ephemeralContainers),
        ):
            if not items:
                continue
            for i, c in enumerate(items):
                name = c.name
                if name == _LEFT_OUT:
                    continue
                shown = name or f"{group}[{i}]"
                judged = old is None or (group == "ephemeralContainers" and shown not in old)
                slots.append(Slot(group, i, shown, c, judged))
    return Pod(
        found.place,
        found.template.metadata,
        spec,
        tuple(slots),
        found.problems,
        ephemeral_update=old is not None,
        found=found,
    )


class VolumeEntry:
    __slots__ = ("host_path", "name", "position")

    def __init__(self, position: int, name: str, host_path: str | None) -> None:
        self.position: Final = position
        self.name: Final = name
        self.host_path: Final = host_path  # the hostPath's path, for hostPath volumes

    def __repr__(self) -> str:
        return f"VolumeEntry({self.position!r}, {self.name!r}, {self.host_path!r})"


def host_path_volumes(p: Pod) -> list[VolumeEntry]:
    """The pod's hostPath volumes, each with its place and name (`volumes[2]` where it has
    none): what the host-path rules read (no entry is made for the other volumes)."""
    items = p.spec.volumes if p.spec is not None else None
    if not items:
        return []
    found: list[VolumeEntry] = []
    for i, v in enumerate(items):
        host = v.hostPath
        if host is not None and v.name != _LEFT_OUT:
            found.append(VolumeEntry(i, v.name or f"volumes[{i}]", host.path))
    return found


def mounts(c: Container) -> list[tuple[int, VolumeMount]]:
    """A container's volume mounts, each with its place."""
    items = c.volumeMounts
    if not items:
        return []
    return [(i, m) for i, m in enumerate(items) if m.name != _LEFT_OUT]
