"""A stand-in of the Kubernetes API server, over real HTTP, for `audit --cluster`.

It serves what a background audit does against a cluster, answering as kube-apiserver does
(status codes, `Status` bodies and their messages were looked up in kubernetes/kubernetes; each
is cited where it is built):

- LIST of built-in kinds and custom resources, cluster-wide and per namespace, with `limit` and
  `continue` paging over a snapshot, `labelSelector` and `fieldSelector`;
- GET of one object;
- PATCH of custom resources: server-side apply (`application/apply-patch+yaml`), JSON merge
  patch and JSON patch, with field ownership per manager (`metadata.managedFields`);
- DELETE of custom resources;
- discovery (`/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`);
- a bearer token (401 without it) and, optionally, RBAC rules (403 with the real message).

Objects are seeded from plain dicts, as `kubectl get -o json` prints them (`KubeAPI.add`).
Every request is recorded (`KubeAPI.log`). The stand-in does not watch, create (POST), update
(PUT) nor write built-in kinds: those answer 400/405 saying so.

Use it from a test with pytest-aiohttp's `aiohttp_server` (`serve`), and point the official
client at it with `write_kubeconfig` or `client_configuration`.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonpatch
import yaml
from aiohttp import web

TOKEN = "stand-in-token"
USER = "system:serviceaccount:gpu-share-system:gpu-share-webhook-audit"

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
# The patch types a custom resource accepts, in the order the API server lists them
# (apiextensions-apiserver pkg/apiserver/customresource_handler.go, `supportedTypes`):
# strategic merge patch is not among them.
CUSTOM_RESOURCE_PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH)
# A \u escape of a UTF-16 surrogate (what go-yaml refuses in an apply body): a backslash
# that is not itself escaped (an odd run of them), then u and D800-DFFF. `\\ud800` is an
# escaped backslash and the text "ud800", which go-yaml reads as such.
_SURROGATE_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u[dD][89abAB][0-9a-fA-F]{2}")

Obj = dict[str, Any]
Validate = Callable[[Obj], list[str]]


# --- resources ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """One served resource: what discovery tells about it and what its URLs are made of."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    builtin: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """As schema.GroupResource.String() prints it: `pods`, `deployments.apps`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection_path(self, namespace: str | None = None) -> str:
        if namespace is None:
            return f"{self.prefix()}/{self.plural}"
        return f"{self.prefix()}/namespaces/{namespace}/{self.plural}"

    def object_path(self, name: str, namespace: str | None = None) -> str:
        return f"{self.collection_path(namespace if self.namespaced else None)}/{name}"


def _builtin(group: str, version: str, plural: str, kind: str, namespaced: bool = True) -> Resource:
    return Resource(group, version, plural, kind, namespaced, builtin=True)


NAMESPACES = _builtin("", "v1", "namespaces", "Namespace", namespaced=False)
PODS = _builtin("", "v1", "pods", "Pod")
REPLICATION_CONTROLLERS = _builtin("", "v1", "replicationcontrollers", "ReplicationController")
DEPLOYMENTS = _builtin("apps", "v1", "deployments", "Deployment")
STATEFUL_SETS = _builtin("apps", "v1", "statefulsets", "StatefulSet")
DAEMON_SETS = _builtin("apps", "v1", "daemonsets", "DaemonSet")
REPLICA_SETS = _builtin("apps", "v1", "replicasets", "ReplicaSet")
JOBS = _builtin("batch", "v1", "jobs", "Job")
CRON_JOBS = _builtin("batch", "v1", "cronjobs", "CronJob")
RESOURCE_CLAIMS = _builtin("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")
RESOURCE_CLAIM_TEMPLATES = _builtin(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate"
)
BUILTIN_RESOURCES = (
    NAMESPACES,
    PODS,
    REPLICATION_CONTROLLERS,
    DEPLOYMENTS,
    STATEFUL_SETS,
    DAEMON_SETS,
    REPLICA_SETS,
    JOBS,
    CRON_JOBS,
    RESOURCE_CLAIMS,
    RESOURCE_CLAIM_TEMPLATES,
)

# The report kinds (CRD names and scopes, as the CRDs of wgpolicyk8s.io and openreports.io say).
POLICY_REPORTS = Resource("wgpolicyk8s.io", "v1alpha2", "policyreports", "PolicyReport")
CLUSTER_POLICY_REPORTS = Resource(
    "wgpolicyk8s.io", "v1alpha2", "clusterpolicyreports", "ClusterPolicyReport", namespaced=False
)
REPORTS = Resource("openreports.io", "v1alpha1", "reports", "Report")
CLUSTER_REPORTS = Resource(
    "openreports.io", "v1alpha1", "clusterreports", "ClusterReport", namespaced=False
)


# --- the request log ---------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request as the stand-in saw it, with the status it answered."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    status: int
    body: Any  # the decoded JSON/YAML body, the raw text if it did not decode, None if empty


# --- Status bodies (apimachinery pkg/api/errors/errors.go) --------------------------------


