"""Every escape route of SPEC.md, each case through three doors.

1. the pure core (`reviewing.admit`, mutate then validate, as the endpoints run it);
2. both HTTP endpoints of the real application over TLS: `/mutate/<policy>`, the patch
   applied, then `/validate/<policy>`, as the API server calls them;
3. the rendered webhook configurations: the namespace selector, the rules (operations,
   subresources) and the CEL matchConditions route the request to the webhook at all, and
   the chain's outcome is the same. A route closed in the core but never reaching it is open.

A case is a request a user who wants more than their share could send, and what must come of
it: refused by a rule, fixed (the stored object hides the GPUs), or let through with a warning.
docs/security.md explains each route to admins.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests import apiserver, kube
from tests import deploy_helpers as dh
from tests import server_helpers as h
from tests.kube import container, pod, shared, workload
from webhook import names, policies, rendering
from webhook.core import reviewing
from webhook.transport import app as server

CUDA = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

LAB_POLICY = """\
apiVersion: gpu-share.io/v1alpha1
kind: SharingPolicy
metadata: {name: lab}
spec:
  sharedResources: [nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb.shared]
  nodeClasses:
    - {name: a10g-ts, product: NVIDIA-A10G, strategy: time-slicing, replicas: 4,
       gpusPerNode: 1, failRequestsGreaterThanOne: false}
    - {name: a100-ts, product: NVIDIA-A100-SXM4-80GB, strategy: time-slicing, replicas: 2,
       gpusPerNode: 8}
    - {name: mig-10gb, resource: nvidia.com/mig-1g.10gb, product: A100-SXM4-80GB-MIG-1g.10gb,
       strategy: time-slicing, replicas: 2}
