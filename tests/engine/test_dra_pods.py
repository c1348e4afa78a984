"""Pods that use resource claims.

A pod names claims (`spec.resourceClaims`) and its containers use them
(`resources.claims`); the webhook cannot see what a claim holds from the pod. Under a policy
without a `dra` section such a pod is refused (rule resource-claims: nothing governs what its
claims hold); under one with it, the pod is admitted (its claims were reviewed when they
were created, in its own namespace: tests/engine/test_dra_claims.py), and each container that uses
a claim counts as a GPU container for the rules that treat those apart. Two doors: the core
(`reviewing.admit`, mutate then validate) and the API server over TLS into the real
application, through the rendered configurations.

The pods are those of NVIDIA's documented examples (tests/support/dra_objects.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.support import apiserver, kube
from tests.support import deploy_helpers as dh
from tests.support import dra_objects as dra
from tests.support import server_helpers as h
from webhook.engine import reviewing
from webhook.engine.decision import Decision
from webhook.policy import names, policies
from webhook.server import app as server
from webhook.tools import rendering

PODS = ("gpu-pod", "mps-pod", "count-pod", "multiple-gpus-pod", "nic-pod")
WORKLOADS = ("mig-devices-deployment", "memory-sharing-deployment")
REFUSED_WITHOUT_DRA = (
    "resource claims: spec.resourceClaims can give the pod devices, GPUs included, that policy"
    ' "default" does not govern (it has no dra section). Remove them, or ask for'
    " nvidia.com/gpu.shared (rule resource-claims)"
)
VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
# The shipped policies' driver capabilities, set on every container that uses a claim.
CAPABILITIES = {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}


@pytest.fixture(scope="module")
def loaded() -> policies.PolicySet:
    return kube.shipped()


def _admit(obj: dict[str, Any], policy: policies.Policy, endpoint: str) -> Decision:
    group = str(obj["apiVersion"]).rpartition("/")[0]
    return reviewing.admit(
        kube.as_served(obj),
        policy=policy,
        endpoint=endpoint,  # type: ignore[arg-type]
        group=group,
        kind=obj["kind"],
        operation="CREATE",
    )


def _labels(obj: dict[str, Any], policy: str | None) -> dict[str, str]:
    labels = dh.namespace_labels(obj["metadata"]["namespace"], **{names.ENABLED_LABEL: "true"})
    if policy is not None:
        labels[names.POLICY_LABEL] = policy
    return labels


@pytest.fixture
def app(tmp_path: Path) -> web.Application:
    return server.create_app(h.settings(tmp_path))


async def _cluster(
    aiohttp_server: Any, aiohttp_client: Any, app: web.Application, loaded: policies.PolicySet
) -> apiserver.ApiServer:
    client: TestClient[Any, Any] = await h.start(aiohttp_server, aiohttp_client, app)
    configurations = rendering.render(
        loaded, service="gpu-share-webhook", namespace="gpu-share-system", name="gpu-share-webhook"
    )
    return apiserver.ApiServer(configurations, h.api_server_send(client))


def _with_first_container(name: str, **fields: Any) -> dict[str, Any]:
    pod = dra.obj(name)
    pod["spec"]["containers"][0].update(fields)
    return pod


# --------------------------------------------------------------------------- the policy


@pytest.mark.parametrize("name", PODS + WORKLOADS)
def test_the_core_refuses_claims_where_the_policy_has_no_dra_section(
    name: str, loaded: policies.PolicySet
) -> None:
    obj = dra.obj(name)
    # A Pod by both endpoints (the mutating one first); a workload's template by the
    # validating one, which is the one that reviews workloads.
    endpoint = "mutate" if obj["kind"] == "Pod" else "validate"
    decision = _admit(obj, loaded.governing("default"), endpoint)
    assert not decision.allowed
    expected = (
        REFUSED_WITHOUT_DRA
        if obj["kind"] == "Pod"
        else kube.in_template(REFUSED_WITHOUT_DRA, obj["kind"])
    )
    assert decision.message == expected


@pytest.mark.parametrize("name", PODS + WORKLOADS)
def test_the_core_admits_pods_with_claims_under_dra(name: str, loaded: policies.PolicySet) -> None:
    obj = dra.obj(name)
    policy = loaded.governing("dra")
    if obj["kind"] == "Pod":
        decision, result = kube.admit(obj, policy)  # valid, idempotent, validated
        assert decision.allowed, decision.message
        assert result is not None
        # Its claim containers count as GPU containers: they get the driver capabilities.
        assert decision.mutations == ["driver-capabilities", "visible-devices"]
    else:
        decision = _admit(obj, policy, "validate")
        assert decision.allowed, decision.message
        assert decision.patch == []


@pytest.mark.slow  # a TLS server per policy
@pytest.mark.parametrize("policy", ["default", "dra"])
async def test_the_api_server_sends_pods_with_claims_and_the_server_decides(
    policy: str,
    aiohttp_server: Any,
    aiohttp_client: Any,
    app: web.Application,
    loaded: policies.PolicySet,
) -> None:
    cluster = await _cluster(aiohttp_server, aiohttp_client, app, loaded)
    for name in PODS + WORKLOADS:
        obj = dra.obj(name)
        outcome = await cluster.admit(copy.deepcopy(obj), labels=_labels(obj, policy))
        assert outcome.calls, f"{name}: never reaches the webhook"
        if policy == "default":
            assert not outcome.allowed, name
            assert outcome.message == (
                REFUSED_WITHOUT_DRA
                if obj["kind"] == "Pod"
                else kube.in_template(REFUSED_WITHOUT_DRA, obj["kind"])
            )
            continue
        assert outcome.allowed, (name, outcome.message)
        if obj["kind"] == "Pod":
            _, result = kube.admit(obj, loaded.governing(policy))
            assert outcome.stored == result
        else:
            assert outcome.stored == kube.as_served(obj)


# --------------------------------------------------------------------------- GPU containers

# What a container that uses a claim may not do, as a container that uses a GPU may not: the
# webhook cannot tell a GPU claim from another from the pod, so it takes every claim for one.
GPU_CONTAINER_REFUSALS = {
    "capabilities": (
        _with_first_container("gpu-pod", securityContext={"capabilities": {"add": ["SYS_PTRACE"]}}),
        'container "workload": added capabilities "SYS_PTRACE" in a pod that uses a GPU:'
        " outside Pod Security baseline's set, they reach devices, processes and the driver"
        " beyond the container's GPU (SYS_ADMIN makes it privileged to the NVIDIA toolkit,"
        " SYS_PTRACE reaches other pods' GPU processes). Remove them from"
        " spec.containers[0].securityContext.capabilities.add (rule capabilities)",
    ),
    # The claim of another driver (a NIC) too: the webhook cannot see that it holds no GPU.
    "capabilities-on-a-nic-claim": (
        _with_first_container("nic-pod", securityContext={"capabilities": {"add": ["SYS_PTRACE"]}}),
        'container "app": added capabilities "SYS_PTRACE" in a pod that uses a GPU:'
        " outside Pod Security baseline's set, they reach devices, processes and the driver"
        " beyond the container's GPU (SYS_ADMIN makes it privileged to the NVIDIA toolkit,"
        " SYS_PTRACE reaches other pods' GPU processes). Remove them from"
        " spec.containers[0].securityContext.capabilities.add (rule capabilities)",
    ),
    "host-pid": (
        {**dra.obj("mps-pod"), "spec": {**dra.obj("mps-pod")["spec"], "hostPID": True}},
        "host namespace: spec.hostPID in a pod that uses a GPU lets its containers see and"
        " signal every process of the node, the GPU processes of other pods and the MPS"
        " daemon included. Remove hostPID (rule host-namespaces)",
    ),
}


def _without_claims(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` with no claim (and so no GPU at all)."""
    pod = copy.deepcopy(pod)
    del pod["spec"]["resourceClaims"]
    for c in pod["spec"]["containers"]:
        del c["resources"]
    return pod


