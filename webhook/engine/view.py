"""Reading a pod once: the fields the rules look at, with their places, shapes checked.

`templates(obj, kinds)` finds the pod specs an object carries (a Pod's own, a workload's pod
templates); `read(template, ...)` turns one into a `Pod` view. The view is closed: immutable
named tuples all the way down, holding every field a rule reads and nothing of the object
itself; a part read as it was sent (a container's limits and requests, the tolerations, the
node selector terms, an annotation that is not a string) is a `Json` value, which keeps its
JSON types and cannot be changed through the view. The
rules read the view, never the object, so what a review depends on is written down here, in
one place. Two pods with equal views get one decision, and a view equals another only when
every field does (named tuples compare and hash field by field, `Json` by its text): the
view itself is the key for anything that would keep decisions, and a field added for a new
rule enters that key by construction (tests/engine/test_pod_view.py). Nothing keeps decisions
today: bench/README.md measured the cache of decisions that keyed on a hand-written list of
fields, and it never paid.

A field of the wrong JSON type (a list where an object belongs, a number where a string
belongs) is not an exception: it is a shape `Problem` with the field's path
(`spec.containers[0].env: must be a list, not a number`), collected in `Pod.problems`, and
the field counts as absent. The API server never sends such an object (it decodes the body
into a typed Pod first); whoever else reaches the port gets a refusal that says what is wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import orjson

from webhook.engine.decision import OBJECT, Place
from webhook.policy import names
from webhook.policy.kinds import BUILTIN, EACH_ITEM, EACH_VALUE, Kind, Kinds, TemplatePath

CONTAINER_GROUPS = ("initContainers", "containers", "ephemeralContainers")


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


class Problem(NamedTuple):
    """A field whose JSON type no Kubernetes object has."""

    field: str  # its path, relative to the pod spec it is in (or to the object)
    expected: str  # "a list"
    found: str  # "a number"


class Template(NamedTuple):
    """A pod spec inside a reviewed object: the node, and where it stands."""

    node: Mapping[str, Any]
    place: Place


def templates(
    obj: Mapping[str, Any], kinds: Kinds = BUILTIN
) -> tuple[list[Template], list[Problem]]:
    """The pod specs `obj` carries, and shape problems on the way to them (their fields are
    paths in the object).

    None for kinds without templates, and none for mirror pods (the kubelet's copies of
    static pods, which the API server lets nobody change; the webhook configurations keep
    them out too).
    """
    kind = obj.get("kind")
    if kind == "Pod" and group_of(obj.get("apiVersion")) == "":
        meta = obj.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        if isinstance(annotations, dict) and names.MIRROR_ANNOTATION in annotations:
            return [], []
        return [Template(obj, OBJECT)], []
    if not isinstance(kind, str):
        return [], []
    found = kinds.get((group_of(obj.get("apiVersion")), kind))
    if found is None:
        return [], []
    walk = _Found(found)
    for path in found.paths:
        walk.walk(obj, path)
    return walk.templates, walk.problems


@dataclass(slots=True)
class _Found:
    """What a walk along a kind's template paths finds."""

    kind: Kind
    templates: list[Template] = dataclasses.field(default_factory=list)
    problems: list[Problem] = dataclasses.field(default_factory=list)

    def walk(self, node: Any, path: TemplatePath, pointer: str = "", where: str = "") -> None:
        if not path:
            if node is None:
                return
            if not isinstance(node, dict):
                self.problems.append(Problem(where, "an object", type_name(node)))
                return
            label = "" if self.kind.builtin else f"{self.kind.kind} {where}"
            self.templates.append(Template(node, Place(pointer, where, label)))
            return
        if node is None:
            return
        step, rest = path[0], path[1:]
        if step == EACH_ITEM:
            if not isinstance(node, list):
                self.problems.append(Problem(where, "a list", type_name(node)))
                return
            for i, item in enumerate(node):
                self.walk(item, rest, f"{pointer}/{i}", f"{where}[{i}]")
            return
        if step == EACH_VALUE:
            if not isinstance(node, dict):
                self.problems.append(Problem(where, "an object", type_name(node)))
                return
            for key, item in node.items():
                self.walk(item, rest, f"{pointer}/{escape(str(key))}", f"{where}.{key}")
            return
        if not isinstance(node, dict):
            self.problems.append(Problem(where, "an object", type_name(node)))
            return
        self.walk(node.get(step), rest, f"{pointer}/{step}", f"{where}.{step}" if where else step)


