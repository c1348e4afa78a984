"""`audit --cluster`: the objects of a cluster read through the Kubernetes API, and the
policy reports written back.

Reading: every kind the audit judges is listed cluster-wide (`/api/v1/pods`, not once per
namespace) in pages of `page_size` (`limit` and `continue`, one consistent snapshot per
kind). A continue token that expired (410 Expired: the API server keeps them about five
minutes) restarts that kind's list, at most `RESTARTS` times: a list from the fresh token the
410 carries would no longer be one snapshot, and an owner read in one and its pods in another
would be judged apart. Items of built-in lists come without `kind` and `apiVersion` (the API
server leaves them out); they are set from the list's. `metadata.managedFields` and `status`
are dropped as each page is read: the audit reads neither, and they are most of a Pod.
Pods that have finished (phase Succeeded or Failed: a Job's completed pods) are left out:
they run nothing and hold no device, and "delete it to get what the webhook adds" would be
advice about nothing (`audit -f` judges them, as a dump holds them).

Kinds that may not be served: resource.k8s.io/v1 (Kubernetes 1.34+) and the kinds of the
WorkloadKinds file (their CRDs may not be installed). A 404 on those is a note, not an error:
nothing of that kind exists to judge. A 404 on the built-in kinds, a 403 anywhere, an answer
that is not a list (or a list that never ends), or an API server that does not answer is a
`ClusterError` with one line that says what to grant or fix.

Writing (`write_reports`): server-side apply of each report (Content-Type
`application/apply-patch+yaml`, `fieldManager=gpu-share-webhook`, `force=true`: this tool
owns these objects, and a report of its name is its; the client writes the body with
json.dumps, whose escapes the API server's YAML reader takes because a report holds no
character beyond the BMP, see `reporting`), skipping those whose content is already in the
cluster, then deleting the reports this tool wrote before (label
`app.kubernetes.io/managed-by=gpu-share-webhook`) that this run does not make: a namespace
that opted out or has nothing left to judge, a part no longer needed. A namespace deleted, or
being deleted, since it was listed is skipped; a report the API server refuses does not keep
the others from being written (the run exits 3 after). The verbs: list, create, patch,
delete on the report kinds; list on the audited kinds.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from webhook.policy import kinds, names
from webhook.tools import kubeclient, reporting

# A page of more bytes than this is asked for again with fewer objects (`_pages`).
PAGE_BYTES = 4 * 1024 * 1024
# Reports per list request: a report holds up to about 1 MB (reporting.REPORT_BYTES), and a
# page is held twice while it is read (its JSON, and the objects made of it).
REPORT_PAGE_SIZE = 5
# How many times an expired continue token restarts one kind's list.
RESTARTS = 3
# Pages of one list past which the API server is taken to loop (a continue token that never
# ends): at the largest --page-size, 10,000 objects a page, a billion objects.
MAX_PAGES = 100_000
# Connect and read timeouts of each request, in seconds.
TIMEOUT = (10.0, 120.0)
APPLY_PATCH = "application/apply-patch+yaml"
# A Pod in these phases has stopped for good (its containers will not run again) and holds
# no device: the kubelet gave them back. What the webhook would do to it says nothing.
FINISHED_PHASES = ("Succeeded", "Failed")


class ClusterError(Exception):
    """The API could not be read or written; str() is one line that says what to do."""


def connect(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """`kubeclient.connect`, its errors a ClusterError. Close the client when done."""
    try:
        return kubeclient.connect(kubeconfig, context)
    except kubeclient.ConfigurationError as exc:
        raise ClusterError(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class Resource:
    """A kind the audit lists."""

    group: str
    version: str
    plural: str
    kind: str
    # Whether a 404 means "not served here" (a note) rather than an error.
    optional: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def text(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


BUILTIN = (
    Resource("", "v1", "namespaces", "Namespace"),
    Resource("", "v1", "pods", "Pod"),
    Resource("", "v1", "replicationcontrollers", "ReplicationController"),
    Resource("apps", "v1", "deployments", "Deployment"),
    Resource("apps", "v1", "replicasets", "ReplicaSet"),
    Resource("apps", "v1", "statefulsets", "StatefulSet"),
    Resource("apps", "v1", "daemonsets", "DaemonSet"),
    Resource("batch", "v1", "jobs", "Job"),
    Resource("batch", "v1", "cronjobs", "CronJob"),
    Resource(names.DRA_GROUP, names.DRA_VERSION, "resourceclaims", names.CLAIM_KIND, True),
    Resource(
        names.DRA_GROUP,
        names.DRA_VERSION,
        "resourceclaimtemplates",
        names.CLAIM_TEMPLATE_KIND,
        True,
    ),
)


def resources(kinds: Sequence[kinds.Kind]) -> list[Resource]:
    """What `audit --cluster` lists: the built-in kinds and each kind of the WorkloadKinds
    file, by the first version it lists (a kind is listed once)."""
    out = list(BUILTIN)
    for kind in kinds:
        if kind.builtin:
            continue
        out.append(Resource(kind.group, kind.versions[0], kind.resource, kind.kind, True))
    return out


def report_resources(api: reporting.ReportApi) -> tuple[Resource, Resource]:
    """The namespaced and the cluster kind of a report API."""
    return (
        Resource(api.group, api.version, api.plural, api.kind),
        Resource(api.group, api.version, api.cluster_plural, api.cluster_kind),
    )


# --------------------------------------------------------------------------- reading


@dataclass(slots=True)
class Read:
    """What `read` found."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    # Kinds not served (404 on an optional kind), in words, one per kind.
    notes: list[str] = field(default_factory=list)
    # Per kind listed: how many objects, in how many requests.
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Pods left out because they have finished (FINISHED_PHASES).
    finished: int = 0