@pytest.mark.parametrize("name", sorted(GPU_CONTAINER_REFUSALS))
def test_a_container_that_uses_a_claim_is_a_gpu_container(
    name: str, loaded: policies.PolicySet
) -> None:
    pod, message = GPU_CONTAINER_REFUSALS[name]
    policy = loaded.governing("dra")
    decision = _admit(pod, policy, "mutate")
    assert (decision.allowed, decision.message) == (False, message)
    # The same pod without its claim uses no GPU: only the rule of every pod refuses it
    # (host-access, Pod Security baseline's checks where the namespace does not enforce it).
    decision = _admit(_without_claims(pod), policy, "mutate")
    assert decision.rules == ["host-access"]


ENV_FROM_WARNING = (
    'container "workload" uses envFrom: NVIDIA_* or CUDA_MPS_* set there are not checked'
)


def test_envfrom_on_a_container_that_uses_a_claim_is_warned_of(
    loaded: policies.PolicySet,
) -> None:
    pod = _with_first_container("gpu-pod", envFrom=[{"configMapRef": {"name": "settings"}}])
    decision = _admit(pod, loaded.governing("dra"), "mutate")
    assert decision.allowed, decision.message
    assert decision.warnings == [ENV_FROM_WARNING]
    assert decision.audit["env-from"] == "workload"
    decision = _admit(_without_claims(pod), loaded.governing("dra"), "mutate")
    assert decision.warnings == []


