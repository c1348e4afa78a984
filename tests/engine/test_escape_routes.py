"""Every escape route of docs/security.md, each case through three doors.

1. the pure core (`reviewing.admit`, mutate then validate, as the endpoints run it);
2. both HTTP endpoints of the real application over TLS: `/mutate/<policy>`, the patch
   applied, then `/validate/<policy>`, as the API server calls them;
3. the rendered webhook configurations: the namespace selector, the rules (operations,
   subresources) and the CEL matchConditions route the request to the webhook at all, and
   the chain's outcome is the same. A route closed in the core but never reaching it is open.

A case is a request a user who wants more than their share could send, and what must come of
it: refused by a rule, fixed (the stored object hides the GPUs), or let through with a warning;
the cases are ROUTE_CASES (tests/engine/route_cases.py). docs/security.md explains each route
to admins.
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.engine.route_cases import ROUTE_CASES, SITE_POLICIES, Fixed, Refused, RouteCase
from tests.support import apiserver, kube
from tests.support import deploy_helpers as dh
from tests.support import server_helpers as h
from webhook.engine import reviewing
from webhook.policy import hostpaths, names, policies
from webhook.server import app as server
from webhook.tools import rendering

# The table, ROUTE_CASES, is tests/engine/route_cases.py's (other tests judge its objects too): a
# name -> RouteCase(route, object, what must come of it: Refused, Fixed or Warned, the
# namespace's policy label, the operation, ...).


def _path(case: RouteCase, loaded: policies.PolicySet) -> str:
    """The webhook path the case's namespace reaches: its policy, and whether it enforces Pod
    Security baseline or restricted (`<name>/baseline`)."""
    name = case.policy or names.DEFAULT_POLICY
    if loaded.get(name) is None:
        name = names.UNKNOWN_POLICY_PATH
    return policies.join_path(
        name, pod_security=hostpaths.pod_security_enforced(case.pod_security))


def _labels(case: RouteCase) -> dict[str, str]:
    labels = dh.namespace_labels("team-a", **{names.ENABLED_LABEL: "true"})
    if case.policy is not None:
        labels[names.POLICY_LABEL] = case.policy
    if case.pod_security is not None:
        labels[names.POD_SECURITY_ENFORCE_LABEL] = case.pod_security
    return labels


def _judge(case: RouteCase, allowed: bool, message: str, warnings: list[str],
           stored: dict[str, Any] | None) -> None:
    expect = case.expect
    if isinstance(expect, Refused):
        assert not allowed, "admitted"
        assert f"(rule {expect.rule})" in message, message
        if expect.container is not None:
            assert f'container "{expect.container}"' in message, message
        return
    assert allowed, message
    assert stored is not None
    if isinstance(expect, Fixed):
        assert expect.check(stored), f"not fixed ({expect.what}): {json.dumps(stored)}"
    else:
        assert any(expect.text in w for w in warnings), warnings


@pytest.fixture(scope="module")
def loaded() -> policies.PolicySet:
    shipped = kube.shipped()
    site = [kube.load_policy_text(text) for text in SITE_POLICIES.values()]
    return policies.build_set([*shipped.policies.values(), *site])


IDS = sorted(ROUTE_CASES, key=lambda k: (ROUTE_CASES[k].route, k))


# --------------------------------------------------------------------------- door 1: the core


@pytest.mark.parametrize("name", IDS)
def test_the_core_closes_the_route(name: str, loaded: policies.PolicySet) -> None:
    case = ROUTE_CASES[name]
    policy = loaded.governing(_path(case, loaded))
    request = {"group": str(case.obj["apiVersion"]).rpartition("/")[0],
               "kind": case.obj["kind"], "operation": case.operation,
               "sub_resource": case.sub_resource,
               "old": kube.as_served(case.old) if case.old is not None else None}
    obj = kube.as_served(case.obj)
    mutated = reviewing.admit(obj, policy=policy, endpoint="mutate", **request)
    warnings = list(mutated.warnings)
    if not mutated.allowed:
        if isinstance(case.expect, Refused):
            assert (case.expect.rule, case.expect.container) in [
                (v.rule, v.container) for v in mutated.violations]
        _judge(case, False, mutated.message, warnings, None)
        return
    stored = kube.apply(obj, mutated.patch)
    validated = reviewing.admit(stored, policy=policy, endpoint="validate", **request)
    warnings += validated.warnings
    _judge(case, validated.allowed, validated.message, warnings, stored)


# --------------------------------------------------------------------------- door 2: HTTP


@pytest.fixture(scope="module")
def serving_pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a serving certificate of it, made once: each case's server serves a copy."""
    directory = tmp_path_factory.mktemp("certs")
    h.write_pair(directory, h.make_ca())
    return directory


