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
nothing of that kind exists to judge. A 404 on the built-in kinds, a 403 anywhere, or an API
server that does not answer is a `ClusterError` with one line that says what to grant or fix.

Writing (`write_reports`): server-side apply of each report (Content-Type
`application/apply-patch+yaml`, `fieldManager=gpu-share-webhook`, `force=true`: this tool
owns these objects), skipping those whose content is already in the cluster, then deleting
the reports this tool wrote before (label `app.kubernetes.io/managed-by=gpu-share-webhook`)
that this run does not make: a namespace that opted out, a report split no longer needed.
The verbs: list, create, patch, delete on the report kinds; list on the audited kinds.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from webhook import names, reporting
from webhook.core import pods

DEFAULT_PAGE_SIZE = 500
# How many times an expired continue token restarts one kind's list.
RESTARTS = 3
# Connect and read timeouts of each request, in seconds.
TIMEOUT = (10.0, 120.0)
APPLY_PATCH = "application/apply-patch+yaml"


class ClusterError(Exception):
    """The API could not be read or written; str() is one line that says what to do."""


def connect(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A `kubernetes.client.ApiClient`: from `kubeconfig` (its `context`) if given, else the
    pod's service account, else the default kubeconfig (`$KUBECONFIG`, `~/.kube/config`).
    Close it when done."""
    if kubeconfig and not os.path.exists(kubeconfig):
        raise ClusterError(f"{kubeconfig}: no such kubeconfig file")
    try:
        if kubeconfig or context:
            return config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, persist_config=False
            )
        configuration = client.Configuration()
        try:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        except ConfigException:
            return config.new_client_from_config(  # type: ignore[no-untyped-call]
                persist_config=False
            )
        return client.ApiClient(configuration)
    # The loader raises whatever a malformed file provokes (YAML errors, KeyError, TypeError).
    except Exception as exc:
        where = kubeconfig or "the service account or the default kubeconfig"
        raise ClusterError(f"no usable Kubernetes configuration in {where}: {_line(exc)}") from exc


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


def resources(kinds: Sequence[pods.Kind]) -> list[Resource]:
    """What `audit --cluster` lists: the built-in kinds and each kind of the WorkloadKinds
    file, by the first version it lists (a kind is listed once)."""
    out = list(BUILTIN)
    for kind in kinds:
        if kind.builtin:
            continue
        out.append(Resource(kind.group, kind.versions[0], kind.resource, kind.kind, True))
    return out


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
    page_size: int = DEFAULT_PAGE_SIZE,
) -> Read:
    """Every object of `listed` in the cluster (see the module docstring)."""
    out = Read()
    for resource in listed:
        for attempt in range(RESTARTS + 1):
            try:
                items, calls, finished = _list_all(api_client, resource, page_size)
            except _Expired:
                if attempt == RESTARTS:
                    raise ClusterError(
                        f"listing {resource.text}: the list's continue token expired"
                        f" {RESTARTS + 1} times (each page must come within the API server's"
                        " token lifetime, about five minutes): retry, or raise --page-size"
                    ) from None
                continue
            except _NotServed:
                out.notes.append(
                    f"{resource.text} ({resource.api_version}) is not served by this cluster:"
                    f" no {resource.kind} to audit"
                )
                break
            out.objects += items
            out.counts[resource.text] = (len(items), calls)
            out.finished += finished
            break
    return out


class _Expired(Exception):
    pass


class _NotServed(Exception):
    pass


def _list_all(
    api_client: Any, resource: Resource, page_size: int
) -> tuple[list[dict[str, Any]], int, int]:
    """The kind's objects, the requests it took, and the finished Pods left out."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    calls = finished = 0
    while True:
        calls += 1
        page = _page(api_client, resource, page_size, token)
        raw = page.get("items")
        for item in raw if isinstance(raw, list) else ():
            if not isinstance(item, dict):
                continue
            if resource.kind == "Pod" and _finished(item):
                finished += 1
                continue
            items.append(_trimmed(item, resource))
        meta = page.get("metadata")
        token = meta.get("continue") if isinstance(meta, dict) else None
        if not token:
            return items, calls, finished


# A Pod in these phases has stopped for good (its containers will not run again) and holds
# no device: the kubelet gave them back. What the webhook would do to it says nothing.
FINISHED_PHASES = ("Succeeded", "Failed")


def _finished(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status")
    return isinstance(status, dict) and status.get("phase") in FINISHED_PHASES


def _page(api_client: Any, resource: Resource, limit: int, token: str | None) -> dict[str, Any]:
    what = f"list {resource.text} at the cluster scope"
    options: dict[str, Any] = {
        "limit": limit,
        "_preload_content": False,
        "_request_timeout": TIMEOUT,
    }
    if token:
        options["_continue"] = token
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
            response = client.CustomObjectsApi(api_client).list_cluster_custom_object(
                resource.group, resource.version, resource.plural, **options
            )
        body = response.data
    except ApiException as exc:
        if exc.status == 410:
            raise _Expired from None
        if exc.status == 404 and resource.optional:
            raise _NotServed from None
        raise ClusterError(_explain(exc, what, resource.group, resource.plural)) from None
    except (HTTPError, OSError) as exc:
        raise ClusterError(f"{what}: the API server did not answer: {_line(exc)}") from None
    try:
        page = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ClusterError(f"{what}: the answer is not JSON") from None
    if not isinstance(page, dict):
        raise ClusterError(f"{what}: the answer is not a list")
    return page


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


def existing_reports(
    api_client: Any, api: reporting.ReportApi, *, page_size: int = DEFAULT_PAGE_SIZE
) -> list[dict[str, Any]]:
    """The reports of `api` this tool wrote before (label managed-by), both kinds."""
    out: list[dict[str, Any]] = []
    selector = f"{reporting.MANAGED_BY_LABEL}={reporting.FIELD_MANAGER}"
    for plural, kind in ((api.plural, api.kind), (api.cluster_plural, api.cluster_kind)):
        resource = Resource(api.group, api.version, plural, kind)
        token: str | None = None
        while True:
            page = _reports_page(api_client, resource, selector, page_size, token)
            raw = page.get("items")
            out += [i for i in (raw if isinstance(raw, list) else ()) if isinstance(i, dict)]
            meta = page.get("metadata")
            token = meta.get("continue") if isinstance(meta, dict) else None
            if not token:
                break
    return out


def _reports_page(
    api_client: Any, resource: Resource, selector: str, limit: int, token: str | None
) -> dict[str, Any]:
    what = f"list {resource.text} at the cluster scope"
    options: dict[str, Any] = {
        "label_selector": selector,
        "limit": limit,
        "_preload_content": False,
        "_request_timeout": TIMEOUT,
    }
    if token:
        options["_continue"] = token
    try:
        custom: Any = client.CustomObjectsApi(api_client)
        response = custom.list_cluster_custom_object(
            resource.group, resource.version, resource.plural, **options
        )
        page = orjson.loads(response.data)
    except ApiException as exc:
        if exc.status == 404:
            raise ClusterError(
                f"{what}: the {resource.text} CRD is not installed; install it (see"
                " docs/audit.md), or pick the other report API with -o"
            ) from None
        raise ClusterError(_explain(exc, what, resource.group, resource.plural)) from None
    except (HTTPError, OSError) as exc:
        raise ClusterError(f"{what}: the API server did not answer: {_line(exc)}") from None
    except orjson.JSONDecodeError:
        raise ClusterError(f"{what}: the answer is not JSON") from None
    if not isinstance(page, dict):
        raise ClusterError(f"{what}: the answer is not a list")
    return page


def write_reports(
    api_client: Any,
    api: reporting.ReportApi,
    reports: Sequence[Mapping[str, Any]],
    existing: Sequence[Mapping[str, Any]],
) -> Written:
    """Apply `reports`, leaving alone those already as they are, and delete the ones of
    `existing` (from `existing_reports`) that `reports` does not hold."""
    done = Written()
    before = {_key(obj): obj for obj in existing}
    custom = client.CustomObjectsApi(api_client)
    for obj in reports:
        key = _key(obj)
        old = before.pop(key, None)
        if old is not None and _same(obj, old):
            done.unchanged.append(_shown(key))
            continue
        try:
            _apply(custom, api, key, obj, new=old is None)
        except _NamespaceGone as gone:
            done.skipped.append(f"{_shown(key)} ({gone})")
            continue
        (done.created if old is None else done.updated).append(_shown(key))
    for key in before:
        _delete(custom, api, key)
        done.deleted.append(_shown(key))
    return done


def _apply(
    custom: Any,
    api: reporting.ReportApi,
    key: tuple[str, str, str],
    obj: Mapping[str, Any],
    *,
    new: bool,
) -> None:
    _, namespace, name = key
    plural = api.plural if namespace else api.cluster_plural
    options = {
        "field_manager": reporting.FIELD_MANAGER,
        "force": True,
        "_content_type": APPLY_PATCH,
        "_request_timeout": TIMEOUT,
        "_preload_content": False,
    }
    where = (
        (api.group, api.version, namespace, plural)
        if namespace
        else (api.group, api.version, plural)
    )
    call = (
        custom.patch_namespaced_custom_object if namespace else custom.patch_cluster_custom_object
    )
    # An apply that creates the object needs `create`, one that changes it `patch`.
    verb = "create" if new else "patch"
    what = f"apply {plural}.{api.group} {_shown(key)}"
    try:
        call(*where, name, dict(obj), **options)
    except ApiException as exc:
        # The namespace was deleted since it was listed (the NamespaceLifecycle admission
        # plugin: NotFound of the Namespace itself), or is being deleted (no new objects in
        # it): nothing to report there; the other reports are still written.
        if namespace and exc.status == 404 and _status_kind(exc.body) == "namespaces":
            raise _NamespaceGone("the namespace is gone") from None
        message = _status_message(exc.body)
        if namespace and exc.status == 403 and "because it is being terminated" in message:
            raise _NamespaceGone("the namespace is being deleted") from None
        raise ClusterError(_explain(exc, what, api.group, plural, verb=verb)) from None
    except (HTTPError, OSError) as exc:
        raise ClusterError(f"{what}: the API server did not answer: {_line(exc)}") from None


class _NamespaceGone(Exception):
    pass


def _status_kind(body: object) -> str:
    """The `details.kind` of a Status body (the resource a NotFound is about)."""
    if not isinstance(body, (str, bytes)) or not body:
        return ""
    try:
        status = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    details = status.get("details") if isinstance(status, dict) else None
    kind = details.get("kind") if isinstance(details, dict) else None
    return kind if isinstance(kind, str) else ""


def _delete(custom: Any, api: reporting.ReportApi, key: tuple[str, str, str]) -> None:
    """Delete a report; one that is gone already is fine."""
    _, namespace, name = key
    plural = api.plural if namespace else api.cluster_plural
    where = (
        (api.group, api.version, namespace, plural)
        if namespace
        else (api.group, api.version, plural)
    )
    call = (
        custom.delete_namespaced_custom_object if namespace else custom.delete_cluster_custom_object
    )
    what = f"delete {plural}.{api.group} {_shown(key)}"
    with contextlib.suppress(_Gone):
        _call(
            what,
            api.group,
            plural,
            lambda: call(*where, name, _request_timeout=TIMEOUT, _preload_content=False),
            verb="delete",
            gone_is_fine=True,
        )


class _Gone(Exception):
    pass


def _call(
    what: str,
    group: str,
    plural: str,
    call: Callable[[], Any],
    *,
    verb: str,
    gone_is_fine: bool = False,
) -> None:
    try:
        call()
    except ApiException as exc:
        if exc.status == 404 and gone_is_fine:
            raise _Gone from None
        raise ClusterError(_explain(exc, what, group, plural, verb=verb)) from None
    except (HTTPError, OSError) as exc:
        raise ClusterError(f"{what}: the API server did not answer: {_line(exc)}") from None


def _key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return (str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))


def _shown(key: tuple[str, str, str]) -> str:
    _, namespace, name = key
    return f"{namespace}/{name}" if namespace else name


# The fields this tool sets at the top of a report; the others (metadata the API server
# keeps) do not make a report differ.
_OWN = ("source", "scope", "summary", "results")


def _same(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether applying `new` would change nothing of `old`."""
    if any(new.get(k) != old.get(k) for k in _OWN):
        return False
    meta, old_meta = new.get("metadata"), old.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    old_labels = old_meta.get("labels") if isinstance(old_meta, Mapping) else None
    old_labels = old_labels if isinstance(old_labels, Mapping) else {}
    return all(old_labels.get(k) == v for k, v in (labels or {}).items())


# --------------------------------------------------------------------------- errors


def _explain(exc: ApiException, what: str, group: str, plural: str, *, verb: str = "list") -> str:
    status = exc.status
    message = _status_message(exc.body) or exc.reason or ""
    if status == 403:
        where = f'"{plural}" in API group "{group}"'
        # RBAC's message names the verb it checked ("cannot patch resource ..."), but not
        # for the create check of an apply that would create the object, which says only
        # "is forbidden: ".
        named = re.search(r"cannot ([a-z]+) resource", message)
        verb = named.group(1) if named else verb
        return (
            f"{what}: forbidden ({_line(message)}); the audit's ServiceAccount needs {verb} on"
            f" {where} (the chart's audit ClusterRole grants it)"
        )
    if status == 401:
        return f"{what}: not authenticated (401): check the kubeconfig or the service account token"
    return f"{what}: {status} {_line(message)}"


def _status_message(body: object) -> str:
    if not isinstance(body, (str, bytes)) or not body:
        return ""
    try:
        status = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return message if isinstance(message, str) else ""


def _line(value: object, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def now() -> int:
    """Seconds since the epoch: the timestamp of new results."""
    return int(time.time())
