"""Reading a pod once: the fields the rules look at, with their places, shapes checked.

`templates(obj, kinds)` finds the pod specs an object carries (a Pod's own, a workload's pod
templates); `read(template, ...)` turns one into a `Pod` view. The rules read the view, never
the raw object, so what a review depends on is written down here, in one place.

A field of the wrong JSON type (a list where an object belongs, a number where a string
belongs) is not an exception: it is a shape problem with the field's path
(`spec.containers[0].env: must be a list, not a number`), collected in `Pod.problems`, and
the field counts as absent. The API server never sends such an object (it decodes the body
into a typed Pod first); whoever else reaches the port gets a refusal that says what is wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from webhook import names

# A path to pod templates in an object: keys, and at most one "[]" (every item of a list)
# or "{}" (every value of an object), e.g. ("spec", "replicatedJobs", "[]", "template",
# "spec", "template").
Path = tuple[str, ...]
EACH_ITEM = "[]"
EACH_VALUE = "{}"


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind whose objects carry pod templates, and where they are."""

    group: str
    kind: str
    resource: str  # the plural resource name, as webhook rules name it
    versions: tuple[str, ...]
    paths: tuple[Path, ...]
    # Kinds of other projects are named in messages with the template's path.
    builtin: bool = True


BUILTIN_KINDS: tuple[Kind, ...] = (
    Kind("apps", "Deployment", "deployments", ("v1",), (("spec", "template"),)),
    Kind("apps", "ReplicaSet", "replicasets", ("v1",), (("spec", "template"),)),
    Kind("apps", "StatefulSet", "statefulsets", ("v1",), (("spec", "template"),)),
    Kind("apps", "DaemonSet", "daemonsets", ("v1",), (("spec", "template"),)),
    Kind("batch", "Job", "jobs", ("v1",), (("spec", "template"),)),
    Kind("batch", "CronJob", "cronjobs", ("v1",), (("spec", "jobTemplate", "spec", "template"),)),
    Kind("", "ReplicationController", "replicationcontrollers", ("v1",), (("spec", "template"),)),
)

Kinds = Mapping[tuple[str, str], Kind]


def kinds_by_name(kinds: Sequence[Kind]) -> dict[tuple[str, str], Kind]:
    return {(k.group, k.kind): k for k in kinds}


BUILTIN: Kinds = kinds_by_name(BUILTIN_KINDS)

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


class Template(NamedTuple):
    """A pod spec inside a reviewed object: the node, its JSON Pointer and its field path."""

    node: Mapping[str, Any]
    pointer: str  # "" for a Pod, "/spec/template" for a Deployment
    field: str  # "" for a Pod, "spec.template" for a Deployment
    # How a message names it: "" for a Pod and the built-in kinds (one template, no doubt
    # which), "RayCluster spec.workerGroupSpecs[0].template" for the others.
    label: str


def templates(obj: Mapping[str, Any], kinds: Kinds = BUILTIN) -> tuple[list[Template], list[str]]:
    """The pod specs `obj` carries, and shape problems on the way to them.

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
        return [Template(obj, "", "", "")], []
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
    problems: list[str] = dataclasses.field(default_factory=list)

    def walk(self, node: Any, path: Path, pointer: str = "", where: str = "") -> None:
        if not path:
            if node is None:
                return
            if not isinstance(node, dict):
                self.problems.append(f"{where}: must be an object, not {type_name(node)}")
                return
            label = "" if self.kind.builtin else f"{self.kind.kind} {where}"
            self.templates.append(Template(node, pointer, where, label))
            return
        if node is None:
            return
        step, rest = path[0], path[1:]
        if step == EACH_ITEM:
            if not isinstance(node, list):
                self.problems.append(f"{where}: must be a list, not {type_name(node)}")
                return
            for i, item in enumerate(node):
                self.walk(item, rest, f"{pointer}/{i}", f"{where}[{i}]")
            return
        if step == EACH_VALUE:
            if not isinstance(node, dict):
                self.problems.append(f"{where}: must be an object, not {type_name(node)}")
                return
            for key, item in node.items():
                self.walk(item, rest, f"{pointer}/{escape(str(key))}", f"{where}.{key}")
            return
        if not isinstance(node, dict):
            self.problems.append(f"{where or '(object)'}: must be an object, not {type_name(node)}")
            return
        self.walk(node.get(step), rest, f"{pointer}/{step}", f"{where}.{step}" if where else step)


def escape(key: str) -> str:
    """A JSON Pointer reference token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