@pytest.fixture
def app(tmp_path: Path, serving_pair: Path) -> web.Application:
    shutil.copytree(serving_pair, tmp_path / "certs")
    settings = h.settings(tmp_path)
    for name, text in SITE_POLICIES.items():
        (settings.policies_dir / f"{name}.yaml").write_text(text)
    return server.create_app(settings)


@pytest.mark.slow  # every route: a TLS server and two reviews each
@pytest.mark.parametrize("name", IDS)
async def test_both_endpoints_close_the_route(
    name: str, aiohttp_server: Any, aiohttp_client: Any, app: web.Application,
    loaded: policies.PolicySet,
) -> None:
    case = ROUTE_CASES[name]
    client: TestClient[Any, Any] = await h.start(aiohttp_server, aiohttp_client, app)
    path = _path(case, loaded)
    current = kube.as_served(case.obj)
    warnings: list[str] = []
    for endpoint in ("mutate", "validate"):
        uid = f"{endpoint}-{name}"[:36]
        body = kube.admission_review(current, operation=case.operation, old=case.old, uid=uid,
                                     sub_resource=case.sub_resource or None)
        response = await h.post_review(client, f"/{endpoint}/{path}", json.dumps(body).encode())
        assert response.status == 200, await response.text()
        answer = h.response_of(await response.json(), uid)
        warnings += answer.get("warnings") or []
        if not answer["allowed"]:
            _judge(case, False, answer["status"]["message"], warnings, None)
            return
        if "patch" in answer:
            assert endpoint == "mutate"
            current = kube.apply(current, json.loads(base64.b64decode(answer["patch"])))
            kube.check_valid(current)
    _judge(case, True, "", warnings, current)


# --------------------------------------------------------------------------- door 3: routing


@pytest.fixture(scope="module")
def configurations(loaded: policies.PolicySet) -> list[dict[str, Any]]:
    """The webhook configurations of `loaded`, rendered once (the cluster only reads them)."""
    return rendering.render(loaded, service="gpu-share-webhook", namespace="gpu-share-system",
                            name="gpu-share-webhook")


@pytest.mark.slow  # every route through rendered entries' CEL
@pytest.mark.parametrize("name", IDS)
async def test_the_rendered_configuration_routes_the_request_to_the_webhook(
    name: str, loaded: policies.PolicySet, configurations: list[dict[str, Any]]
) -> None:
    case = ROUTE_CASES[name]
    cluster = apiserver.ApiServer(configurations, apiserver.in_process(loaded))
    outcome = await cluster.admit(copy.deepcopy(case.obj), labels=_labels(case),
                                  operation=case.operation, old=case.old,
                                  sub_resource=case.sub_resource)
    assert outcome.calls, "the request never reaches the webhook"
    expected_path = _path(case, loaded)
    assert all(c.path.endswith(f"/{expected_path}") for c in outcome.calls)
    _judge(case, outcome.allowed, outcome.message, outcome.warnings, outcome.stored)


def test_every_route_of_the_spec_has_cases() -> None:
    assert {c.route for c in ROUTE_CASES.values()} == {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