def escape(key: str) -> str:
    """A JSON Pointer reference token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


# --------------------------------------------------------------------------- the view


class Json:
    """A part of the object the view holds as it was sent: a container's limits and requests,
    the tolerations, the node selector terms (which a patch copies whole), an annotation that
    is not a string. Compared and hashed by its serialised text, made only when asked for
    (a review never asks), so that the view tells apart what Python's equality does not and
    the rules do: `true` is not `1`, `1.0` is not `1`, and objects whose keys come in another
    order (which a patch would copy in that order) are not equal. `value` is for reading only
    (`raw`); it is as true as the value is."""

    __slots__ = ("_text", "_value")

    def __init__(self, value: Any) -> None:
        self._value = value
        self._text: bytes | None = None

    @property
    def value(self) -> Any:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def text(self) -> bytes:
        if self._text is None:
            try:
                self._text = orjson.dumps(self._value)
            except TypeError:  # not JSON (a YAML file's huge integer): its repr, which
                self._text = repr(self._value).encode()  # no JSON text equals
        return self._text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Json) and self.text() == other.text()

    def __hash__(self) -> int:
        return hash(self.text())

    def __repr__(self) -> str:
        return f"Json({self._value!r})"


# A container's limits or requests when it has none.
EMPTY: Final = Json({})


# Named tuples, not frozen dataclasses: a review makes a few of them per container, and a
# frozen dataclass takes several times as long to build.
class EnvVar(NamedTuple):
    """One entry of a container's `env`."""

    position: int  # in the container's env list
    name: str
    # The literal value ("" when left out); None when the value comes from `valueFrom`.
    value: str | None


class Mount(NamedTuple):
    position: int
    volume: str
    path: str
    read_only: bool


class Container(NamedTuple):
    """One container of the pod, as the rules see it."""

    group: str  # "initContainers", "containers" or "ephemeralContainers"
    position: int  # in its group's list
    name: str
    # Resource names and quantities as sent (validated by the rules that use them): a Json
    # of the object (`EMPTY` when there is none), read with `.value`.
    limits: Json
    requests: Json
    env: tuple[EnvVar, ...]
    # Whether `env` is a list in the object (a patch appends to it, else adds it).
    has_env_list: bool
    env_from: bool
    privileged: bool
    capabilities: tuple[str, ...]
    mounts: tuple[Mount, ...]
    # Whether the rules judge this container: false for ephemeral containers that were
    # there before an update (they were judged when added, and cannot be changed).
    judged: bool
    # Whether it uses a resource claim of the pod (`resources.claims`): the devices of
    # dynamic resource allocation, GPUs among them.
    claims: bool = False
    # An init container that keeps running beside the others (`restartPolicy: Always`): its
    # devices are held with theirs, not given back before they start.
    sidecar: bool = False

    @property
    def field(self) -> str:
        """Its field path in the pod spec: "spec.containers[0]"."""
        return f"spec.{self.group}[{self.position}]"


class Volume(NamedTuple):
    position: int
    name: str
    host_path: str | None  # the hostPath's path, for hostPath volumes


class Pod(NamedTuple):
    """One pod (or pod template) under review, read once: every field a rule reads."""

    place: Place
    # Whether the pod has a metadata object, and an annotations object in it (a patch adds
    # them, else adds to them).
    has_metadata: bool
    has_annotations: bool
    annotations: tuple[tuple[str, Any], ...]
    containers: tuple[Container, ...]
    volumes: tuple[Volume, ...]
    host_pid: bool
    host_ipc: bool
    host_network: bool
    runtime_class: str | None
    # The names of the pod's resource claims (`spec.resourceClaims`), in order.
    resource_claims: tuple[str, ...]
    # The nodeSelector's entries, and whether it is an object in the pod (a patch adds to it,
    # else adds it).
    node_selector: tuple[tuple[str, str], ...]
    has_node_selector: bool
    # How deep the pod's `affinity.nodeAffinity.requiredDuringScheduling...` goes, as objects:
    # 0 no affinity, 1 affinity, 2 nodeAffinity, 3 the required selector (where a patch adds).
    affinity_depth: int
    # The required node selector terms as sent (None: none), shape-checked.
    node_terms: Json | None
    # The tolerations (objects) as sent, as a Json list; None when the pod has no list.
    tolerations: Json | None
    problems: tuple[Problem, ...]
    # An ephemeral-containers update: only new ephemeral containers are judged, and the
    # rules of the pod as a whole (placement, volumes, host namespaces) are not run again.
    ephemeral_update: bool