class StatusError(Exception):
    """An answer other than success: a `Status` body and its HTTP code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(metadata or {}),
            "status": "Failure",
            "message": message,
            "reason": reason,
        }
        if details is not None:
            self.body["details"] = dict(details)
        self.body["code"] = code


def _details(resource: Resource, name: str = "", **more: Any) -> dict[str, Any]:
    """StatusDetails as NewNotFound/NewForbidden fill them: `kind` holds the resource
    ("Yes we set Kind field to resource", registry/generic/registry/store.go)."""
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    details.update(more)
    return details


def not_found(resource: Resource, name: str) -> StatusError:
    # NewNotFound: "%s %q not found" of the qualified resource and the name.
    return StatusError(
        404, "NotFound", f'{resource.group_resource} "{name}" not found', _details(resource, name)
    )


def unknown_path() -> StatusError:
    # What the API server's last handler answers for a path that nothing serves: a resource
    # of a group/version not served, a CRD not installed (apiserver
    # pkg/util/notfoundhandler/not_found_handler.go: no details).
    return StatusError(404, "NotFound", "the server could not find the requested resource")


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def invalid(group: str, kind: str, name: str, problems: Sequence[str]) -> StatusError:
    """NewInvalid: `<Kind>.<group> "<name>" is invalid: <errors>`; several errors print as
    `[a, b]` (an aggregate); one cause per error."""
    qualified = f"{kind}.{group}" if group else kind
    aggregate = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
    causes = []
    for problem in problems:
        where, separator, what = problem.partition(": ")
        if separator and " " not in where:
            causes.append({"reason": "FieldValueInvalid", "message": what, "field": where})
        else:
            causes.append({"reason": "FieldValueInvalid", "message": problem})
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = causes
    return StatusError(422, "Invalid", f'{qualified} "{name}" is invalid: {aggregate}', details)


def forbidden(resource: Resource, name: str, why: str) -> StatusError:
    # NewForbidden: "%s is forbidden: %v", or "%s %q is forbidden: %v" with a name.
    subject = f'{resource.group_resource} "{name}"' if name else resource.group_resource
    return StatusError(403, "Forbidden", f"{subject} is forbidden: {why}", _details(resource, name))


# --- requests as the API server reads them (apiserver pkg/endpoints/request/requestinfo.go) ---


@dataclass
class _Info:
    verb: str
    group: str = ""
    version: str = ""
    plural: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    resource_request: bool = True


def _request_info(method: str, path: str, query: Mapping[str, str]) -> _Info:
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return _Info(verb=method.lower(), resource_request=False)
    info = _Info(verb="", group=group, version=version)
    if rest[0] == "namespaces" and len(rest) > 1:
        info.namespace = rest[1]
        if len(rest) > 2:
            rest = rest[2:]
        # else `/namespaces/<name>`: the Namespace itself, whose namespace is its name.
    info.plural = rest[0]
    info.name = rest[1] if len(rest) > 1 else ""
    info.subresource = rest[2] if len(rest) > 2 else ""
    # HTTP method to verb, as the authorization docs list it (k/website
    # content/en/docs/reference/access-authn-authz/authorization.md, "Determine the Request
    # Verb"): GET of a collection is list, of one object get; watch=true makes either a watch.
    watching = query.get("watch", "").lower() in ("true", "1")
    match method:
        case "GET" | "HEAD":
            info.verb = "watch" if watching else ("get" if info.name else "list")
        case "POST":
            info.verb = "create"
        case "PUT":
            info.verb = "update"
        case "PATCH":
            info.verb = "patch"
        case "DELETE":
            info.verb = "delete" if info.name else "deletecollection"
        case _:
            info.verb = method.lower()
    if info.verb in ("list", "watch", "deletecollection"):
        # A list narrowed by `fieldSelector=metadata.name=X` is authorized with the name X
        # (that is how `resourceNames` can allow a list: k/website rbac.md).
        for term in _split_terms(query.get("fieldSelector", "")):
            match_ = re.fullmatch(r"\s*metadata\.name\s*==?\s*(\S*)\s*", term)
            if match_:
                info.name = match_.group(1)
    return info


# --- RBAC (plugin/pkg/auth/authorizer/rbac/rbac.go RuleAllows) ---------------------------


def _rule_allows(rule: Mapping[str, Any], info: _Info) -> bool:
    def has(values: Iterable[str], wanted: str) -> bool:
        values = list(values)
        return "*" in values or wanted in values

    resource = info.plural + (f"/{info.subresource}" if info.subresource else "")
    resources = list(rule.get("resources") or [])
    resource_matches = (
        "*" in resources
        or resource in resources
        or (bool(info.subresource) and f"*/{info.subresource}" in resources)
    )
    names = list(rule.get("resourceNames") or [])
    return (
        has(rule.get("verbs") or [], info.verb)
        and has(rule.get("apiGroups") or [], info.group)
        and resource_matches
        and (not names or info.name in names)
    )


def _forbidden_message(user: str, info: _Info) -> str:
    # responsewriters/errors.go forbiddenMessage.
    resource = info.plural + (f"/{info.subresource}" if info.subresource else "")
    where = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    return (
        f'User "{user}" cannot {info.verb} resource "{resource}" in API group "{info.group}" '
        f"{where}"
    )


# --- label and field selectors (apimachinery pkg/labels/selector.go) ---------------------


def _split_terms(selector: str) -> list[str]:
    """Split at the commas that are not inside `( )`; an empty selector has no terms."""
    if not selector.strip():
        return []
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return terms


Matcher = Callable[[Mapping[str, str]], bool]
_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"


def label_selector(selector: str) -> Matcher:
    """`k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>n`, `k<n`, joined
    by commas (all must hold). A malformed one raises StatusError 400."""
    matchers: list[Matcher] = []
    for raw in _split_terms(selector):
        term = raw.strip()
        if not term:
            raise bad_request(f"unable to parse requirement: found '{raw}', expected: identifier")
        matchers.append(_requirement(term))
    return lambda labels: all(matcher(labels) for matcher in matchers)


def _requirement(term: str) -> Matcher:
    if m := re.fullmatch(rf"!\s*({_KEY})", term):
        key = m.group(1)
        return lambda labels: key not in labels
    if m := re.fullmatch(rf"({_KEY})\s+(in|notin)\s+\((.*)\)", term):
        key, operator = m.group(1), m.group(3)
        values = {value.strip() for value in m.group(4).split(",")}
        if not all(re.fullmatch(_VALUE, value) for value in values):
            raise bad_request(f"unable to parse requirement: invalid values in '{term}'")
        if operator == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := re.fullmatch(rf"({_KEY})\s*(==|=|!=|>|<)\s*(.*)", term):
        key, operator, value = m.group(1), m.group(3), m.group(4).strip()
        if operator in (">", "<"):
            if not re.fullmatch(r"-?\d+", value):
                raise bad_request(
                    f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be "
                    f"an integer: '{value}'"
                )
            bound = int(value)
            if operator == ">":
                return lambda labels: _as_int(labels.get(key)) > bound
            return lambda labels: _as_int(labels.get(key)) < bound
        if not re.fullmatch(_VALUE, value):
            raise bad_request(f"unable to parse requirement: invalid label value: '{value}'")
        if operator == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if re.fullmatch(_KEY, term):
        return lambda labels: term in labels
    raise bad_request(f"unable to parse requirement: found '{term}', expected: identifier")


def _as_int(value: str | None) -> float:
    if value is None or not re.fullmatch(r"-?\d+", value):
        return float("nan")  # compares false both ways, as a missing or non-integer label does
    return int(value)


def field_selector(selector: str) -> Callable[[Obj], bool]:
    """`metadata.name` and `metadata.namespace` with `=`, `==`, `!=`: the fields every
    resource, custom ones included, can be selected by."""
    tests: list[Callable[[Obj], bool]] = []
    for raw in _split_terms(selector):
        m = re.fullmatch(r"\s*([A-Za-z.]+)\s*(==|=|!=)\s*(\S*)\s*", raw)
        if not m:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{raw}'")
        name, operator, value = m.groups()
        if name not in ("metadata.name", "metadata.namespace"):
            # The answer for a field a custom resource does not index.
            raise bad_request(f"field label not supported: {name}")
        key = name.split(".")[1]

        def test(obj: Obj, key: str = key, operator: str = operator, value: str = value) -> bool:
            actual = obj.get("metadata", {}).get(key, "")
            return actual != value if operator == "!=" else actual == value

        tests.append(test)
    return lambda obj: all(test(obj) for test in tests)


# --- continue tokens (apiserver pkg/storage/continue.go) ----------------------------------
# A base64url (unpadded) JSON {"v": "meta.k8s.io/v1", "rv": <revision of the list>, "start":
# <the key after the last one read, relative to the list's prefix>}. rv -1 is the token handed
# out with a 410: "continue the list at the latest resource version" (storage/etcd3/errors.go).


def _encode_continue(revision: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str]:
    def invalid_token(why: str) -> StatusError:
        # etcd3 store GetList: NewBadRequest("invalid continue token: %v").
        return bad_request(f"invalid continue token: continue key is not valid: {why}")

    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise invalid_token(str(exc)) from None
    if not isinstance(data, dict) or data.get("v") != "meta.k8s.io/v1":
        raise invalid_token("server does not recognize this encoded version")
    revision, start = data.get("rv"), data.get("start")
    if not isinstance(revision, int) or revision == 0:
        raise invalid_token("incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not isinstance(start, str) or not start:
        raise invalid_token("encoded start key empty (version meta.k8s.io/v1)")
    return revision, start


# storage/etcd3/errors.go: the message of a 410 on a continue token too old, when a fresh
# token comes with it (in the Status's metadata.continue).
EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


# --- field ownership (server-side apply) --------------------------------------------------
# A manager owns leaf paths: a value that is not an object, or an empty object. Lists are
# leaves: "By default, Server-Side Apply treats custom resources as unstructured data. All keys
# are treated the same as struct fields, and all lists are considered atomic" (k/website
# content/en/docs/reference/using-api/server-side-apply.md). The report CRDs mark no list
# otherwise.

FieldPath = tuple[str, ...]
# Object metadata the server sets or that names the object: nobody owns it.
_SYSTEM_METADATA = frozenset(
    (
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    )
)


def _leaves(obj: Mapping[str, Any]) -> dict[FieldPath, Any]:
    found: dict[FieldPath, Any] = {}

    def walk(value: Any, path: FieldPath) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                if path == ("metadata",) and key in _SYSTEM_METADATA:
                    continue
                walk(item, (*path, key))
        else:
            found[path] = value

    for key, value in obj.items():
        if key not in ("apiVersion", "kind"):
            walk(value, (key,))
    found.pop(("metadata",), None)  # metadata with nothing but system fields
    return found


def _get(obj: Mapping[str, Any], path: FieldPath) -> Any:
    value: Any = obj
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


_MISSING = object()


def _set(obj: Obj, path: FieldPath, value: Any) -> None:
    target = obj
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[path[-1]] = copy.deepcopy(value)


def _delete(obj: Obj, path: FieldPath, keep: set[FieldPath]) -> None:
    """Remove the leaf at `path`, then the objects it leaves empty (unless owned)."""
    chain = [obj]
    for key in path[:-1]:
        child = chain[-1].get(key)
        if not isinstance(child, dict):
            return
        chain.append(child)
    chain[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):
        parent, key = chain[depth - 1], path[depth - 1]
        if parent.get(key) == {} and path[:depth] not in keep:
            del parent[key]


@dataclass
class _Manager:
    manager: str
    operation: str  # Apply or Update
    api_version: str
    time: str
    paths: set[FieldPath] = field(default_factory=set)

    def entry(self) -> Obj:
        return {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields_v1(self.paths),
        }

    def identity(self) -> tuple[str, str, str, frozenset[FieldPath]]:
        return (self.manager, self.operation, self.api_version, frozenset(self.paths))


def _fields_v1(paths: Iterable[FieldPath]) -> Obj:
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def _paths_of_fields_v1(fields: Mapping[str, Any], path: FieldPath = ()) -> set[FieldPath]:
    """The leaf paths of a seeded object's fieldsV1; a list's entries (`k:`, `v:`, `i:`) make
    the list one leaf."""
    children = {key: child for key, child in fields.items() if key.startswith("f:")}
    if not children or any(key[:2] in ("k:", "v:", "i:") for key in fields):
        return {path} if path else set()
    found: set[FieldPath] = set()
    for key, child in children.items():
        found |= _paths_of_fields_v1(child or {}, (*path, key[2:]))
    return found


def _manager_sort_key(manager: _Manager) -> tuple[str, str, str]:
    return (manager.operation, manager.time, manager.manager)


# --- the stand-in --------------------------------------------------------------------------


@dataclass
class _Stored:
    obj: Obj  # never mutated once stored: a write stores a new dict
    managers: list[_Manager]


class KubeAPI:
    """The API server, as far as a background audit goes. See the module docstring.

    Seed with `add`, read back with `object`/`objects`; `served`/`serve`/`unserve` say which
    group/version/resources answer; `rules` (a ClusterRole's rules, or None for no
    authorization) decides 403s; `validate` stands for a CRD's schema on writes;
    `expire_continue_tokens`/`expire_next_continue` make continue tokens answer 410; `log`
    holds every request.
    """

    def __init__(
        self,
        *,
        token: str = TOKEN,
        user: str = USER,
        rules: Sequence[Mapping[str, Any]] | None = None,
        validate: Validate | None = None,
        resources: Iterable[Resource] = BUILTIN_RESOURCES,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.url = ""  # set by `serve`
        self.token = token
        self.user = user
        self.rules: list[Mapping[str, Any]] | None = None if rules is None else list(rules)
        self.validate = validate
        self.now = now or (lambda: datetime.now(UTC))
        self.log: list[Request] = []
        self._known: dict[tuple[str, str], Resource] = {}  # (group, kind)
        self._served: dict[tuple[str, str, str], Resource] = {}  # (group, version, plural)
        self._store: dict[tuple[str, str], dict[str, _Stored]] = {}  # (group, plural) -> key
        self._revision = 0
        # revision -> (group, plural) -> [(key, object)]: what a continue token reads.
        self._snapshots: dict[int, dict[tuple[str, str], list[tuple[str, Obj]]]] = {}
        self._expire_next = 0
        for resource in resources:
            self.serve(resource)

    # --- what is served -----------------------------------------------------------------

    def serve(self, resource: Resource) -> Resource:
        """Serve `resource` (for a custom resource: its CRD is installed, this version served)."""
        self._known[(resource.group, resource.kind)] = resource
        self._served[(resource.group, resource.version, resource.plural)] = resource
        return resource

    def serve_crd(
        self, group: str, version: str, plural: str, kind: str, *, namespaced: bool = True
    ) -> Resource:
        return self.serve(Resource(group, version, plural, kind, namespaced))

    def unserve(self, group: str, version: str, plural: str | None = None) -> None:
        """Stop serving a group/version (e.g. `resource.k8s.io`, `v1` on a cluster older than
        1.34) or one resource of it (a CRD not installed): its URLs answer 404."""
        for key in list(self._served):
            if key[:2] == (group, version) and plural in (None, key[2]):
                del self._served[key]

    @property
    def served(self) -> list[Resource]:
        return list(self._served.values())

    # --- seeding and reading ------------------------------------------------------------

    @property
    def revision(self) -> int:
        """The store's revision: what a list answered now would carry as resourceVersion."""
        return self._revision

    def add(self, *objects: Mapping[str, Any], manager: str | None = None) -> None:
        """Store objects as they come from `kubectl get -o json` (a `List` is unpacked).

        The server fills what it sets when missing (uid, creationTimestamp, generation) and
        gives each a new resourceVersion. `manager` makes it the Apply owner of every field
        (as if it had applied the object); else the object's own `metadata.managedFields`, if
        any, say who owns what."""
        for document in objects:
            if document.get("kind") == "List" or (
                str(document.get("kind", "")).endswith("List") and "items" in document
            ):
                self.add(*document.get("items", []), manager=manager)
                continue
            obj = copy.deepcopy(dict(document))
            resource = self._resource_of(obj)
            metadata = obj.setdefault("metadata", {})
            if not resource.namespaced:
                metadata.pop("namespace", None)
            elif not metadata.get("namespace"):
                metadata["namespace"] = "default"
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault("creationTimestamp", self._timestamp())
            if not resource.builtin:
                metadata.setdefault("generation", 1)
            managers = []
            if manager is not None:
                managers = [
                    _Manager(
                        manager, "Apply", resource.api_version, self._timestamp(), set(_leaves(obj))
                    )
                ]
            else:
                for entry in metadata.get("managedFields") or []:
                    managers.append(
                        _Manager(
                            entry.get("manager", ""),
                            entry.get("operation", "Update"),
                            entry.get("apiVersion", resource.api_version),
                            entry.get("time", ""),
                            _paths_of_fields_v1(entry.get("fieldsV1") or {}),
                        )
                    )
            self._write(resource, obj, managers)

    def remove(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete an object behind the API's back (a new revision, as any write)."""
        resource = self._resource_of({"apiVersion": api_version, "kind": kind})
        key = self._key(resource, name, namespace)
        if self._store.get((resource.group, resource.plural), {}).pop(key, None) is None:
            raise KeyError(f"{kind} {key} is not stored")
        self._revision += 1

    def object(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        """A copy of the stored object, or None."""
        resource = self._resource_of({"apiVersion": api_version, "kind": kind})
        stored = self._store.get((resource.group, resource.plural), {}).get(
            self._key(resource, name, namespace)
        )
        return None if stored is None else copy.deepcopy(stored.obj)

    def objects(self, api_version: str, kind: str, namespace: str | None = None) -> list[Obj]:
        """Copies of the stored objects of a kind, in the order a list gives them."""
        resource = self._resource_of({"apiVersion": api_version, "kind": kind})
        stored = self._store.get((resource.group, resource.plural), {})
        return [
            copy.deepcopy(stored[key].obj)
            for key in sorted(stored)
            if namespace is None or key.startswith(f"{namespace}/")
        ]

    # --- continue tokens that expire ----------------------------------------------------

    def expire_continue_tokens(self) -> None:
        """Every continue token handed out so far now answers 410 Expired (as after an etcd
        compaction), with a fresh token that continues from the latest state."""
        self._snapshots.clear()

    def expire_next_continue(self, count: int = 1) -> None:
        """The next `count` list requests that carry a (still valid) continue token answer 410
        Expired: a token that aged between two pages of one list."""
        self._expire_next += count

    # --- the log ------------------------------------------------------------------------

    def writes(self) -> list[Request]:
        return [r for r in self.log if r.method not in ("GET", "HEAD")]

    def requests(self, method: str | None = None, path: str | None = None) -> list[Request]:
        return [
            r
            for r in self.log
            if (method is None or r.method == method) and (path is None or r.path == path)
        ]

    # --- HTTP ---------------------------------------------------------------------------

    def app(self) -> web.Application:
        # The API server takes request bodies of up to 3 MiB (apiserver's
        # MaxRequestBodyBytes); aiohttp's default is 1 MiB.
        app = web.Application(middlewares=[self._record], client_max_size=3 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    @web.middleware
    async def _record(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        raw = await request.read()
        body: Any = None
        if raw:
            text = raw.decode(errors="replace")
            try:
                body = json.loads(text)
            except ValueError:
                try:
                    body = yaml.safe_load(text)  # an apply body may be YAML
                except yaml.YAMLError:
                    body = text
        try:
            response = await handler(request)
        except StatusError as error:
            response = web.json_response(error.body, status=error.code)
        except Exception as exc:  # a defect of the stand-in: answered and logged, not hidden
            error = StatusError(500, "InternalError", f"Internal error occurred: {exc!r}")
            response = web.json_response(error.body, status=500)
        self.log.append(
            Request(
                request.method,
                request.path,
                dict(request.query),
                request.headers.get("Content-Type", "").split(";")[0].strip(),
                response.status,
                body,
            )
        )
        return response

    async def _handle(self, request: web.Request) -> web.Response:
        self._authenticate(request)
        query = dict(request.query)
        info = _request_info(request.method, request.path, query)
        if not info.resource_request:
            return self._discovery(request)
        self._authorize(info)
        resource = self._served.get((info.group, info.version, info.plural))
        if resource is None or info.subresource:
            raise unknown_path()
        if resource is NAMESPACES:
            info.namespace = ""  # /api/v1/namespaces/<name>: the name, not a namespace
        # A request whose scope does not fit the resource goes to the last handler: 404
        # (customresource_handler.go ServeHTTP; the built-in routes do not exist either).
        if info.namespace and not resource.namespaced:
            raise unknown_path()
        if not info.namespace and resource.namespaced and info.verb not in ("list", "watch"):
            raise unknown_path()
        match info.verb:
            case "list":
                return web.json_response(self._list(resource, info, query))
            case "get":
                stored = self._stored(resource, info)
                if stored is None:
                    raise not_found(resource, info.name)
                return web.json_response(stored.obj)
            case "watch":
                raise bad_request("watch is not served by the stand-in (tests/support/kube_api.py)")
            case "patch" | "delete" if resource.builtin:
                raise StatusError(
                    405,
                    "MethodNotAllowed",
                    "the stand-in (tests/support/kube_api.py) writes no built-in kinds:"
                    f" {info.verb} {resource.group_resource}",
                )
            case "patch":
                body, status = await self._patch(resource, info, query, request)
                return web.json_response(body, status=status)
            case "delete":
                return web.json_response(await self._delete(resource, info, query, request))
            case _:
                raise StatusError(
                    405,
                    "MethodNotAllowed",
                    f"{info.verb} is not served by the stand-in (tests/support/kube_api.py)",
                )

    def _authenticate(self, request: web.Request) -> None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or token.strip() != self.token:
            # The API server's answer to a request it cannot authenticate, body as captured
            # from real servers: {"kind":"Status",...,"message":"Unauthorized",
            # "reason":"Unauthorized","code":401}.
            raise StatusError(401, "Unauthorized", "Unauthorized")

    def _authorize(self, info: _Info, *, verb: str | None = None) -> None:
        if self.rules is None:
            return
        asked = _Info(**{**info.__dict__, "verb": verb or info.verb})
        if any(_rule_allows(rule, asked) for rule in self.rules):
            return
        resource = Resource(asked.group, asked.version, asked.plural, "")
        if verb is None:
            # The authorization filter: forbiddenMessage, no RBAC reason (RBAC gives one only
            # when it failed to evaluate a rule).
            raise forbidden(resource, asked.name, _forbidden_message(self.user, asked))
        # An apply that creates is authorized once more, as create, with the object's name
        # (endpoints/handlers/patch.go createAuthorizerAttributes); a denial there is
        # NewForbidden with the authorizer's reason only, which RBAC leaves empty
        # (handlers/update.go withAuthorization).
        raise forbidden(resource, asked.name, "")

    # --- discovery ----------------------------------------------------------------------

    def _discovery(self, request: web.Request) -> web.Response:
        # Discovery needs no RBAC rule: system:discovery is bound to system:authenticated
        # (KEP-789).
        parts = [part for part in request.path.split("/") if part]
        served = list(self._served.values())
        if parts == ["api"]:
            return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
        if parts == ["apis"]:
            groups = sorted({r.group for r in served if r.group})
            return web.json_response(
                {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [self._group(name) for name in groups],
                }
            )
        if len(parts) == 2 and parts[0] == "apis" and any(r.group == parts[1] for r in served):
            group_ = {"kind": "APIGroup", "apiVersion": "v1", **self._group(parts[1])}
            return web.json_response(group_)
        if parts[:1] == ["api"] and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[:1] == ["apis"] and len(parts) == 3:
            group, version = parts[1], parts[2]
        elif parts == ["version"]:
            return web.json_response({"major": "1", "minor": "34", "gitVersion": "v1.34.0"})
        else:
            raise unknown_path()
        resources = [r for r in served if (r.group, r.version) == (group, version)]
        if not resources:
            raise unknown_path()
        return web.json_response(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": resources[0].api_version,
                "resources": [
                    {
                        "name": r.plural,
                        "singularName": r.kind.lower(),
                        "namespaced": r.namespaced,
                        "kind": r.kind,
                        "verbs": ["get", "list"]
                        if r.builtin
                        else ["delete", "get", "list", "patch"],
                    }
                    for r in sorted(resources, key=lambda r: r.plural)
                ],
            }
        )

    def _group(self, name: str) -> Obj:
        versions = sorted({r.version for r in self._served.values() if r.group == name})
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": entries, "preferredVersion": entries[0]}

    # --- list ---------------------------------------------------------------------------

    def _list(self, resource: Resource, info: _Info, query: Mapping[str, str]) -> Obj:
        labels = label_selector(query.get("labelSelector", ""))
        fields = field_selector(query.get("fieldSelector", ""))
        selective = any(query.get(name, "").strip() for name in ("labelSelector", "fieldSelector"))
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise bad_request(f"invalid value for limit: {query['limit']!r}") from None
        prefix = f"{info.namespace}/" if info.namespace else ""
        token = query.get("continue", "")
        store_key = (resource.group, resource.plural)
        start = prefix
        if token:
            if query.get("resourceVersion", "") not in ("", "0"):
                raise bad_request("specifying resource version is not allowed when using continue")
            token_revision, relative_start = _decode_continue(token)
            start = prefix + relative_start
            if token_revision > 0:
                snapshot = self._snapshots.get(token_revision, {}).get(store_key)
                if snapshot is None or self._expire_next > 0:
                    if snapshot is not None:
                        self._expire_next -= 1
                    # 410 Expired with a token that continues from the latest state
                    # (storage/etcd3/errors.go handleCompactedErrorForPaging).
                    raise StatusError(
                        410,
                        "Expired",
                        EXPIRED_CONTINUE,
                        metadata={"continue": _encode_continue(-1, relative_start)},
                    )
                revision, items = token_revision, snapshot
            else:
                revision, items = self._revision, self._current(store_key)
        else:
            revision, items = self._revision, self._current(store_key)

        in_scope = [(key, obj) for key, obj in items if key.startswith(prefix) and key >= start]
        page: list[Obj] = []
        last = ""
        read = 0
        for key, obj in in_scope:
            if limit and len(page) == limit:
                break
            read += 1
            last = key
            if labels(obj.get("metadata", {}).get("labels") or {}) and fields(obj):
                page.append(obj)
        metadata: Obj = {"resourceVersion": str(revision)}
        remaining = len(in_scope) - read
        if limit and remaining > 0:
            self._snapshots.setdefault(revision, {})[store_key] = items
            metadata["continue"] = _encode_continue(revision, (last + "\x00")[len(prefix) :])
            if not selective:
                # ListMeta.remainingItemCount: unset with a label or field selector, and
                # unset on the last page.
                metadata["remainingItemCount"] = remaining
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": metadata,
            # Items of a built-in list carry no kind/apiVersion: the API server leaves them
            # out (kubernetes/kubernetes#3030, still open); custom resources are stored
            # whole (unstructured) and keep them.
            "items": [self._as_item(resource, obj) for obj in page],
        }

    @staticmethod
    def _as_item(resource: Resource, obj: Obj) -> Obj:
        if not resource.builtin:
            return obj
        return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}

    def _current(self, store_key: tuple[str, str]) -> list[tuple[str, Obj]]:
        # Keys as etcd orders them: byte order of "<namespace>/<name>" (or "<name>"), under
        # /registry/<group>/<plural>/; a list reads them in that order.
        stored = self._store.get(store_key, {})
        return [(key, stored[key].obj) for key in sorted(stored)]

    # --- patch --------------------------------------------------------------------------

    async def _patch(
        self, resource: Resource, info: _Info, query: Mapping[str, str], request: web.Request
    ) -> tuple[Obj, int]:
        # The order is handlers/patch.go's: the patch type, the PatchOptions, the body; then
        # the patch (apply: version, managedFields, conflicts), the name and namespace; then
        # admission (NamespaceLifecycle), validation, and for a create the create authorization.
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        if content_type not in CUSTOM_RESOURCE_PATCH_TYPES:
            # negotiation.NewUnsupportedMediaTypeError.
            raise StatusError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: " + ", ".join(CUSTOM_RESOURCE_PATCH_TYPES),
            )
        apply = content_type == APPLY_PATCH
        manager = query.get("fieldManager", "")
        # metav1 validation ValidatePatchOptions, answered as NewInvalid of PatchOptions.
        if apply and not manager:
            raise StatusError(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is '
                "required for apply patch",
                {
                    "group": "meta.k8s.io",
                    "kind": "PatchOptions",
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: is required for apply patch",
                            "field": "fieldManager",
                        }
                    ],
                },
            )
        if not apply and "force" in query:
            raise StatusError(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified '
                "for non-apply patch",
                {
                    "group": "meta.k8s.io",
                    "kind": "PatchOptions",
                    "causes": [
                        {
                            "reason": "FieldValueForbidden",
                            "message": "Forbidden: may not be specified for non-apply patch",
                            "field": "force",
                        }
                    ],
                },
            )
        force = query.get("force", "").lower() in ("true", "1")
        dry_run = query.get("dryRun", "") == "All"
        raw = (await request.read()).decode(errors="replace")
        stored = self._stored(resource, info)
        now = self._timestamp()
        if apply:
            # The API server reads an apply body with a YAML reader (sigs.k8s.io/yaml over
            # go-yaml), whose scanner refuses a \u escape of a UTF-16 surrogate, the way
            # Python's json.dumps writes a character beyond the BMP (an emoji): go-yaml
            # scannerc.go, "found invalid Unicode character escape code".
            if _SURROGATE_ESCAPE.search(raw):
                raise bad_request(
                    "error decoding YAML: yaml: found invalid Unicode character escape code"
                )
            try:
                # JSON is YAML, read far faster by the json module (what the client sends).
                try:
                    patch = json.loads(raw)
                except ValueError:
                    patch = yaml.safe_load(raw)
            except yaml.YAMLError as exc:
                raise bad_request(f"error decoding YAML: {exc}") from None
            if not isinstance(patch, dict):
                raise bad_request("error decoding YAML: the body is not an object")
            result, managers = self._apply(
                resource, stored, patch, manager=manager, force=force, now=now
            )
            wanted_version = (patch.get("metadata") or {}).get("resourceVersion")
        else:
            if stored is None:
                raise not_found(resource, info.name)
            # The manager of a patch without fieldManager: the User-Agent up to its first
            # "/" (handlers/patch.go managerOrUserAgent).
            manager = manager or request.headers.get("User-Agent", "").split("/")[0]
            result = self._json_patch(stored.obj, raw, content_type)
            managers = _updated(stored, result, manager, resource.api_version, now)
            wanted_version = (result.get("metadata") or {}).get("resourceVersion")

        metadata = result.setdefault("metadata", {})
        # handlers/patch.go checkName and rest.EnsureObjectNamespaceMatchesRequestNamespace.
        if metadata.get("name") != info.name:
            raise bad_request(
                f"the name of the object ({metadata.get('name', '')}) does not match the name "
                f"on the URL ({info.name})"
            )
        if not resource.namespaced:
            metadata.pop("namespace", None)  # cluster-scoped: the namespace is cleared
        elif metadata.setdefault("namespace", info.namespace) != info.namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        result["apiVersion"], result["kind"] = resource.api_version, resource.kind
        self._namespace_lifecycle(resource, info, creating=stored is None)
        managers.sort(key=_manager_sort_key)
        metadata["managedFields"] = [m.entry() for m in managers]
        if stored is None:
            metadata.update(uid=str(uuid.uuid4()), creationTimestamp=now, generation=1)
        else:
            self._check_resource_version(resource, stored.obj, wanted_version)
            for key in ("uid", "creationTimestamp", "resourceVersion"):
                metadata[key] = stored.obj["metadata"][key]
            # A custom resource's generation moves when anything but metadata changes (its
            # status too: the report CRDs have no status subresource; apiextensions-apiserver
            # pkg/registry/customresource/strategy.go PrepareForUpdate).
            generation = stored.obj["metadata"].get("generation", 1)
            moved = _content(stored.obj) != _content(result)
            metadata["generation"] = generation + 1 if moved else generation
        if self.validate is not None:
            problems = self.validate(copy.deepcopy(result))
            if problems:
                raise invalid(resource.group, resource.kind, info.name, problems)
        if stored is not None and _same(stored, result, managers):
            # An apply that changes nothing writes nothing: same resourceVersion, same
            # generation, same managedFields times (kubernetes/kubernetes#88875).
            return copy.deepcopy(stored.obj), 200
        if stored is None:
            self._authorize(info, verb="create")
        if not dry_run:
            self._write(resource, result, managers)
        return copy.deepcopy(result), 201 if stored is None else 200

    def _apply(
        self,
        resource: Resource,
        stored: _Stored | None,
        patch: Obj,
        *,
        manager: str,
        force: bool,
        now: str,
    ) -> tuple[Obj, list[_Manager]]:
        # managedfields/internal/structuredmerge.go Apply: the version, then managedFields.
        if patch.get("apiVersion", "") != resource.api_version:
            raise bad_request(
                "Incorrect version specified in apply patch. Specified patch version: "
                f"{patch.get('apiVersion', '')}, expected: {resource.api_version}"
            )
        if (patch.get("metadata") or {}).get("managedFields") is not None:
            raise bad_request("metadata.managedFields must be nil")
        live = copy.deepcopy(stored.obj) if stored else {}
        live.get("metadata", {}).pop("managedFields", None)
        managers = [copy.deepcopy(m) for m in stored.managers] if stored else []
        mine = next((m for m in managers if (m.manager, m.operation) == (manager, "Apply")), None)
        if mine is None:
            mine = _Manager(manager, "Apply", resource.api_version, now)
            managers.append(mine)
        others = [m for m in managers if m is not mine]
        applied = _leaves(patch)
        changed = {path for path, value in applied.items() if _get(live, path) != value}
        conflicts = [(m, path) for m in others for path in sorted(m.paths & changed)]
        if conflicts and not force:
            raise _conflict(conflicts)
        result = live
        result.setdefault("metadata", {})
        owned_elsewhere = set().union(*(m.paths for m in others)) if others else set()
        for path in mine.paths - applied.keys():
            if path not in owned_elsewhere:
                _delete(result, path, keep=set(applied) | owned_elsewhere)
        for path, value in applied.items():
            _set(result, path, value)
        for other in others:
            other.paths -= changed  # forced: the applier takes the fields it changed
        if mine.paths != set(applied) or changed:
            mine.time = now
        mine.paths = set(applied)
        mine.api_version = resource.api_version
        managers = [m for m in managers if m.paths]
        if "metadata" in patch:
            for key in ("name", "namespace"):
                if key in patch["metadata"]:
                    result["metadata"][key] = patch["metadata"][key]
        return result, managers

    @staticmethod
    def _json_patch(current: Obj, raw: str, content_type: str) -> Obj:
        try:
            patch = json.loads(raw)
        except ValueError as exc:
            raise bad_request(f"error decoding patch: {exc}") from None
        if content_type == MERGE_PATCH:
            return _merge_patch(copy.deepcopy(current), patch)
        try:
            result = jsonpatch.apply_patch(current, patch)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            # patch.go: a JSON patch that does not apply is a 422 with the library's words.
            raise StatusError(422, "Invalid", str(exc)) from None
        if not isinstance(result, dict):
            raise bad_request("the patch did not leave an object")
        return result

    @staticmethod
    def _check_resource_version(resource: Resource, live: Obj, wanted: Any) -> None:
        # A resourceVersion in the patch is a precondition (optimistic concurrency): a stale
        # one is NewConflict with the registry's "the object has been modified" words.
        if wanted and wanted != live["metadata"].get("resourceVersion"):
            name = live["metadata"]["name"]
            raise StatusError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.group_resource} "{name}": the object '
                "has been modified; please apply your changes to the latest version and try again",
                _details(resource, name),
            )

    def _namespace_lifecycle(self, resource: Resource, info: _Info, *, creating: bool) -> None:
        # The NamespaceLifecycle admission plugin (apiserver pkg/admission/plugin/namespace/
        # lifecycle/admission.go): no writes into a namespace that does not exist (the
        # Namespace's NotFound), no creates in one being terminated.
        if not resource.namespaced:
            return
        namespace = self._store.get(("", "namespaces"), {}).get(info.namespace)
        if namespace is None:
            raise not_found(NAMESPACES, info.namespace)
        if creating and namespace.obj.get("status", {}).get("phase") == "Terminating":
            raise forbidden(
                resource,
                info.name,
                f"unable to create new content in namespace {info.namespace} because it is "
                "being terminated",
            )

    # --- delete -------------------------------------------------------------------------

    async def _delete(
        self, resource: Resource, info: _Info, query: Mapping[str, str], request: web.Request
    ) -> Obj:
        stored = self._stored(resource, info)
        if stored is None:
            raise not_found(resource, info.name)
        raw = await request.read()
        options = (json.loads(raw) if raw.strip() else None) or {}
        preconditions = options.get("preconditions") or {}
        metadata = stored.obj["metadata"]
        if preconditions.get("uid") not in (None, metadata["uid"]):
            raise StatusError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.group_resource} "{info.name}": '
                f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in "
                f"object meta: {metadata['uid']}",
                _details(resource, info.name),
            )
        dry_run = query.get("dryRun", "") == "All" or "All" in (options.get("dryRun") or [])
        if not dry_run:
            key = self._key(resource, info.name, info.namespace)
            del self._store[(resource.group, resource.plural)][key]
            self._revision += 1
        # A custom resource's store returns a Status, not the object (registry/generic/
        # registry/store.go finalizeDelete: the CR store does not set ReturnDeletedObject).
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": _details(resource, info.name, uid=metadata["uid"]),
        }

    # --- the store ----------------------------------------------------------------------

    def _resource_of(self, obj: Mapping[str, Any]) -> Resource:
        api_version = str(obj.get("apiVersion", ""))
        group = api_version.rpartition("/")[0]
        resource = self._known.get((group, str(obj.get("kind", ""))))
        if resource is None:
            raise KeyError(f"no resource of {api_version} {obj.get('kind')}: serve it first")
        return resource

    @staticmethod
    def _key(resource: Resource, name: str, namespace: str | None) -> str:
        return f"{namespace or 'default'}/{name}" if resource.namespaced else name

    def _stored(self, resource: Resource, info: _Info) -> _Stored | None:
        key = self._key(resource, info.name, info.namespace)
        return self._store.get((resource.group, resource.plural), {}).get(key)

    def _write(self, resource: Resource, obj: Obj, managers: list[_Manager]) -> None:
        self._revision += 1
        metadata = obj["metadata"]
        metadata["resourceVersion"] = str(self._revision)
        if managers:
            metadata["managedFields"] = [m.entry() for m in managers]
        else:
            metadata.pop("managedFields", None)
        key = self._key(resource, metadata["name"], metadata.get("namespace"))
        self._store.setdefault((resource.group, resource.plural), {})[key] = _Stored(
            copy.deepcopy(obj), managers
        )

    def _timestamp(self) -> str:
        return self.now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _content(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}