def read(
    api_client: Any,
    listed: Sequence[Resource],
    *,
    page_size: int,
    reviewed: Callable[[Sequence[Mapping[str, Any]]], Collection[str]] | None = None,
) -> Read:
    """Every object of `listed` in the cluster (see the module docstring).

    `reviewed`: given the Namespaces (listed first), the names of those the webhook reviews.
    An object in any other namespace is kept as its kind, name and uid only: the audit
    counts it and judges nothing of it, and a tenant of a namespace that never opted in
    cannot fill the audit's memory with what the webhook never sees (an object of 1 MB of
    small env entries is some 20 MB read).
    """
    out = Read()
    judged: Collection[str] | None = None
    for resource in listed:

        def keep(
            item: dict[str, Any],
            resource: Resource = resource,
            judged: Collection[str] | None = judged,
        ) -> Any:
            # As each page is read: what is not judged is not held.
            if resource.kind == "Pod" and _finished(item):
                return _FINISHED
            trimmed = _trimmed(item, resource)
            if judged is not None and _namespace_of(trimmed) not in judged:
                return _stub(trimmed)
            return trimmed

        try:
            found = _list(api_client, resource, page_size=page_size, keep=keep)
        except _NotServed:
            out.notes.append(
                f"{resource.text} ({resource.api_version}) is not served by this cluster:"
                f" no {resource.kind} to audit"
            )
            continue
        items = [item for item in found.items if item is not _FINISHED]
        out.finished += len(found.items) - len(items)
        out.objects += items
        out.counts[resource.text] = (len(items), found.calls)
        if resource.kind == "Namespace" and reviewed is not None:
            judged = frozenset(reviewed(items))
    return out


# What `read` keeps of a Pod that has finished, until it counts them.
_FINISHED = object()


def _namespace_of(item: Mapping[str, Any]) -> object:
    meta = item.get("metadata")
    return meta.get("namespace") if isinstance(meta, dict) else None


def _stub(item: Mapping[str, Any]) -> dict[str, Any]:
    """An object the audit only counts: its kind, name and uid."""
    meta = item.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return {
        "apiVersion": item.get("apiVersion"),
        "kind": item.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid") if k in meta},
    }