# --------------------------------------------------------------------------- the view


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


@dataclass(slots=True)
class Container:
    """One container of the pod, as the rules see it."""

    group: str  # "initContainers", "containers" or "ephemeralContainers"
    index: int
    name: str
    field: str  # "spec.containers[0]" (within the reviewed object)
    pointer: str  # "/spec/containers/0"
    # Resource names and quantities as sent (validated by the rules that use them).
    limits: Mapping[str, Any]
    requests: Mapping[str, Any]
    env: tuple[EnvVar, ...]
    # The definition of each variable that wins (the last: the kubelet reads env in order).
    variables: Mapping[str, EnvVar]
    # Whether `env` is a list in the object (a patch appends to it, else adds it).
    has_env_list: bool
    env_from: bool
    privileged: bool
    capabilities: tuple[str, ...]
    mounts: tuple[Mount, ...]
    # Whether the rules judge this container: false for ephemeral containers that were
    # there before an update (they were judged when added, and cannot be changed).
    judged: bool = True
    # Filled in by the resource rules: shared resource -> replicas; other GPU resources.
    shared: dict[str, int] = dataclasses.field(default_factory=dict)
    exclusive: list[str] = dataclasses.field(default_factory=list)

    @property
    def gpu(self) -> bool:
        return bool(self.shared or self.exclusive)

    def var(self, name: str) -> EnvVar | None:
        """The definition of `name` that wins (the last one, as the kubelet reads env)."""
        return self.variables.get(name)


class Volume(NamedTuple):
    position: int
    name: str
    host_path: str | None  # the hostPath's path, for hostPath volumes


@dataclass(slots=True)
class Pod:
    """One pod (or pod template) under review, read once."""

    template: Template
    spec: Mapping[str, Any]
    meta: Mapping[str, Any] | None  # None when the template has no metadata object
    annotations: Mapping[str, Any]
    has_annotations: bool
    containers: list[Container]
    volumes: tuple[Volume, ...]
    host_pid: bool
    host_ipc: bool
    runtime_class: str | None
    resource_claims: bool
    node_selector: Mapping[str, str]
    # The pod's required node selector terms as sent (None: none), shape-checked.
    required_terms: list[Any] | None
    tolerations: list[Mapping[str, Any]] | None
    problems: list[str]
    # An ephemeral-containers update: only new ephemeral containers are judged, and the
    # rules of the pod as a whole (placement, volumes, host namespaces) are not run again.
    ephemeral_update: bool = False

    @property
    def field(self) -> str:
        return self.template.field

    def at(self, path: str) -> str:
        """The field path of `path` (relative to the pod) in the reviewed object."""
        return f"{self.template.field}.{path}" if self.template.field else path

    def key(self) -> Hashable | None:
        """Everything the rules read of this pod, as one hashable value: two pods with one
        key get one decision, but for the words of a refusal (which name the volumes; the
        key has their positions instead, so that the replicas of a workload, whose service
        account volumes have names of their own, share a key). None when a value the
        rules read cannot be hashed (a malformed object, never one the API server sends)."""
        spec = self.spec
        affinity = spec.get("affinity")
        node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
        required = (
            node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
            if isinstance(node_affinity, dict)
            else None
        )
        # Where the patch adds node selection depends on what exists already.
        shape = (
            isinstance(spec.get("nodeSelector"), dict),
            isinstance(affinity, dict),
            isinstance(node_affinity, dict),
            isinstance(required, dict),
        )
        position = {v.name: v.position for v in self.volumes}
        containers = tuple(
            (
                c.group,
                c.name,
                c.judged,
                tuple(c.limits.items()),
                tuple(c.requests.items()),
                c.env,
                c.has_env_list,
                c.env_from,
                c.privileged,
                c.capabilities,
                tuple((position.get(m.volume, -1), m.path) for m in c.mounts),
            )
            for c in self.containers
        )
        key = (
            self.template.pointer,
            self.template.label,
            self.meta is None,
            self.has_annotations,
            tuple(self.annotations.items()),
            self.runtime_class,
            self.host_pid,
            self.host_ipc,
            self.resource_claims,
            tuple(self.node_selector.items()),
            shape,
            _json(self.required_terms),
            _json(self.tolerations),
            tuple(v.host_path for v in self.volumes),
            containers,
            len(self.problems),
            self.ephemeral_update,
        )
        try:
            hash(key)
        except TypeError:
            return None
        return key