def _same(stored: _Stored, result: Obj, managers: list[_Manager]) -> bool:
    """An apply or patch that changes nothing is not written (kubernetes/kubernetes#88875)."""

    def comparable(obj: Obj) -> Obj:
        metadata = {
            k: v
            for k, v in obj.get("metadata", {}).items()
            if k not in ("managedFields", "resourceVersion", "generation")
        }
        return {**obj, "metadata": metadata}

    return comparable(stored.obj) == comparable(result) and sorted(
        m.identity() for m in stored.managers
    ) == sorted(m.identity() for m in managers)


def _updated(
    stored: _Stored, result: Obj, manager: str, api_version: str, now: str
) -> list[_Manager]:
    """Ownership after a non-apply patch: the updater takes what it changed (operation
    Update), fields it removed are nobody's."""
    before, after = _leaves(stored.obj), _leaves(result)
    changed = {path for path, value in after.items() if before.get(path, _MISSING) != value}
    removed = before.keys() - after.keys()
    managers = [copy.deepcopy(m) for m in stored.managers]
    for m in managers:
        m.paths -= changed | removed
    if changed:
        mine = next((m for m in managers if (m.manager, m.operation) == (manager, "Update")), None)
        if mine is None:
            mine = _Manager(manager, "Update", api_version, now)
            managers.append(mine)
        mine.paths |= changed
        mine.time = now
    return [m for m in managers if m.paths]


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _conflict(conflicts: list[tuple[_Manager, FieldPath]]) -> StatusError:
    # managedfields/internal/conflict.go NewConflictError: 409, one cause per field.
    def who(manager: _Manager) -> str:
        if manager.operation == "Update":
            return f'"{manager.manager}" using {manager.api_version}'
        return f'"{manager.manager}"'

    def dotted(path: FieldPath) -> str:
        return "".join(f".{key}" for key in path)

    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {who(m)}", "field": dotted(p)}
        for m, p in conflicts
    ]
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {who(manager)}: {dotted(path)}"
    else:
        lines = []
        for name in sorted({m.manager for m, _ in conflicts}):
            owned = [(m, p) for m, p in conflicts if m.manager == name]
            lines.append(f"conflicts with {who(owned[0][0])}:")
            lines.extend(f"- {dotted(p)}" for _, p in owned)
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return StatusError(409, "Conflict", message, {"causes": causes})


