"""The stand-in of the API server (tests/support/kube_api.py), driven by the official client.

What the background audit's tests lean on must hold here first: lists page over a snapshot and
their tokens expire as the API server's do, selectors select, server-side apply creates,
merges and leaves an unchanged object unwritten, and every refusal (401, 403, 404, 410, 415,
422) comes as the API server words it. The client runs in a worker thread (it is synchronous)
while the stand-in answers on the test's event loop.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import pytest
from kubernetes.client import ApiException

from tests.support import kube_api
from tests.support.kube_api import APPLY_PATCH, POLICY_REPORTS, KubeAPI

_T = TypeVar("_T")
MANAGER = "gpu-share-webhook"
MANAGED_BY = "app.kubernetes.io/managed-by"
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
GROUP, VERSION = POLICY_REPORTS.group, POLICY_REPORTS.version


@pytest.fixture
async def kube(aiohttp_server: Any) -> KubeAPI:
    stand_in = KubeAPI(now=lambda: NOW)
    stand_in.serve(POLICY_REPORTS)
    stand_in.serve(kube_api.CLUSTER_POLICY_REPORTS)
    return await kube_api.serve(aiohttp_server, stand_in)


@pytest.fixture
def api(kube: KubeAPI) -> Iterator[Any]:
    with kubernetes.client.ApiClient(kube_api.client_configuration(kube)) as client:
        yield client


async def call(function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    return await asyncio.to_thread(functools.partial(function, *args, **kwargs))


async def refused(attempt: Awaitable[Any]) -> tuple[int, Any]:
    """The status and the decoded Status body of a call the server refuses."""
    with pytest.raises(ApiException) as caught:
        await attempt
    return caught.value.status, json.loads(caught.value.body)


def namespace(name: str, **status: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    if status:
        doc["status"] = status
    return doc


def pod(name: str, ns: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def report(
    name: str = "gpu-share-webhook", ns: str = "team-a", *, results: list[str] | None = None
) -> dict[str, Any]:
    rules = ["one"] if results is None else results
    return {
        "apiVersion": POLICY_REPORTS.api_version,
        "kind": "PolicyReport",
        "metadata": {"name": name, "namespace": ns, "labels": {MANAGED_BY: MANAGER}},
        "scope": {"apiVersion": "v1", "kind": "Namespace", "name": ns},
        "summary": {"pass": len(rules), "fail": 0, "warn": 0, "error": 0, "skip": 0},
        "results": [{"policy": "default", "rule": rule, "result": "pass"} for rule in rules],
    }


async def apply(
    api: Any,
    body: dict[str, Any],
    *,
    manager: str | None = MANAGER,
    force: bool | None = True,
    content_type: str = APPLY_PATCH,
) -> dict[str, Any]:
    objects = kubernetes.client.CustomObjectsApi(api)
    meta = body["metadata"]
    return await call(
        objects.patch_namespaced_custom_object,
        GROUP,
        VERSION,
        meta["namespace"],
        "policyreports",
        meta["name"],
        body,
        field_manager=manager,
        force=force,
        _content_type=content_type,
    )


def stored_report(kube: KubeAPI, name: str = "gpu-share-webhook", ns: str = "team-a") -> Any:
    return kube.object(POLICY_REPORTS.api_version, "PolicyReport", name, ns)


# --- lists: paging --------------------------------------------------------------------------

# Key order is etcd's: byte order of "<namespace>/<name>", so "a-b/..." comes before "a/...".
PODS = [
    ("a-b", "p1"),
    ("a-b", "p2"),
    ("a", "p1"),
    ("a", "p2"),
    ("a", "p3"),
    ("b", "p0"),
    ("c", "q"),
]


def seed_pods(kube: KubeAPI) -> None:
    kube.add(*(namespace(ns) for ns in ("a", "a-b", "b", "c")))
    kube.add(*(pod(name, ns) for ns, name in reversed(PODS)))


def names(page: Any) -> list[tuple[str, str]]:
    return [(item.metadata.namespace, item.metadata.name) for item in page.items]


async def test_a_list_pages_with_limit_and_continue_at_one_resource_version(
    kube: KubeAPI, api: Any
) -> None:
    seed_pods(kube)
    core = kubernetes.client.CoreV1Api(api)
    first = await call(core.list_pod_for_all_namespaces, limit=3)
    second = await call(
        core.list_pod_for_all_namespaces, limit=3, _continue=first.metadata.var_continue
    )
    third = await call(
        core.list_pod_for_all_namespaces, limit=3, _continue=second.metadata.var_continue
    )

    assert [names(p) for p in (first, second, third)] == [PODS[:3], PODS[3:6], PODS[6:]]
    assert {p.metadata.resource_version for p in (first, second, third)} == {str(kube.revision)}
    assert [p.metadata.remaining_item_count for p in (first, second, third)] == [4, 1, None]
    assert third.metadata.var_continue is None
    assert [r.query.get("continue") is None for r in kube.log] == [True, False, False]


async def test_built_in_list_items_carry_no_kind_but_custom_resource_items_do(
    kube: KubeAPI, api: Any
) -> None:
    seed_pods(kube)
    kube.add(namespace("team-a"), report())
    core = kubernetes.client.CoreV1Api(api)
    objects = kubernetes.client.CustomObjectsApi(api)
    pods = await call(core.list_pod_for_all_namespaces, limit=2)
    reports = await call(objects.list_cluster_custom_object, GROUP, VERSION, "policyreports")

    assert (pods.kind, pods.api_version) == ("PodList", "v1")
    assert {(item.kind, item.api_version) for item in pods.items} == {(None, None)}
    assert (reports["kind"], reports["apiVersion"]) == (
        "PolicyReportList",
        "wgpolicyk8s.io/v1alpha2",
    )
    assert [(i["kind"], i["apiVersion"]) for i in reports["items"]] == [
        ("PolicyReport", "wgpolicyk8s.io/v1alpha2")
    ]


async def test_later_pages_show_the_snapshot_of_the_first_not_what_changed_since(
    kube: KubeAPI, api: Any
) -> None:
    seed_pods(kube)
    core = kubernetes.client.CoreV1Api(api)
    first = await call(core.list_pod_for_all_namespaces, limit=3)
    kube.remove("v1", "Pod", "p2", "a")  # was to come on page two
    kube.add(pod("p25", "a"))  # would sort into page two

    rest = await call(
        core.list_pod_for_all_namespaces, limit=10, _continue=first.metadata.var_continue
    )
    fresh = await call(core.list_pod_for_all_namespaces)

    assert names(rest) == PODS[3:]
    assert rest.metadata.resource_version == first.metadata.resource_version
    assert ("a", "p25") in names(fresh)
    assert ("a", "p2") not in names(fresh)
    assert int(fresh.metadata.resource_version) > int(first.metadata.resource_version)


async def test_an_expired_token_is_410_expired_with_a_fresh_token_in_the_status(
    kube: KubeAPI, api: Any
) -> None:
    seed_pods(kube)
    core = kubernetes.client.CoreV1Api(api)
    first = await call(core.list_pod_for_all_namespaces, limit=3)
    kube.add(pod("p25", "a"))
    kube.expire_continue_tokens()

    status, body = await refused(
        call(core.list_pod_for_all_namespaces, limit=3, _continue=first.metadata.var_continue)
    )
    assert status == 410
    assert (body["kind"], body["status"], body["reason"], body["code"]) == (
        "Status",
        "Failure",
        "Expired",
        410,
    )
    assert body["message"].startswith(
        "The provided continue parameter is too old to display a consistent list result."
    )
    # The fresh token continues from the latest state: inconsistent, the new pod shows.
    rest = await call(
        core.list_pod_for_all_namespaces, limit=10, _continue=body["metadata"]["continue"]
    )
    assert names(rest) == [PODS[3], ("a", "p25"), *PODS[4:]]
    assert rest.metadata.resource_version == str(kube.revision)


async def test_a_token_can_be_made_to_expire_between_two_pages_of_one_list(
    kube: KubeAPI, api: Any
) -> None:
    seed_pods(kube)
    core = kubernetes.client.CoreV1Api(api)
    kube.expire_next_continue()
    first = await call(core.list_pod_for_all_namespaces, limit=3)
    status, _ = await refused(
        call(core.list_pod_for_all_namespaces, limit=3, _continue=first.metadata.var_continue)
    )
    again = await call(
        core.list_pod_for_all_namespaces, limit=3, _continue=first.metadata.var_continue
    )
    assert status == 410
    assert names(again) == PODS[3:6]


async def test_a_token_that_is_not_one_is_a_bad_request(kube: KubeAPI, api: Any) -> None:
    seed_pods(kube)
    core = kubernetes.client.CoreV1Api(api)
    status, body = await refused(
        call(core.list_pod_for_all_namespaces, limit=3, _continue="bm9wZQ")
    )
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"].startswith("invalid continue token: continue key is not valid")


async def test_a_namespaced_list_pages_within_its_namespace(kube: KubeAPI, api: Any) -> None:
    seed_pods(kube)
    core = kubernetes.client.CoreV1Api(api)
    first = await call(core.list_namespaced_pod, "a", limit=2)
    rest = await call(core.list_namespaced_pod, "a", limit=2, _continue=first.metadata.var_continue)
    assert [names(first), names(rest)] == [PODS[2:4], PODS[4:5]]
    assert kube.log[0].path == "/api/v1/namespaces/a/pods"


TEMPLATE = {"metadata": {"labels": {"app": "web"}}, "spec": pod("x", "x")["spec"]}


async def test_apps_and_batch_kinds_list_cluster_wide(kube: KubeAPI, api: Any) -> None:
    kube.add(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "x"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE},
        },
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "c", "namespace": "y"},
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": TEMPLATE}}},
        },
    )
    deployments = await call(kubernetes.client.AppsV1Api(api).list_deployment_for_all_namespaces)
    cronjobs = await call(kubernetes.client.BatchV1Api(api).list_cron_job_for_all_namespaces)
    assert [d.metadata.name for d in deployments.items] == ["d"]
    assert [c.metadata.name for c in cronjobs.items] == ["c"]
    assert [r.path for r in kube.log] == ["/apis/apps/v1/deployments", "/apis/batch/v1/cronjobs"]


# --- lists: selectors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["w1", "w2"]),
        ("app==web,tier=gpu", ["w2"]),
        ("app!=web", ["db", "bare"]),
        ("tier", ["w2", "db"]),
        ("!tier", ["w1", "bare"]),
        ("app in (web, db)", ["w1", "w2", "db"]),
        ("app notin (web)", ["db", "bare"]),
    ],
)
async def test_label_selectors_select(
    kube: KubeAPI, api: Any, selector: str, expected: list[str]
) -> None:
    kube.add(
        pod("w1", "s", app="web"),
        pod("w2", "s", app="web", tier="gpu"),
        pod("db", "s", app="db", tier="cpu"),
        pod("bare", "s"),
    )
    core = kubernetes.client.CoreV1Api(api)
    found = await call(core.list_namespaced_pod, "s", label_selector=selector)
    assert sorted(p.metadata.name for p in found.items) == sorted(expected)


async def test_a_selective_list_pages_without_a_remaining_count(kube: KubeAPI, api: Any) -> None:
    kube.add(*(pod(f"p{i}", "s", app="web" if i % 2 else "db") for i in range(6)))
    core = kubernetes.client.CoreV1Api(api)
    first = await call(core.list_namespaced_pod, "s", label_selector="app=web", limit=2)
    rest = await call(
        core.list_namespaced_pod,
        "s",
        label_selector="app=web",
        limit=2,
        _continue=first.metadata.var_continue,
    )
    assert [p.metadata.name for p in first.items + rest.items] == ["p1", "p3", "p5"]
    assert first.metadata.remaining_item_count is None
    assert first.metadata.var_continue is not None


async def test_a_malformed_selector_is_a_bad_request(kube: KubeAPI, api: Any) -> None:
    core = kubernetes.client.CoreV1Api(api)
    status, body = await refused(call(core.list_pod_for_all_namespaces, label_selector="a=b,,"))
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"].startswith("unable to parse requirement")


# --- what is not served ---------------------------------------------------------------------


async def test_a_group_version_not_served_is_404_not_found(kube: KubeAPI, api: Any) -> None:
    kube.unserve("resource.k8s.io", "v1")
    resources = kubernetes.client.ResourceV1Api(api)
    status, body = await refused(call(resources.list_resource_claim_for_all_namespaces))
    assert status == 404
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "code": 404,
    }
    assert kube.log[-1].path == "/apis/resource.k8s.io/v1/resourceclaims"


async def test_a_crd_not_installed_is_404_and_one_installed_answers(
    kube: KubeAPI, api: Any
) -> None:
    objects = kubernetes.client.CustomObjectsApi(api)
    status, body = await refused(
        call(objects.list_cluster_custom_object, "jobset.x-k8s.io", "v1alpha2", "jobsets")
    )
    assert (status, body["message"]) == (404, "the server could not find the requested resource")

    kube.serve_crd("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
    kube.add(
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j"}}
    )
    found = await call(objects.list_cluster_custom_object, "jobset.x-k8s.io", "v1alpha2", "jobsets")
    assert [(i["kind"], i["metadata"]["namespace"]) for i in found["items"]] == [
        ("JobSet", "default")
    ]


async def test_a_missing_object_is_404_with_its_qualified_resource(kube: KubeAPI, api: Any) -> None:
    apps = kubernetes.client.AppsV1Api(api)
    status, body = await refused(call(apps.read_namespaced_deployment, "web", "x"))
    assert status == 404
    assert body["message"] == 'deployments.apps "web" not found'
    assert body["details"] == {"name": "web", "group": "apps", "kind": "deployments"}


# --- authentication and authorization -------------------------------------------------------


async def test_a_request_without_the_token_is_401(kube: KubeAPI) -> None:
    for token in ("", "wrong"):
        with kubernetes.client.ApiClient(kube_api.client_configuration(kube, token=token)) as api:
            status, body = await refused(call(kubernetes.client.CoreV1Api(api).list_namespace))
        assert status == 401
        assert body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }


USER = kube_api.USER
READ_PODS = {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list"]}


async def test_rbac_refuses_what_no_rule_allows_in_the_api_servers_words(
    kube: KubeAPI, api: Any
) -> None:
    kube.rules = [READ_PODS]
    core = kubernetes.client.CoreV1Api(api)
    apps = kubernetes.client.AppsV1Api(api)
    await call(core.list_pod_for_all_namespaces)

    cases = [
        (
            apps.list_deployment_for_all_namespaces,
            (),
            f'deployments.apps is forbidden: User "{USER}" cannot list resource "deployments" '
            'in API group "apps" at the cluster scope',
        ),
        (
            core.list_namespaced_replication_controller,
            ("team-a",),
            f'replicationcontrollers is forbidden: User "{USER}" cannot list resource '
            '"replicationcontrollers" in API group "" in the namespace "team-a"',
        ),
        (
            core.read_namespaced_pod,
            ("web", "team-a"),
            f'pods "web" is forbidden: User "{USER}" cannot get resource "pods" in API group "" '
            'in the namespace "team-a"',
        ),
    ]
    for function, args, message in cases:
        status, body = await refused(call(function, *args))
        assert (status, body["reason"], body["message"]) == (403, "Forbidden", message)
    status, body = await refused(call(core.list_pod_for_all_namespaces, watch=True))
    assert (status, body["message"]) == (
        403,
        f'pods is forbidden: User "{USER}" cannot watch resource "pods" in API group "" at the '
        "cluster scope",
    )


async def test_403_comes_before_404_for_a_crd_not_installed(kube: KubeAPI, api: Any) -> None:
    kube.rules = [READ_PODS]
    objects = kubernetes.client.CustomObjectsApi(api)
    status, body = await refused(
        call(objects.list_cluster_custom_object, "ray.io", "v1", "rayjobs")
    )
    assert status == 403
    assert body["message"].startswith('rayjobs.ray.io is forbidden: User "')


REPORT_RULE = {"apiGroups": [GROUP], "resources": ["policyreports"]}


async def test_an_apply_that_creates_needs_create_besides_patch(kube: KubeAPI, api: Any) -> None:
    kube.add(namespace("team-a"))
    kube.rules = [{**REPORT_RULE, "verbs": ["patch"]}]
    status, body = await refused(apply(api, report()))
    # The create check carries only RBAC's reason, which is empty (handlers/update.go).
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == 'policyreports.wgpolicyk8s.io "gpu-share-webhook" is forbidden: '
    assert stored_report(kube) is None

    kube.rules = [{**REPORT_RULE, "verbs": ["patch", "create"]}]
    await apply(api, report())
    kube.rules = [{**REPORT_RULE, "verbs": ["patch"]}]  # an update needs patch only
    await apply(api, report(results=["one", "two"]))
    assert [r.status for r in kube.writes()] == [403, 201, 200]


async def test_without_patch_an_apply_is_refused_as_a_patch(kube: KubeAPI, api: Any) -> None:
    kube.add(namespace("team-a"))
    kube.rules = [{**REPORT_RULE, "verbs": ["create", "list", "delete"]}]
    status, body = await refused(apply(api, report()))
    assert (status, body["message"]) == (
        403,
        'policyreports.wgpolicyk8s.io "gpu-share-webhook" is forbidden: User '
        f'"{USER}" cannot patch resource "policyreports" in API group "wgpolicyk8s.io" in the '
        'namespace "team-a"',
    )


async def test_resource_names_narrow_a_rule(kube: KubeAPI, api: Any) -> None:
    kube.add(namespace("team-a"))
    kube.rules = [
        {**REPORT_RULE, "verbs": ["create", "patch"], "resourceNames": ["gpu-share-webhook"]}
    ]
    await apply(api, report())
    status, _ = await refused(apply(api, report("other")))
    assert status == 403


# --- server-side apply ----------------------------------------------------------------------


async def test_apply_creates_then_updates_and_an_unchanged_apply_writes_nothing(
    kube: KubeAPI, api: Any
) -> None:
    kube.add(namespace("team-a"))
    # A create answers 201, and client 37 maps only a 200 to a body (custom_objects_api.py
    # `_response_types_map`): the caller gets None and reads the object elsewhere.
    assert await apply(api, report()) is None
    created = stored_report(kube)
    revision = kube.revision
    again = await apply(api, report())
    assert kube.revision == revision  # nothing written
    changed = await apply(api, report(results=["one", "two"]))

    assert [r.status for r in kube.writes()] == [201, 200, 200]
    meta = created["metadata"]
    assert meta["uid"]
    assert meta["creationTimestamp"] == "2025-06-01T12:00:00Z"
    assert meta["generation"] == 1
    assert meta["managedFields"] == [
        {
            "manager": MANAGER,
            "operation": "Apply",
            "apiVersion": "wgpolicyk8s.io/v1alpha2",
            "time": "2025-06-01T12:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {f"f:{MANAGED_BY}": {}}},
                "f:results": {},
                "f:scope": {"f:apiVersion": {}, "f:kind": {}, "f:name": {}},
                "f:summary": {f"f:{k}": {} for k in ("error", "fail", "pass", "skip", "warn")},
            },
        }
    ]
    assert again == created
    assert changed["metadata"]["resourceVersion"] != meta["resourceVersion"]
    assert changed["metadata"]["generation"] == 2
    assert changed["metadata"]["uid"] == meta["uid"]
    assert stored_report(kube) == changed


async def test_a_label_only_change_moves_the_resource_version_not_the_generation(
    kube: KubeAPI, api: Any
) -> None:
    kube.add(namespace("team-a"))
    await apply(api, report())
    first = stored_report(kube)
    body = report()
    body["metadata"]["labels"]["extra"] = "yes"
    second = await apply(api, body)
    assert second["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    assert second["metadata"]["generation"] == 1


async def test_lists_are_atomic_and_fields_left_out_are_removed(kube: KubeAPI, api: Any) -> None:
    kube.add(namespace("team-a"))
    await apply(api, report(results=["one", "two", "three"]))
    body = report(results=["two"])
    del body["scope"]
    result = await apply(api, body)
    assert [r["rule"] for r in result["results"]] == ["two"]
    assert "scope" not in result


async def test_labels_merge_and_fields_of_other_managers_stay(kube: KubeAPI, api: Any) -> None:
    kube.add(namespace("team-a"))
    await apply(api, report())
    objects = kubernetes.client.CustomObjectsApi(api)
    await call(
        objects.patch_namespaced_custom_object,
        GROUP,
        VERSION,
        "team-a",
        "policyreports",
        "gpu-share-webhook",
        {"metadata": {"labels": {"team": "a"}}, "note": "kept"},
        field_manager="kubectl-label",
    )
    result = await apply(api, report(results=["two"]))
    assert result["metadata"]["labels"] == {MANAGED_BY: MANAGER, "team": "a"}
    assert result["note"] == "kept"
    assert [(m["manager"], m["operation"]) for m in result["metadata"]["managedFields"]] == [
        (MANAGER, "Apply"),
        ("kubectl-label", "Update"),
    ]


async def test_without_force_a_field_of_another_manager_is_a_conflict(
    kube: KubeAPI, api: Any
) -> None:
    kube.add(namespace("team-a"))
    kube.add(report(results=["old", "older"]), manager="someone-else")
    status, body = await refused(apply(api, report(), force=None))
    assert (status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Apply failed with 2 conflicts: conflicts with "someone-else":\n- .results\n- .summary.pass'
    )
    forced = await apply(api, report())
    assert [r["rule"] for r in forced["results"]] == ["one"]
    owners = {m["manager"]: m["fieldsV1"] for m in forced["metadata"]["managedFields"]}
    assert "f:results" in owners[MANAGER]
    assert "f:results" not in owners["someone-else"]


async def test_an_apply_without_a_field_manager_is_invalid(kube: KubeAPI, api: Any) -> None:
    kube.add(namespace("team-a"))
    status, body = await refused(apply(api, report(), manager=None))
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for '
        "apply patch"
    )


async def test_an_apply_body_must_not_carry_managed_fields(kube: KubeAPI, api: Any) -> None:
    kube.add(namespace("team-a"))
    await apply(api, report())
    status, body = await refused(apply(api, stored_report(kube)))
    assert (status, body["message"]) == (400, "metadata.managedFields must be nil")


async def test_an_apply_of_another_version_is_a_bad_request(kube: KubeAPI, api: Any) -> None:
    kube.add(namespace("team-a"))
    body = {**report(), "apiVersion": "wgpolicyk8s.io/v1alpha1"}
    status, answer = await refused(apply(api, body))
    assert (status, answer["message"]) == (
        400,
        "Incorrect version specified in apply patch. Specified patch version: "
        "wgpolicyk8s.io/v1alpha1, expected: wgpolicyk8s.io/v1alpha2",
    )


async def test_strategic_merge_patch_is_not_for_custom_resources(kube: KubeAPI, api: Any) -> None:
    kube.add(namespace("team-a"), report(), manager=MANAGER)
    status, body = await refused(
        apply(api, report(), force=None, content_type=kube_api.STRATEGIC_MERGE_PATCH)
    )
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")
    assert body["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


async def test_the_clients_default_merge_patch_neither_creates_nor_takes_force(
    kube: KubeAPI, api: Any
) -> None:
    kube.add(namespace("team-a"))
    merge = kube_api.MERGE_PATCH
    status, body = await refused(apply(api, report(), force=True, content_type=merge))
    assert (status, body["message"]) == (
        422,
        'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for '
        "non-apply patch",
    )
    status, body = await refused(apply(api, report(), force=None, content_type=merge))
    assert (status, body["message"]) == (
        404,
        'policyreports.wgpolicyk8s.io "gpu-share-webhook" not found',
    )


async def test_validation_problems_are_422_invalid_and_nothing_is_written(
    kube: KubeAPI, api: Any
) -> None:
    kube.add(namespace("team-a"))

    def validate(obj: dict[str, Any]) -> list[str]:
        return [
            f'results[{i}].result: Unsupported value: "{r["result"]}"'
            for i, r in enumerate(obj.get("results", []))
            if r["result"] not in ("pass", "fail")
        ]

    kube.validate = validate
    body = report(results=["a", "b"])
    for result in body["results"]:
        result["result"] = "maybe"
    status, answer = await refused(apply(api, body))
    assert (status, answer["reason"]) == (422, "Invalid")
    assert answer["message"] == (
        'PolicyReport.wgpolicyk8s.io "gpu-share-webhook" is invalid: ['
        'results[0].result: Unsupported value: "maybe", '
        'results[1].result: Unsupported value: "maybe"]'
    )
    assert answer["details"]["causes"][0] == {
        "reason": "FieldValueInvalid",
        "message": 'Unsupported value: "maybe"',
        "field": "results[0].result",
    }
    assert stored_report(kube) is None


async def test_a_write_into_a_namespace_that_is_not_there_is_its_404(
    kube: KubeAPI, api: Any
) -> None:
    status, body = await refused(apply(api, report(ns="gone")))
    assert (status, body["message"]) == (404, 'namespaces "gone" not found')
    kube.add(namespace("ending", phase="Terminating"))
    status, body = await refused(apply(api, report(ns="ending")))
    assert status == 403
    assert body["message"].endswith(
        "unable to create new content in namespace ending because it is being terminated"
    )


async def test_a_cluster_scoped_report_is_applied_without_a_namespace(
    kube: KubeAPI, api: Any
) -> None:
    objects = kubernetes.client.CustomObjectsApi(api)
    body = {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "ClusterPolicyReport",
        "metadata": {"name": "gpu-share-webhook", "labels": {MANAGED_BY: MANAGER}},
        "results": [],
    }
    await call(
        objects.patch_cluster_custom_object,
        GROUP,
        VERSION,
        "clusterpolicyreports",
        "gpu-share-webhook",
        body,
        field_manager=MANAGER,
        force=True,
        _content_type=APPLY_PATCH,
    )
    created = kube.object(POLICY_REPORTS.api_version, "ClusterPolicyReport", "gpu-share-webhook")
    assert created is not None
    assert "namespace" not in created["metadata"]
    assert (
        kube.log[-1].path == "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports/gpu-share-webhook"
    )
    assert kube.log[-1].status == 201


# --- delete ---------------------------------------------------------------------------------


async def test_delete_answers_a_success_status_and_404_once_gone(kube: KubeAPI, api: Any) -> None:
    kube.add(namespace("team-a"), report(), manager=MANAGER)
    uid = stored_report(kube)["metadata"]["uid"]
    objects = kubernetes.client.CustomObjectsApi(api)
    args = (GROUP, VERSION, "team-a", "policyreports", "gpu-share-webhook")
    answer = await call(objects.delete_namespaced_custom_object, *args)
    assert answer == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": "gpu-share-webhook",
            "group": "wgpolicyk8s.io",
            "kind": "policyreports",
            "uid": uid,
        },
    }
    assert stored_report(kube) is None
    status, body = await refused(call(objects.delete_namespaced_custom_object, *args))
    assert (status, body["message"]) == (
        404,
        'policyreports.wgpolicyk8s.io "gpu-share-webhook" not found',
    )


# --- the log, the kubeconfig, discovery ------------------------------------------------------


async def test_the_log_says_what_was_asked_and_answered(kube: KubeAPI, api: Any) -> None:
    kube.add(namespace("team-a"))
    await apply(api, report())
    await apply(api, report())
    objects = kubernetes.client.CustomObjectsApi(api)
    await call(
        objects.list_cluster_custom_object,
        GROUP,
        VERSION,
        "policyreports",
        label_selector=f"{MANAGED_BY}={MANAGER}",
    )
    path = "/apis/wgpolicyk8s.io/v1alpha2/namespaces/team-a/policyreports/gpu-share-webhook"
    assert [(r.method, r.path, r.query, r.content_type, r.status) for r in kube.log] == [
        ("PATCH", path, {"fieldManager": MANAGER, "force": "true"}, APPLY_PATCH, 201),
        ("PATCH", path, {"fieldManager": MANAGER, "force": "true"}, APPLY_PATCH, 200),
        (
            "GET",
            "/apis/wgpolicyk8s.io/v1alpha2/policyreports",
            {"labelSelector": f"{MANAGED_BY}={MANAGER}"},
            "",
            200,
        ),
    ]
    assert kube.log[0].body == report()
    assert len(kube.writes()) == 2


async def test_a_kubeconfig_reaches_the_stand_in_with_its_token(
    kube: KubeAPI, tmp_path: Path
) -> None:
    kube.add(namespace("team-a"))
    path = kube_api.write_kubeconfig(tmp_path / "config", kube)
    with kubernetes.config.new_client_from_config(config_file=str(path)) as api:
        found = await call(kubernetes.client.CoreV1Api(api).list_namespace)
    assert [n.metadata.name for n in found.items] == ["team-a"]


async def test_the_dynamic_client_discovers_and_applies(
    kube: KubeAPI, api: Any, tmp_path: Path
) -> None:
    kube.add(namespace("team-a"))
    dynamic = await call(kubernetes.dynamic.DynamicClient, api, cache_file=str(tmp_path / "c"))
    reports = await call(
        dynamic.resources.get, api_version=POLICY_REPORTS.api_version, kind="PolicyReport"
    )
    await call(
        reports.server_side_apply,
        body=report(),
        namespace="team-a",
        field_manager=MANAGER,
        force_conflicts=True,
    )
    assert stored_report(kube)["results"] == report()["results"]