def _json(value: object) -> bytes | None:
    """A hashable copy of a JSON value (None for None, and for what JSON cannot hold)."""
    if value is None:
        return None
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return b"\xff"  # not JSON: never equal to a pod's


class _Reader:
    """Reads fields, recording each shape problem with its path."""

    __slots__ = ("problems",)

    def __init__(self) -> None:
        self.problems: list[str] = []

    def wrong(self, where: str, expected: str, value: object) -> None:
        self.problems.append(f"{where}: must be {expected}, not {type_name(value)}")

    def obj(self, parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any] | None:
        value = parent.get(key)
        if value is None or isinstance(value, dict):
            return value
        self.problems.append(f"{where}.{key}: must be an object, not {type_name(value)}")
        return None

    def items(self, parent: Mapping[str, Any], key: str, where: str) -> list[Any] | None:
        value = parent.get(key)
        if value is None or isinstance(value, list):
            return value
        self.problems.append(f"{where}.{key}: must be a list, not {type_name(value)}")
        return None

    def text(self, parent: Mapping[str, Any], key: str, where: str) -> str | None:
        value = parent.get(key)
        if value is None or isinstance(value, str):
            return value
        self.problems.append(f"{where}.{key}: must be a string, not {type_name(value)}")
        return None

    def flag(self, parent: Mapping[str, Any], key: str, where: str) -> bool:
        value = parent.get(key)
        if value is None or isinstance(value, bool):
            return bool(value)
        self.problems.append(f"{where}.{key}: must be a boolean, not {type_name(value)}")
        return False

    def strings(self, parent: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
        """A map of strings (labels, annotations, a nodeSelector)."""
        value = self.obj(parent, key, where)
        if not value:
            return {}
        for k, v in value.items():
            if not isinstance(v, str):
                self.problems.append(f"{where}.{key}.{k}: must be a string, not {type_name(v)}")
                return {k: v for k, v in value.items() if isinstance(v, str)}
        return value  # type: ignore[return-value]


def read(template: Template, *, old: Mapping[str, Any] | None = None) -> Pod:
    """The view of one pod spec. With `old` (the pod before an ephemeral-containers update),
    only ephemeral containers that `old` does not have are judged."""
    r = _Reader()
    node = template.node
    base = template.field
    meta_where = f"{base}.metadata" if base else "metadata"
    raw_meta = node.get("metadata")
    meta = raw_meta if isinstance(raw_meta, dict) else None
    if raw_meta is not None and meta is None:
        r.problems.append(f"{meta_where}: must be an object, not {type_name(raw_meta)}")
    annotations = _annotations(r, meta, meta_where) if meta is not None else {}
    has_annotations = meta is not None and isinstance(meta.get("annotations"), dict)
    spec_where = f"{base}.spec" if base else "spec"
    raw_spec = node.get("spec")
    spec: Mapping[str, Any]
    if isinstance(raw_spec, dict):
        spec = raw_spec
    else:
        if raw_spec is not None:
            r.problems.append(f"{spec_where}: must be an object, not {type_name(raw_spec)}")
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
        items = r.items(spec, group, spec_where)
        if not items:
            continue
        for i, raw in enumerate(items):
            where = f"{spec_where}.{group}[{i}]"
            if not isinstance(raw, dict):
                r.problems.append(f"{where}: must be an object, not {type_name(raw)}")
                continue
            c = _container(
                r,
                raw,
                group=group,
                index=i,
                where=where,
                pointer=f"{template.pointer}/spec/{group}/{i}",
            )
            if old_ephemeral is not None:
                c.judged = group == "ephemeralContainers" and c.name not in old_ephemeral
            containers.append(c)
    volumes: list[Volume] = []
    for i, raw in enumerate(r.items(spec, "volumes", spec_where) or ()):
        if not isinstance(raw, dict):
            r.wrong(f"{spec_where}.volumes[{i}]", "an object", raw)
            continue
        name = raw.get("name")
        host = raw.get("hostPath")
        if not isinstance(name, str) or (host is not None and not isinstance(host, dict)):
            where = f"{spec_where}.volumes[{i}]"
            name = r.text(raw, "name", where) or f"volumes[{i}]"
            host = r.obj(raw, "hostPath", where)
        path = None
        if host is not None:
            path = host.get("path")
            if not isinstance(path, str):
                r.wrong(f"{spec_where}.volumes[{i}].hostPath.path", "a string", path)
                path = ""
        volumes.append(Volume(i, name, path))
    claims = r.items(spec, "resourceClaims", spec_where)
    tolerations = r.items(spec, "tolerations", spec_where)
    if tolerations is not None:
        for i, t in enumerate(tolerations):
            if not isinstance(t, dict):
                r.problems.append(
                    f"{spec_where}.tolerations[{i}]: must be an object, not {type_name(t)}"
                )
        tolerations = [t for t in tolerations if isinstance(t, dict)]
    return Pod(
        template=template,
        spec=spec,
        meta=meta,
        annotations=annotations,
        has_annotations=has_annotations,
        containers=containers,
        volumes=tuple(volumes),
        host_pid=r.flag(spec, "hostPID", spec_where),
        host_ipc=r.flag(spec, "hostIPC", spec_where),
        runtime_class=r.text(spec, "runtimeClassName", spec_where),
        resource_claims=bool(claims),
        node_selector=r.strings(spec, "nodeSelector", spec_where),
        required_terms=_required_terms(r, spec, spec_where),
        tolerations=tolerations,
        problems=r.problems,
        ephemeral_update=old is not None,
    )


def _annotations(r: _Reader, meta: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    value = meta.get("annotations")
    if value is None:
        return {}
    if not isinstance(value, dict):
        r.problems.append(f"{where}.annotations: must be an object, not {type_name(value)}")
        return {}
    for k, v in value.items():
        if not isinstance(v, str):
            r.problems.append(f"{where}.annotations.{k}: must be a string, not {type_name(v)}")
    return value


def _container(
    r: _Reader, raw: Mapping[str, Any], *, group: str, index: int, where: str, pointer: str
) -> Container:
    # The common case first, each field's type checked inline; the reader records a problem
    # (and builds its path) only when there is one.
    get = raw.get
    name = get("name")
    if not isinstance(name, str) or not name:
        if name is not None:
            r.wrong(f"{where}.name", "a string", name)
        name = f"{group}[{index}]"
    limits: Mapping[str, Any] = {}
    requests: Mapping[str, Any] = {}
    resources = get("resources")
    if resources:
        if isinstance(resources, dict):
            limits = r.obj(resources, "limits", f"{where}.resources") or {}
            requests = r.obj(resources, "requests", f"{where}.resources") or {}
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
        if not isinstance(volume, str) or not isinstance(path, str):
            at = f"{where}.volumeMounts[{i}]"
            volume, path = r.text(m, "name", at), r.text(m, "mountPath", at)
        mounts.append(Mount(i, volume or "", path or ""))
    return Container(
        group=group,
        index=index,
        name=name,
        field=where,
        pointer=pointer,
        limits=limits,
        requests=requests,
        env=tuple(env),
        variables={var.name: var for var in env},
        has_env_list=isinstance(raw_env, list),
        env_from=bool(env_from),
        privileged=privileged,
        capabilities=capabilities,
        mounts=tuple(mounts),
    )


def _required_terms(r: _Reader, spec: Mapping[str, Any], where: str) -> list[Any] | None:
    """The required node selector terms, each term's expressions shape-checked."""
    affinity = r.obj(spec, "affinity", where)
    if not affinity:
        return None
    at = f"{where}.affinity"
    node_affinity = r.obj(affinity, "nodeAffinity", at)
    if not node_affinity:
        return None
    at += ".nodeAffinity"
    required = r.obj(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", at)
    if required is None:
        return None
    at += ".requiredDuringSchedulingIgnoredDuringExecution"
    terms = r.items(required, "nodeSelectorTerms", at)
    if not terms:
        return None
    at += ".nodeSelectorTerms"
    for i, term in enumerate(terms):
        if not isinstance(term, dict):
            r.problems.append(f"{at}[{i}]: must be an object, not {type_name(term)}")
            continue
        for part in ("matchExpressions", "matchFields"):
            exprs = r.items(term, part, f"{at}[{i}]")
            for j, expr in enumerate(exprs or ()):
                e_at = f"{at}[{i}].{part}[{j}]"
                if not isinstance(expr, dict):
                    r.problems.append(f"{e_at}: must be an object, not {type_name(expr)}")
                    continue
                r.text(expr, "key", e_at)
                r.text(expr, "operator", e_at)
                values = r.items(expr, "values", e_at)
                for k, v in enumerate(values or ()):
                    if not isinstance(v, str):
                        r.problems.append(
                            f"{e_at}.values[{k}]: must be a string, not {type_name(v)}"
                        )
    return terms