@pytest.mark.slow  # a TLS server
async def test_the_api_server_refuses_and_warns_claim_containers_as_gpu_containers(
    aiohttp_server: Any,
    aiohttp_client: Any,
    app: web.Application,
    loaded: policies.PolicySet,
) -> None:
    cluster = await _cluster(aiohttp_server, aiohttp_client, app, loaded)
    for name, (pod, message) in sorted(GPU_CONTAINER_REFUSALS.items()):
        outcome = await cluster.admit(copy.deepcopy(pod), labels=_labels(pod, "dra"))
        assert outcome.calls, f"{name}: never reaches the webhook"
        assert (outcome.allowed, outcome.message) == (False, message), name
    pod = _with_first_container("gpu-pod", envFrom=[{"configMapRef": {"name": "settings"}}])
    outcome = await cluster.admit(pod, labels=_labels(pod, "dra"))
    assert outcome.allowed, outcome.message
    # Told by both entries, as for a pod that asks for a device-plugin GPU.
    assert outcome.warnings == [ENV_FROM_WARNING, ENV_FROM_WARNING]


# --------------------------------------------------------------------------- void


def _env(obj: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    return {
        c["name"]: c.get("env", []) for t in kube.templates_of(obj) for c in t["spec"]["containers"]
    }


@pytest.mark.parametrize("name", PODS)
def test_a_container_that_uses_a_claim_still_gets_void(
    name: str, loaded: policies.PolicySet
) -> None:
    """The decision: a container that asks for no device-plugin GPU gets
    NVIDIA_VISIBLE_DEVICES=void (route 2) even when it uses a claim.

    Why (research §3.7): NVIDIA's DRA kubelet plugin hands a claim's GPUs to the container as
    CDI edits (device nodes, mounts) and its common CDI edits already set
    NVIDIA_VISIBLE_DEVICES=void ("to avoid the nvidia-container-runtime honoring it in
    addition to the underlying runtime honoring CDI"; cmd/gpu-kubelet-plugin/cdi.go). CDI env
    edits replace a variable of the same name, so for a GPU claim our `void` changes nothing:
    the GPUs still arrive, through CDI. For a claim of another driver (a NIC) no NVIDIA CDI
    edit applies, and `void` keeps its device-plugin meaning: an image that sets
    NVIDIA_VISIBLE_DEVICES=all (CUDA images do) exposes no GPU through a legacy-mode
    nvidia-container-runtime. What the runtime does with it can only be checked on a node;
    here, the admission decision.
    """
    pod = dra.obj(name)
    _, result = kube.admit(pod, loaded.governing("dra"))
    assert result is not None
    envs = _env(result)
    assert envs == {c["name"]: [CAPABILITIES, VOID] for c in pod["spec"]["containers"]}
    assert result["metadata"]["annotations"] == {
        "gpu-share.io/policy": "dra",
        "gpu-share.io/mutations": "driver-capabilities,visible-devices",
    }


@pytest.mark.slow  # a TLS server
async def test_the_api_server_stores_void_on_claim_containers(
    aiohttp_server: Any,
    aiohttp_client: Any,
    app: web.Application,
    loaded: policies.PolicySet,
) -> None:
    cluster = await _cluster(aiohttp_server, aiohttp_client, app, loaded)
    for name in PODS:
        pod = dra.obj(name)
        outcome = await cluster.admit(copy.deepcopy(pod), labels=_labels(pod, "dra"))
        assert outcome.allowed, (name, outcome.message)
        assert outcome.stored is not None
        assert _env(outcome.stored) == {
            c["name"]: [CAPABILITIES, VOID] for c in pod["spec"]["containers"]
        }