# --- using it from a test ----------------------------------------------------------------


async def serve(aiohttp_server: Callable[..., Awaitable[Any]], kube: KubeAPI) -> KubeAPI:
    """Serve `kube` with pytest-aiohttp's `aiohttp_server` on the test's loop; sets its url."""
    server = await aiohttp_server(kube.app())
    kube.url = f"http://{server.host}:{server.port}"
    return kube


def write_kubeconfig(
    path: Path, kube: KubeAPI, *, token: str | None = None, context: str = "stand-in"
) -> Path:
    """A kubeconfig whose current context reaches the stand-in with its bearer token."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "stand-in", "cluster": {"server": kube.url}}],
        "users": [{"name": "audit", "user": {"token": kube.token if token is None else token}}],
        "contexts": [{"name": context, "context": {"cluster": "stand-in", "user": "audit"}}],
        "current-context": context,
    }
    path.write_text(json.dumps(config))
    return path


def client_configuration(kube: KubeAPI, *, token: str | None = None) -> Any:
    """A `kubernetes.client.Configuration` for the stand-in (token None: the stand-in's)."""
    import kubernetes  # noqa: PLC0415 - only the tests that drive the client need it

    configuration = kubernetes.client.Configuration(host=kube.url)
    if token != "":
        configuration.api_key = {"authorization": kube.token if token is None else token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    return configuration