@dataclass(frozen=True, slots=True)
class Existing:
    """A report this tool wrote before, as much of it as a run needs: which it is, its
    labels, what it holds (`reporting.digest`), and its results' timestamps
    (`reporting.timestamps`). Not the report itself: at 50,000 pods they hold some 65 MB of
    JSON, kept for the length of a run."""

    key: tuple[str, str, str]  # kind, namespace ("" for a cluster report), name
    labels: Mapping[str, str]
    digest: bytes
    stamps: Mapping[reporting.Identity, reporting.Stamp]


def existing_reports(
    api_client: Any, api: reporting.ReportApi, *, page_size: int
) -> list[Existing]:
    """The reports of `api` this tool wrote before, both kinds: those with its label and a
    name it gives (`reporting.is_report_name`). The label alone is not enough: whoever may
    patch another tool's report could label it so, and have this tool delete it."""
    selector = f"{reporting.MANAGED_BY_LABEL}={reporting.FIELD_MANAGER}"
    out: list[Existing] = []
    for resource in report_resources(api):
        try:
            found = _list(
                api_client,
                resource,
                page_size=min(page_size, REPORT_PAGE_SIZE),
                selector=selector,
                keep=_existing,
            )
        except _NotServed:
            raise ClusterError(
                f"list {resource.text} at the cluster scope: the {resource.text} CRD is not"
                " installed; install it (see docs/audit.md), or pick the other report API"
                " with -o"
            ) from None
        out += (item for item in found.items if isinstance(item, Existing))
    return out


def _existing(item: dict[str, Any]) -> Existing | None:
    """A listed report as `Existing`, as its page is read (None: not one of ours)."""
    meta = item.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not reporting.is_report_name(name):
        return None
    labels = meta.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    return Existing(
        key=_key(item),
        labels={str(k): str(v) for k, v in labels.items()},
        digest=reporting.digest(item),
        stamps=reporting.timestamps([item]),
    )


@dataclass(slots=True)
class _Listed:
    items: list[Any]
    calls: int


class _Expired(Exception):
    pass


class _NotServed(Exception):
    pass


def _list(
    api_client: Any,
    resource: Resource,
    *,
    page_size: int,
    selector: str | None = None,
    keep: Callable[[dict[str, Any]], Any] | None = None,
) -> _Listed:
    """Every item of one kind, page by page (each as `keep` makes it, None left out); the
    whole list again when a continue token expires (at most RESTARTS times)."""
    for attempt in range(RESTARTS + 1):
        try:
            return _pages(api_client, resource, page_size, selector, keep)
        except _Expired:
            if attempt == RESTARTS:
                raise ClusterError(
                    f"listing {resource.text}: the list's continue token expired"
                    f" {RESTARTS + 1} times (each page must come within the API server's"
                    " token lifetime, about five minutes): retry, or raise --page-size"
                ) from None
    raise AssertionError("unreachable")  # pragma: no cover