# Functions, not methods, for what the rules ask of the view on every review: the core is
# compiled (hatch_build.py), and a compiled function is called natively where a method of a
# named tuple is called through the interpreter.


def _typed(value: Any) -> Any:
    """A JSON value as the view holds it: a string or None as it is, anything else as Json."""
    return value if value is None or type(value) is str else Json(value)


def raw(value: Any) -> Any:
    """A value of the view as it was in the object (see `Json`)."""
    return value.value if isinstance(value, Json) else value


def variable(c: Container, name: str) -> EnvVar | None:
    """The definition of `name` that wins in `c` (the last one, as the kubelet reads env)."""
    for var in reversed(c.env):
        if var.name == name:
            return var
    return None


def annotation(pod: Pod, name: str) -> Any:
    """The value of annotation `name` as it was in the object (None when absent)."""
    for key, value in pod.annotations:
        if key == name:
            return raw(value)
    return None


def container_pointer(pod: Pod, c: Container) -> str:
    """The JSON Pointer of `c` in the reviewed object ("/spec/containers/0")."""
    return f"{pod.place.pointer}/spec/{c.group}/{c.position}"


class _Reader:
    """Reads fields, recording each shape problem with its path."""

    __slots__ = ("problems",)

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def wrong(self, where: str, expected: str, value: object) -> None:
        self.problems.append(Problem(where, expected, type_name(value)))

    def obj(self, parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any] | None:
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

    def flag(self, parent: Mapping[str, Any], key: str, where: str) -> bool:
        value = parent.get(key)
        if value is None or isinstance(value, bool):
            return bool(value)
        self.wrong(f"{where}.{key}", "a boolean", value)
        return False

    def strings(self, parent: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
        """A map of strings (labels, annotations, a nodeSelector)."""
        value = self.obj(parent, key, where)
        if not value:
            return {}
        for k, v in value.items():
            if not isinstance(v, str):
                self.wrong(f"{where}.{key}.{k}", "a string", v)
                return {k: v for k, v in value.items() if isinstance(v, str)}
        return value  # type: ignore[return-value]


def read(template: Template, *, old: Mapping[str, Any] | None = None) -> Pod:
    """The view of one pod spec. With `old` (the pod before an ephemeral-containers update),
    only ephemeral containers that `old` does not have are judged."""
    r = _Reader()
    node = template.node
    raw_meta = node.get("metadata")
    meta = raw_meta if isinstance(raw_meta, dict) else None
    if raw_meta is not None and meta is None:
        r.wrong("metadata", "an object", raw_meta)
    annotations = _annotations(r, meta) if meta is not None else ()
    has_annotations = meta is not None and isinstance(meta.get("annotations"), dict)
    raw_spec = node.get("spec")
    spec: Mapping[str, Any]
    if isinstance(raw_spec, dict):
        spec = raw_spec
    else:
        if raw_spec is not None:
            r.wrong("spec", "an object", raw_spec)
        spec = {}
    old_ephemeral: set[str] | None = None
    if old is not None:
        old_spec = old.get("spec")
        old_items = old_spec.get("ephemeralContainers") if isinstance(old_spec, dict) else None
        old_ephemeral = (
            {c["name"] for c in old_items if isinstance(c, dict) and isinstance(c.get("name"), str)}
            if isinstance(old_items, list)
            else set()
        )
    containers: list[Container] = []
    for group in CONTAINER_GROUPS:
        items = r.items(spec, group, "spec")
        if not items:
            continue
        for i, raw in enumerate(items):
            if not isinstance(raw, dict):
                r.wrong(f"spec.{group}[{i}]", "an object", raw)
                continue
            c = _container(r, raw, group=group, index=i)
            if old_ephemeral is not None:
                new = group == "ephemeralContainers" and c.name not in old_ephemeral
                c = c._replace(judged=new)
            containers.append(c)
    volumes: list[Volume] = []
    for i, raw in enumerate(r.items(spec, "volumes", "spec") or ()):
        if not isinstance(raw, dict):
            r.wrong(f"spec.volumes[{i}]", "an object", raw)
            continue
        name = raw.get("name")
        host = raw.get("hostPath")
        if not isinstance(name, str) or (host is not None and not isinstance(host, dict)):
            where = f"spec.volumes[{i}]"
            name = r.text(raw, "name", where) or f"volumes[{i}]"
            host = r.obj(raw, "hostPath", where)
        path = None
        if host is not None:
            path = host.get("path")
            if not isinstance(path, str):
                r.wrong(f"spec.volumes[{i}].hostPath.path", "a string", path)
                path = ""
        volumes.append(Volume(i, name, path))
    claims = r.items(spec, "resourceClaims", "spec")
    raw_tolerations = r.items(spec, "tolerations", "spec")
    tolerations: Json | None = None
    if raw_tolerations is not None:
        for i, t in enumerate(raw_tolerations):
            if not isinstance(t, dict):
                r.wrong(f"spec.tolerations[{i}]", "an object", t)
        tolerations = Json([t for t in raw_tolerations if isinstance(t, dict)])
    host_pid = r.flag(spec, "hostPID", "spec")
    host_ipc = r.flag(spec, "hostIPC", "spec")
    host_network = r.flag(spec, "hostNetwork", "spec")
    runtime_class = r.text(spec, "runtimeClassName", "spec")
    node_selector = r.strings(spec, "nodeSelector", "spec")
    depth, terms = _required_terms(r, spec)
    # Positional: the fields in their order (a review builds one per template).
    return Pod(
        template.place,
        meta is not None,  # has_metadata
        has_annotations,
        annotations,
        tuple(containers),
        tuple(volumes),
        host_pid,
        host_ipc,
        host_network,
        runtime_class,
        _claim_names(claims),  # resource_claims
        tuple(node_selector.items()),
        isinstance(spec.get("nodeSelector"), dict),  # has_node_selector
        depth,  # affinity_depth
        None if terms is None else Json(terms),  # node_terms
        tolerations,
        tuple(r.problems),
        old is not None,  # ephemeral_update
    )


def _claim_names(claims: list[Any] | None) -> tuple[str, ...]:
    """The names of the pod's claims; an entry without one by its place (the API server
    requires a name, so only hand-made input lacks it)."""
    if not claims:
        return ()
    return tuple(
        c["name"] if isinstance(c, dict) and isinstance(c.get("name"), str) else f"[{i}]"
        for i, c in enumerate(claims)
    )


def _annotations(r: _Reader, meta: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    value = meta.get("annotations")
    if value is None:
        return ()
    if not isinstance(value, dict):
        r.wrong("metadata.annotations", "an object", value)
        return ()
    typed = []
    for k, v in value.items():
        if not isinstance(v, str):
            r.wrong(f"metadata.annotations.{k}", "a string", v)
        typed.append((k, _typed(v)))
    return tuple(typed)


def _container(r: _Reader, raw: Mapping[str, Any], *, group: str, index: int) -> Container:
    # The common case first, each field's type checked inline; the reader records a problem
    # (and builds its path) only when there is one.
    where = f"spec.{group}[{index}]"
    get = raw.get
    name = get("name")
    if not isinstance(name, str) or not name:
        if name is not None:
            r.wrong(f"{where}.name", "a string", name)
        name = f"{group}[{index}]"
    limits: Mapping[str, Any] = {}
    requests: Mapping[str, Any] = {}
    claims = False
    resources = get("resources")
    if resources:
        if isinstance(resources, dict):
            limits = r.obj(resources, "limits", f"{where}.resources") or {}
            requests = r.obj(resources, "requests", f"{where}.resources") or {}
            claims = bool(r.items(resources, "claims", f"{where}.resources"))
        else:
            r.wrong(f"{where}.resources", "an object", resources)
    env: list[EnvVar] = []
    raw_env = get("env")
    if raw_env is not None and not isinstance(raw_env, list):
        r.wrong(f"{where}.env", "a list", raw_env)
        raw_env = None
    for i, var in enumerate(raw_env or ()):
        if not isinstance(var, dict):
            r.wrong(f"{where}.env[{i}]", "an object", var)
            continue
        vname = var.get("name")
        value = var.get("value")
        value_from = var.get("valueFrom")
        if not isinstance(vname, str):
            if vname is not None:
                r.wrong(f"{where}.env[{i}].name", "a string", vname)
            continue
        if value is not None and not isinstance(value, str):
            r.wrong(f"{where}.env[{i}].value", "a string", value)
            value = None
        if value_from is not None and not isinstance(value_from, dict):
            r.wrong(f"{where}.env[{i}].valueFrom", "an object", value_from)
        env.append(EnvVar(i, vname, None if value_from is not None else (value or "")))
    env_from = get("envFrom")
    if env_from is not None and not isinstance(env_from, list):
        r.wrong(f"{where}.envFrom", "a list", env_from)
        env_from = None
    privileged = False
    capabilities: tuple[str, ...] = ()
    sc = get("securityContext")
    if sc:
        if isinstance(sc, dict):
            privileged = r.flag(sc, "privileged", f"{where}.securityContext")
            caps = r.obj(sc, "capabilities", f"{where}.securityContext")
            if caps:
                added = r.items(caps, "add", f"{where}.securityContext.capabilities")
                if added:
                    capabilities = tuple(str(a) for a in added)
        else:
            r.wrong(f"{where}.securityContext", "an object", sc)
    mounts: list[Mount] = []
    raw_mounts = get("volumeMounts")
    if raw_mounts is not None and not isinstance(raw_mounts, list):
        r.wrong(f"{where}.volumeMounts", "a list", raw_mounts)
        raw_mounts = None
    for i, m in enumerate(raw_mounts or ()):
        if not isinstance(m, dict):
            r.wrong(f"{where}.volumeMounts[{i}]", "an object", m)
            continue
        volume = m.get("name")
        path = m.get("mountPath")
        read_only = m.get("readOnly")
        if (
            not isinstance(volume, str)
            or not isinstance(path, str)
            or (read_only is not None and not isinstance(read_only, bool))
        ):
            at = f"{where}.volumeMounts[{i}]"
            volume, path = r.text(m, "name", at), r.text(m, "mountPath", at)
            read_only = r.flag(m, "readOnly", at)
        mounts.append(Mount(i, volume or "", path or "", bool(read_only)))
    restart = get("restartPolicy")
    if restart is not None and not isinstance(restart, str):
        r.wrong(f"{where}.restartPolicy", "a string", restart)
    # Positional: the fields in their order (a review builds one per container).
    return Container(
        group,
        index,  # position
        name,
        Json(limits) if limits else EMPTY,
        Json(requests) if requests else EMPTY,
        tuple(env),
        isinstance(raw_env, list),  # has_env_list
        bool(env_from),
        privileged,
        capabilities,
        tuple(mounts),
        True,  # judged
        claims,
        group == "initContainers" and restart == "Always",  # sidecar
    )


def _required_terms(r: _Reader, spec: Mapping[str, Any]) -> tuple[int, list[Any] | None]:
    """How deep the pod's required node affinity goes as objects (`Pod.affinity_depth`), and
    its node selector terms, each term's expressions shape-checked."""
    affinity = r.obj(spec, "affinity", "spec")
    if affinity is None:
        return 0, None
    at = "spec.affinity"
    node_affinity = r.obj(affinity, "nodeAffinity", at)
    if node_affinity is None:
        return 1, None
    at += ".nodeAffinity"
    required = r.obj(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", at)
    if required is None:
        return 2, None
    at += ".requiredDuringSchedulingIgnoredDuringExecution"
    terms = r.items(required, "nodeSelectorTerms", at)
    if not terms:
        return 3, None
    at += ".nodeSelectorTerms"
    for i, term in enumerate(terms):
        if not isinstance(term, dict):
            r.wrong(f"{at}[{i}]", "an object", term)
            continue
        for part in ("matchExpressions", "matchFields"):
            exprs = r.items(term, part, f"{at}[{i}]")
            for j, expr in enumerate(exprs or ()):
                e_at = f"{at}[{i}].{part}[{j}]"
                if not isinstance(expr, dict):
                    r.wrong(e_at, "an object", expr)
                    continue
                r.text(expr, "key", e_at)
                r.text(expr, "operator", e_at)
                values = r.items(expr, "values", e_at)
                for k, v in enumerate(values or ()):
                    if not isinstance(v, str):
                        r.wrong(f"{e_at}.values[{k}]", "a string", v)
    return 3, terms