"""


def _env(**values: Any) -> list[dict[str, Any]]:
    out = []
    for k, v in values.items():
        out.append({"name": k, "valueFrom": v} if isinstance(v, dict) else {"name": k, "value": v})
    return out


def _debug(**extra: Any) -> dict[str, Any]:
    """An ephemeral container as `kubectl debug -it POD --image=CUDA ...` adds it."""
    c = {"name": "debugger-x7k2p", "image": CUDA, "stdin": True, "tty": True,
         "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}
    c.update(extra)
    return c


def _running() -> dict[str, Any]:
    """A pod as it runs after admission: a shared GPU, its limits and void on the sidecar."""
    p = pod(
        shared(env=_env(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25",
                        CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=3840M")),
        container("log", env=_env(NVIDIA_VISIBLE_DEVICES="void")),
        runtimeClassName="nvidia",
        tolerations=[GPU_TOLERATION],
    )
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.sharing-strategy", "operator": "In", "values": ["mps"]},
            {"key": "nvidia.com/gpu.replicas", "operator": "In", "values": ["4"]},
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-T4"]}]}]}}}
    return p


def _debugged(**extra: Any) -> dict[str, Any]:
    p = _running()
    p["spec"]["ephemeralContainers"] = [_debug(**extra)]
    return p


# --------------------------------------------------------------------------- expectations


@dataclass(frozen=True)
class Refused:
    rule: str
    container: str | None = None


@dataclass(frozen=True)
class Fixed:
    """Allowed, and the stored object passes `check`."""

    check: Callable[[dict[str, Any]], bool]
    what: str


@dataclass(frozen=True)
class Warned:
    """Allowed with a warning containing `text`."""

    text: str


def _hidden(group: str, name: str) -> Callable[[dict[str, Any]], bool]:
    def check(obj: dict[str, Any]) -> bool:
        for c in obj["spec"].get(group) or []:
            if c["name"] == name:
                env = {e["name"]: e.get("value") for e in c.get("env") or []}
                return env.get("NVIDIA_VISIBLE_DEVICES") == "void"
        return False

    return check


def _pinned_to_two_gpus(obj: dict[str, Any]) -> bool:
    terms = obj["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return all(
        {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["1"]}
        in t["matchExpressions"]
        and {"key": "nvidia.com/gpu.product", "operator": "In",
             "values": ["NVIDIA-A100-SXM4-80GB"]} in t["matchExpressions"]
        for t in terms
    )


@dataclass(frozen=True)
class Case:
    route: int
    obj: dict[str, Any]
    expect: Refused | Fixed | Warned
    policy: str | None = None  # the namespace's gpu-share.io/policy label (None: absent)
    operation: str = "CREATE"
    sub_resource: str = ""
    old: dict[str, Any] | None = field(default=None)


def _deployment(spec_pod: dict[str, Any], replicas: int = 1) -> dict[str, Any]:
    w = workload("Deployment", spec_pod)
    w["spec"]["replicas"] = replicas
    return w


_BROKEN_TEMPLATE = pod(shared(env=_env(NVIDIA_VISIBLE_DEVICES="all")))

CASES = {
    # 1. Device-selection variables.
    "shared-gpu-container-visible-devices-all": Case(
        1, pod(shared(env=_env(NVIDIA_VISIBLE_DEVICES="all"))),
        Refused("device-variables", "main")),
    "shared-gpu-container-visible-devices-list": Case(
        1, pod(shared(env=_env(NVIDIA_VISIBLE_DEVICES="0,1,2,3"))),
        Refused("device-variables", "main")),
    "no-gpu-container-ALL-uppercase": Case(
        1, pod(container(env=_env(NVIDIA_VISIBLE_DEVICES="ALL"))),
        Refused("device-variables", "main")),
    "visible-devices-from-value-from": Case(
        1, pod(container(env=_env(NVIDIA_VISIBLE_DEVICES={"configMapKeyRef": {
            "name": "c", "key": "k"}}))), Refused("device-variables", "main")),
    "visible-devices-reference": Case(
        1, pod(container(env=_env(OTHER="all", NVIDIA_VISIBLE_DEVICES="$(OTHER)"))),
        Refused("device-variables", "main")),
    "mig-config-devices": Case(
        1, pod(container(env=_env(NVIDIA_MIG_CONFIG_DEVICES="all"))),
        Refused("device-variables", "main")),
    "imex-channels": Case(
        1, pod(shared(env=_env(NVIDIA_IMEX_CHANNELS="0"))), Refused("device-variables", "main")),
    "env-from-on-a-gpu-container": Case(
        1, pod(shared(envFrom=[{"configMapRef": {"name": "gpu-settings"}}])),
        Warned('container "main" uses envFrom')),
    "env-from-on-a-container-without-gpu": Case(
        1, pod(container(envFrom=[{"configMapRef": {"name": "gpu-settings"}}])),
        Fixed(_hidden("containers", "main"), "void (env wins over envFrom)")),
    # 2. Pods that ask for no GPU.
    "cuda-image-no-gpu-tolerating-the-taint": Case(
        2, pod(container(image=CUDA), tolerations=[GPU_TOLERATION]),
        Fixed(_hidden("containers", "main"), "void")),
    "shared-gpu-zero": Case(
        2, pod(container(limits={"nvidia.com/gpu.shared": "0"})),
        Fixed(_hidden("containers", "main"), "void")),
    "init-container-without-gpu": Case(
        2, pod(shared(), init=[container("fetch", image=CUDA)]),
        Fixed(_hidden("initContainers", "fetch"), "void on the init container")),
    # 3. Ephemeral containers (kubectl debug).
    "kubectl-debug-cuda-image": Case(
        3, _debugged(), Fixed(_hidden("ephemeralContainers", "debugger-x7k2p"), "void"),
        operation="UPDATE", sub_resource="ephemeralcontainers", old=_running()),
    "kubectl-debug-env-all": Case(
        3, _debugged(env=_env(NVIDIA_VISIBLE_DEVICES="all")),
        Refused("device-variables", "debugger-x7k2p"),
        operation="UPDATE", sub_resource="ephemeralcontainers", old=_running()),
    "kubectl-debug-sysadmin-profile": Case(
        3, _debugged(securityContext={"privileged": True}),
        Refused("privileged", "debugger-x7k2p"),
        operation="UPDATE", sub_resource="ephemeralcontainers", old=_running()),
    "kubectl-debug-mps-pipe": Case(
        3, _debugged(env=_env(CUDA_MPS_PIPE_DIRECTORY="/tmp/p")),
        Refused("mps-directories", "debugger-x7k2p"),
        operation="UPDATE", sub_resource="ephemeralcontainers", old=_running()),
    # 4. MPS limits.
    "mps-threads-200": Case(
        4, pod(shared(env=_env(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="200"))),
        Refused("mps-limits", "main")),
    "mps-threads-abc": Case(
        4, pod(shared(env=_env(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="abc"))),
        Refused("mps-limits", "main")),
    "mps-threads-value-from": Case(
        4, pod(shared(env=_env(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={"secretKeyRef": {
            "name": "s", "key": "k"}}))), Refused("mps-limits", "main")),
    "mps-threads-reference": Case(
        4, pod(shared(env=_env(X="90", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$(X)"))),
        Refused("mps-limits", "main")),
    "mps-memory-kubernetes-unit": Case(
        4, pod(shared(env=_env(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=15Gi"))),
        Refused("mps-limits", "main")),
    "mps-memory-no-unit": Case(
        4, pod(shared(env=_env(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=16000"))),
        Refused("mps-limits", "main")),
    "mps-pipe-directory": Case(
        4, pod(shared(env=_env(CUDA_MPS_PIPE_DIRECTORY="/tmp/own"))),
        Refused("mps-directories", "main")),
    # 5. Host access.
    "privileged-shared-gpu-pod": Case(
        5, pod(shared(securityContext={"privileged": True})), Refused("privileged", "main")),
    "privileged-pod-without-gpu": Case(
        5, pod(container(securityContext={"privileged": True}), tolerations=[GPU_TOLERATION]),
        Refused("privileged", "main")),
    "sys-admin": Case(
        5, pod(shared(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})),
        Refused("capabilities", "main")),
    "all-capabilities-lower-case": Case(
        5, pod(shared(securityContext={"capabilities": {"add": ["all"]}})),
        Refused("capabilities", "main")),
    "host-pid": Case(5, pod(shared(), hostPID=True), Refused("host-namespaces")),
    "host-ipc": Case(5, pod(shared(), hostIPC=True), Refused("host-namespaces")),
    "host-path-dev": Case(
        5, pod(shared(volumeMounts=[{"name": "d", "mountPath": "/dev"}]),
               volumes=[{"name": "d", "hostPath": {"path": "/dev"}}]), Refused("host-path")),
    "host-path-mps-pipes": Case(
        5, pod(shared(volumeMounts=[{"name": "m", "mountPath": "/mps"}]),
               volumes=[{"name": "m", "hostPath": {"path": "/run/nvidia/mps"}}]),
        Refused("host-path")),
    "mps-control-pipe-in-a-pod-without-gpu": Case(
        5, pod(container("ctl", image="busybox:1.36",
                         volumeMounts=[{"name": "m", "mountPath": "/mps"}]),
               volumes=[{"name": "m", "hostPath": {"path": "/run/nvidia/mps"}}]),
        Refused("host-path")),
    "host-path-root": Case(
        5, pod(shared(volumeMounts=[{"name": "r", "mountPath": "/host"}]),
               volumes=[{"name": "r", "hostPath": {"path": "/"}}]), Refused("host-path")),
    "device-list-mount-in-a-pod-without-gpu": Case(
        5, pod(container(volumeMounts=[
            {"name": "null", "mountPath": "/var/run/nvidia-container-devices/all"}]),
            volumes=[{"name": "null", "hostPath": {"path": "/dev/null"}}]),
        Refused("device-list-mount", "main")),
    "device-list-mount-prefix": Case(
        5, pod(container(volumeMounts=[
            {"name": "e", "mountPath": "/var/run/nvidia-container-devices0"}]),
            volumes=[{"name": "e", "emptyDir": {}}]), Refused("device-list-mount", "main")),
    "cdi-annotation": Case(
        5, pod(container(), annotations={"cdi.k8s.io/debug": "nvidia.com/gpu=all"}),
        Refused("cdi-annotations")),
    "resource-claim": Case(
        5, pod(container(resources={"claims": [{"name": "g"}]}),
               resourceClaims=[{"name": "g", "resourceClaimTemplateName": "full-gpu"}]),
        Refused("resource-claims")),
    # 6. Updates: never refused when the templates stay as they were.
    "scale-a-deployment-of-an-unknown-policy": Case(
        6, _deployment(_BROKEN_TEMPLATE, replicas=0), Warned("its new pods will be refused"),
        policy="typo", operation="UPDATE", old=_deployment(_BROKEN_TEMPLATE, replicas=3)),
    "remove-a-finalizer-during-deletion": Case(
        6, workload("Job", _BROKEN_TEMPLATE), Warned("its new pods will be refused"),
        operation="UPDATE",
        old={**workload("Job", _BROKEN_TEMPLATE),
             "metadata": {"name": "w", "namespace": "team-a", "finalizers": ["x.io/keep"]}}),
    "an-update-that-breaks-the-template": Case(
        6, _deployment(_BROKEN_TEMPLATE), Refused("device-variables", "main"),
        operation="UPDATE", old=_deployment(pod(shared()))),
    # 7. Names.
    "mig-shared-resource-not-in-the-policy": Case(
        7, pod(shared(resource="nvidia.com/mig-3g.40gb.shared")),
        Refused("resource-not-allowed", "main")),
    "VOID-is-not-void": Case(
        7, pod(container(env=_env(NVIDIA_VISIBLE_DEVICES="VOID"))),
        Refused("device-variables", "main")),
    # Two replicas where a one-GPU class allows it: pinned to nodes with two GPUs or more.
    "two-replicas-pinned-to-two-gpus": Case(
        0, pod(shared(2)), Fixed(_pinned_to_two_gpus, "nodeAffinity count Gt 1"), policy="lab"),
}


def _path(case: Case, loaded: policies.PolicySet) -> str:
    name = case.policy or names.DEFAULT_POLICY
    return name if loaded.get(name) is not None else names.UNKNOWN_POLICY_PATH


def _labels(case: Case) -> dict[str, str]:
    labels = dh.namespace_labels("team-a", **{names.ENABLED_LABEL: "true"})
    if case.policy is not None:
        labels[names.POLICY_LABEL] = case.policy
    return labels


def _judge(case: Case, allowed: bool, message: str, warnings: list[str],
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
    lab = kube.load_policy_text(LAB_POLICY)
    return policies.build_set([*shipped.policies.values(), lab])


IDS = sorted(CASES, key=lambda k: (CASES[k].route, k))


# --------------------------------------------------------------------------- door 1: the core


@pytest.mark.parametrize("name", IDS)
def test_the_core_closes_the_route(name: str, loaded: policies.PolicySet) -> None:
    case = CASES[name]
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


@pytest.fixture
def app(tmp_path: Path) -> web.Application:
    settings = h.settings(tmp_path)
    (settings.policies_dir / "lab.yaml").write_text(LAB_POLICY)
    return server.create_app(settings)


@pytest.mark.parametrize("name", IDS)
async def test_both_endpoints_close_the_route(
    name: str, aiohttp_server: Any, aiohttp_client: Any, app: web.Application,
    loaded: policies.PolicySet,
) -> None:
    case = CASES[name]
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


@pytest.mark.parametrize("name", IDS)
async def test_the_rendered_configuration_routes_the_request_to_the_webhook(
    name: str, loaded: policies.PolicySet
) -> None:
    case = CASES[name]
    configurations = rendering.render(loaded, service="gpu-share-webhook",
                                      namespace="gpu-share-system", name="gpu-share-webhook")
    cluster = apiserver.ApiServer(configurations, apiserver.codec(loaded))
    outcome = await cluster.admit(copy.deepcopy(case.obj), labels=_labels(case),
                                  operation=case.operation, old=case.old,
                                  sub_resource=case.sub_resource)
    assert outcome.calls, "the request never reaches the webhook"
    expected_path = _path(case, loaded)
    assert all(c.path.endswith(f"/{expected_path}") for c in outcome.calls)
    _judge(case, outcome.allowed, outcome.message, outcome.warnings, outcome.stored)


def test_every_route_of_the_spec_has_cases() -> None:
    assert {c.route for c in CASES.values()} == {0, 1, 2, 3, 4, 5, 6, 7}