def _pages(
    api_client: Any,
    resource: Resource,
    page_size: int,
    selector: str | None,
    keep: Callable[[dict[str, Any]], Any] | None,
) -> _Listed:
    what = f"list {resource.text} at the cluster scope"
    items: list[Any] = []
    token: str | None = None
    seen: set[str] = set()
    calls = 0
    while True:
        calls += 1
        if calls > MAX_PAGES:
            raise ClusterError(f"{what}: more than {MAX_PAGES:,} pages; the list does not end")
        body = _page(api_client, resource, page_size, token, selector)
        if len(body) > PAGE_BYTES and page_size > 1:
            # Large objects (a tenant's, of 1 MB of small env entries each, some 20 MB read):
            # ask for the same page again (the continue token names the same snapshot), with
            # fewer of them, before reading it. What is not judged is dropped as each page is
            # read; a page is what is held at once.
            page_size = max(1, min(page_size // 2, page_size * PAGE_BYTES // len(body)))
            continue
        page = _loads(body, what)
        if not isinstance(page, dict):
            raise ClusterError(f"{what}: the answer is not a list")
        raw = page.get("items")
        if not isinstance(raw, list):
            raise ClusterError(f"{what}: the answer is not a list (no items)")
        for item in raw:
            if isinstance(item, dict) and (kept := keep(item) if keep else item) is not None:
                items.append(kept)
        meta = page.get("metadata")
        token = meta.get("continue") if isinstance(meta, dict) else None
        if not token:
            return _Listed(items, calls)
        if not isinstance(token, str):
            raise ClusterError(f"{what}: the answer's continue token is not a string")
        if token in seen:
            raise ClusterError(f"{what}: the API server sent a continue token twice")
        seen.add(token)


def _page(
    api_client: Any, resource: Resource, limit: int, token: str | None, selector: str | None
) -> bytes:
    """One page of a list, as the API server sent it."""
    what = f"list {resource.text} at the cluster scope"
    options: dict[str, Any] = {
        "limit": limit,
        "_preload_content": False,
        "_request_timeout": TIMEOUT,
    }
    if token:
        options["_continue"] = token
    if selector:
        options["label_selector"] = selector
    try:
        if resource.group == "":
            core: Any = client.CoreV1Api(api_client)
            call: Callable[..., Any] = {
                "namespaces": core.list_namespace,
                "pods": core.list_pod_for_all_namespaces,
                "replicationcontrollers": core.list_replication_controller_for_all_namespaces,
            }[resource.plural]
            response = call(**options)
        else:
            custom: Any = client.CustomObjectsApi(api_client)
            response = custom.list_cluster_custom_object(
                resource.group, resource.version, resource.plural, **options
            )
        body = _body(response)
    except ApiException as exc:
        if exc.status == 410:
            raise _Expired from None
        if exc.status == 404 and (resource.optional or selector):
            raise _NotServed from None
        raise ClusterError(_explain(exc, what, resource.group, resource.plural)) from None
    except (HTTPError, OSError) as exc:
        raise ClusterError(f"{what}: the API server did not answer: {_line(exc)}") from None
    return body


def _body(response: Any) -> bytes:
    """A raw response's body, its connection given back to the pool for the next request."""
    try:
        data = response.data
    finally:
        response.release_conn()
    return data if isinstance(data, bytes) else b""


def _loads(body: bytes, what: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    # What orjson does not read, the API server may still serve: JSON nested deeper than
    # orjson's 1,024 levels (a custom resource's preserved fields), and the bytes of a
    # RawExtension as a tenant sent them (a claim's opaque parameters: "\ud800", a lone
    # surrogate, or bytes that are not UTF-8), which it keeps as they came. One such object
    # must not stop the audit of every other: read again as Go reads it (bad bytes become
    # U+FFFD) by the json module, what lies deeper than MAX_DEPTH left out.
    return _lenient_loads(body, what)


def _lenient_loads(body: bytes, what: str) -> Any:
    """`body` read by the json module: invalid UTF-8 replaced, what lies deeper than
    MAX_DEPTH left out (`_shallow`), lone surrogates kept (`reporting` escapes them)."""
    try:
        return json.loads(_shallow(body.decode("utf-8", "replace")))
    except (ValueError, RecursionError) as exc:
        raise ClusterError(f"{what}: the answer is not JSON ({_line(exc)})") from None


# How deep a lenient read keeps a page: what lies deeper (a tenant's claim parameters nested
# 5,000 lists deep, 32 times over, are a million lists read) becomes null. No object the
# audit judges reads anything near this deep; a page is an object, its items one level more.
MAX_DEPTH = 128
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _shallow(text: str) -> str:
    """`text` (JSON) with every value nested deeper than MAX_DEPTH replaced by null."""
    out: list[str] = []
    depth = 0
    cut_from = -1  # where the value being left out starts
    kept_to = 0
    for token in _TOKEN.finditer(text):
        mark = token.group()
        if mark[0] == '"':
            continue
        if mark in "[{":
            depth += 1
            if depth == MAX_DEPTH + 1 and cut_from < 0:
                cut_from = token.start()
        else:
            if depth == MAX_DEPTH + 1 and cut_from >= 0:
                out.append(text[kept_to:cut_from])
                out.append("null")
                kept_to = token.end()
                cut_from = -1
            depth -= 1
    if not out:
        return text
    out.append(text[kept_to:])
    return "".join(out)


def _finished(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status")
    return isinstance(status, dict) and status.get("phase") in FINISHED_PHASES


def _trimmed(item: dict[str, Any], resource: Resource) -> dict[str, Any]:
    """The item as `kubectl get -o json` shows it (kind and apiVersion set), without what the
    audit never reads."""
    item.setdefault("kind", resource.kind)
    item.setdefault("apiVersion", resource.api_version)
    item.pop("status", None)
    meta = item.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return item


# --------------------------------------------------------------------------- writing


@dataclass(slots=True)
class Written:
    """What `write_reports` did, report by report (`namespace/name` or `name`)."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    # Reports not written because their namespace went away or is being deleted since it
    # was listed, each with why.
    skipped: list[str] = field(default_factory=list)
    # What the API server refused to write or delete, one line each (the run exits 3).
    failed: list[str] = field(default_factory=list)


def write_reports(
    api_client: Any,
    api: reporting.ReportApi,
    reports: Iterable[Mapping[str, Any]],
    existing: Sequence[Existing],
) -> Written:
    """Apply `reports`, leaving alone those already as they are, and delete the ones of
    `existing` (from `existing_reports`) that `reports` does not hold."""
    done = Written()
    before = {old.key: old for old in existing}
    custom: Any = client.CustomObjectsApi(api_client)
    budget = [RUN_RETRIES]
    for obj in reports:
        key = _key(obj)
        old = before.pop(key, None)
        if old is not None and _same(obj, old):
            done.unchanged.append(_shown(key))
            continue
        try:
            created = _apply(custom, api, key, obj, new=old is None, budget=budget)
        except _NamespaceGone as why:
            done.skipped.append(f"{_shown(key)} ({why})")
            continue
        except ClusterError as problem:
            # One report the API server refuses does not keep the others from being written.
            done.failed.append(str(problem))
            continue
        (done.created if created else done.updated).append(_shown(key))
    for key in before:
        try:
            _delete(custom, api, key)
        except ClusterError as problem:
            done.failed.append(str(problem))
            continue
        done.deleted.append(_shown(key))
    return done


class _NamespaceGone(Exception):
    pass


def _apply(
    custom: Any,
    api: reporting.ReportApi,
    key: tuple[str, str, str],
    obj: Mapping[str, Any],
    *,
    new: bool,
    budget: list[int],
) -> bool:
    """Apply one report; whether the API server made it (201) rather than changed it.

    Applied with force: a report of this name is this tool's (`reporting.REPORT_NAME`), and
    whoever else wrote to it (a tenant allowed to write reports, who could otherwise keep
    the findings about their pods frozen by owning a field) is overruled. An answer of "too
    many requests" or "unavailable" is tried again, after the wait it asks for (at most
    RETRY_WAIT seconds), while `budget` (the run's) lasts."""
    _, namespace, name = key
    plural = api.plural if namespace else api.cluster_plural
    where = _where(api, plural, namespace)
    call = (
        custom.patch_namespaced_custom_object if namespace else custom.patch_cluster_custom_object
    )
    what = f"apply {plural}.{api.group} {_shown(key)}"
    # An apply that creates the object needs `create` besides `patch`.
    verb = "create" if new else "patch"
    attempt = 0
    while True:
        try:
            response = call(
                *where,
                name,
                dict(obj),
                field_manager=reporting.FIELD_MANAGER,
                force=True,
                _content_type=APPLY_PATCH,
                _request_timeout=TIMEOUT,
                _preload_content=False,
            )
            created = getattr(response, "status", 200) == 201
            _body(response)
            return created
        except ApiException as exc:
            if exc.status in _BUSY and attempt < RETRIES and budget[0] > 0:
                budget[0] -= 1
                time.sleep(_wait(exc, attempt))
                attempt += 1
                continue
            # The namespace was deleted since it was listed (the NamespaceLifecycle
            # admission plugin: NotFound of the Namespace itself), or is being deleted (no
            # new objects in it): nothing to report there; the other reports are written.
            details = kubeclient.status(exc.body).get("details")
            gone_kind = details.get("kind") if isinstance(details, dict) else None
            if namespace and exc.status == 404 and gone_kind == "namespaces":
                raise _NamespaceGone("the namespace is gone") from None
            message = kubeclient.status_message(exc.body)
            if namespace and exc.status == 403 and "because it is being terminated" in message:
                raise _NamespaceGone("the namespace is being deleted") from None
            raise ClusterError(_explain(exc, what, api.group, plural, verb=verb)) from None
        except (HTTPError, OSError) as exc:
            raise ClusterError(f"{what}: the API server did not answer: {_line(exc)}") from None


# Answers that say "later": too many requests, unavailable, gateway timeout.
_BUSY = (429, 503, 504)
# Tries again of one report, of a whole run (an API server that answers every report
# "later" must not keep a run past its deadline), and the longest wait.
RETRIES = 3
RUN_RETRIES = 10
RETRY_WAIT = 10.0


def _wait(exc: ApiException, attempt: int) -> float:
    """Seconds to wait before trying again: the answer's Retry-After, else 1, 2, 4."""
    headers = exc.headers or {}
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        wanted = float(raw) if raw is not None else float(2**attempt)
    except ValueError:
        wanted = float(2**attempt)
    return min(max(wanted, 0.0), RETRY_WAIT)


def _delete(custom: Any, api: reporting.ReportApi, key: tuple[str, str, str]) -> None:
    """Delete a report; one that is gone already is fine."""
    _, namespace, name = key
    plural = api.plural if namespace else api.cluster_plural
    call = (
        custom.delete_namespaced_custom_object if namespace else custom.delete_cluster_custom_object
    )
    what = f"delete {plural}.{api.group} {_shown(key)}"
    try:
        _body(
            call(
                *_where(api, plural, namespace),
                name,
                _request_timeout=TIMEOUT,
                _preload_content=False,
            )
        )
    except ApiException as exc:
        if exc.status != 404:
            raise ClusterError(_explain(exc, what, api.group, plural, verb="delete")) from None
    except (HTTPError, OSError) as exc:
        raise ClusterError(f"{what}: the API server did not answer: {_line(exc)}") from None


def _where(api: reporting.ReportApi, plural: str, namespace: str) -> tuple[str, ...]:
    if namespace:
        return (api.group, api.version, namespace, plural)
    return (api.group, api.version, plural)


def _key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return (str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))


def _shown(key: tuple[str, str, str]) -> str:
    _, namespace, name = key
    return f"{namespace}/{name}" if namespace else name


def _same(new: Mapping[str, Any], old: Existing) -> bool:
    """Whether applying `new` would change nothing of `old`: the same fields of its own, and
    its labels there (others may have added more)."""
    if reporting.digest(new) != old.digest:
        return False
    meta = new.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return all(old.labels.get(k) == v for k, v in (labels or {}).items())


# --------------------------------------------------------------------------- errors

# How RBAC's 403 names the verb it checked: `... cannot patch resource "policyreports" ...`.
_VERB = re.compile(r"cannot ([a-z]+) resource")


def _explain(exc: ApiException, what: str, group: str, plural: str, *, verb: str = "list") -> str:
    status = exc.status
    message = kubeclient.status_message(exc.body) or str(exc.reason or "")
    if status == 403:
        where = f'"{plural}" in API group "{group}"'
        # RBAC's message names the verb it checked ("cannot patch resource ..."), but not
        # for the create check of an apply that would create the object, which says only
        # "is forbidden: ".
        named = _VERB.search(message)
        verb = named.group(1) if named else verb
        return (
            f"{what}: forbidden ({_line(message)}); the audit's ServiceAccount needs {verb} on"
            f" {where} (the chart's audit ClusterRole grants it)"
        )
    if status == 401:
        return f"{what}: not authenticated (401): check the kubeconfig or the service account token"
    return f"{what}: {status} {_line(message)}"


def _line(value: object, limit: int = 300) -> str:
    """One line, cut at `limit` characters: a message of the API server, or an error."""
    text = kubeclient.line(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
