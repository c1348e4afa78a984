"""Rule host-access: Pod Security baseline's host-access checks in namespaces that
do not enforce baseline or restricted, left to Pod Security where they do; nothing refused
twice; the policy's allowedHostPaths (read-only, and no path below a writable entry);
the policy's own checks of its host paths; Pod updates that add CDI annotations.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kube import T4_MPS, admit, container, make_policy, pod, review, shared
from webhook.engine import reviewing
from webhook.errors import PolicyError
from webhook.policy import policies


def policy(**spec: Any) -> policies.Policy:
    return make_policy([T4_MPS], name="team", **spec)


def enforced(p: policies.Policy) -> policies.Policy:
    """The policy as it governs a namespace that enforces Pod Security baseline."""
    return policies.build_set([p]).governing("team/baseline")


def rules_of(obj: dict[str, Any], p: policies.Policy) -> list[tuple[str, str | None]]:
    return [(v.rule, v.container) for v in review(obj, p).violations]


HOST_ACCESS = [
    pytest.param(pod(container(), hostPID=True), [("host-access", None)], id="hostPID"),
    pytest.param(pod(container(), hostIPC=True), [("host-access", None)], id="hostIPC"),
    pytest.param(pod(container(), hostNetwork=True), [("host-access", None)], id="hostNetwork"),
    pytest.param(pod(container(securityContext={"capabilities": {"add": ["SYS_PTRACE"]}})),
                 [("host-access", "main")], id="capability"),
    pytest.param(pod(container(securityContext={"capabilities": {"add": ["CAP_chown", "KILL"]}})),
                 [], id="baseline-capabilities-any-spelling"),
    pytest.param(pod(container(), volumes=[{"name": "m", "hostPath": {"path": "/models"}}]),
                 [("host-access", None)], id="hostPath"),
    pytest.param(pod(container(), volumes=[{"name": "m", "emptyDir": {}}]), [], id="emptyDir"),
]


@pytest.mark.parametrize(("obj", "found"), HOST_ACCESS)
def test_baseline_host_access_is_refused_where_pod_security_does_not_enforce_it(
    obj: dict[str, Any], found: list[tuple[str, str | None]]
) -> None:
    assert rules_of(obj, policy()) == found
    # Where the namespace enforces baseline, Pod Security refuses them: the webhook does not.
    assert rules_of(obj, enforced(policy())) == []
    # Switched off, or in warn mode for a rollout.
    assert rules_of(obj, policy(rules={"denyHostAccess": False})) == []
    warned = review(obj, policy(ruleModes={"host-access": "warn"}))
    assert warned.allowed
    assert [v.rule for _, v in warned.would_refuse] == [r for r, _ in found]


def test_what_a_gpu_rule_refuses_is_not_refused_twice() -> None:
    obj = pod(shared(securityContext={"privileged": True,
                                      "capabilities": {"add": ["SYS_ADMIN"]}}),
              hostPID=True, volumes=[{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}])
    assert sorted(rules_of(obj, policy())) == [
        ("capabilities", "main"), ("host-namespaces", None), ("host-path", None),
        ("privileged", "main")]


def test_with_a_gpu_rule_switched_off_host_access_still_applies_baseline() -> None:
    obj = pod(container(securityContext={"privileged": True}))
    assert rules_of(obj, policy()) == [("privileged", "main")]
    assert rules_of(obj, policy(rules={"denyPrivileged": False})) == [("host-access", "main")]
    # ...and where Pod Security enforces baseline, it refuses the pod itself.
    assert rules_of(obj, enforced(policy(rules={"denyPrivileged": False}))) == []


def test_the_device_classes_are_refused_whatever_pod_security_does() -> None:
    obj = pod(container(), volumes=[{"name": "p", "hostPath": {"path": "/proc/1/root"}}])
    assert rules_of(obj, enforced(policy())) == [("host-path", None)]


ALLOWING = {"hostAccess": {"allowedHostPaths": [
    {"pathPrefix": "/srv/models"}, {"pathPrefix": "/srv/scratch", "readOnly": False}]}}


@pytest.mark.parametrize(
    ("path", "read_only", "found"),
    [
        ("/srv/models", True, []),
        ("/srv/models/llama/", True, []),
        ("/srv//models/./llama", True, []),
        ("/srv/models", False, [("host-access", "main")]),
        ("/srv/models2", True, [("host-access", None)]),
        ("/srv/models/../secrets", True, [("host-access", None)]),
        ("/srv/scratch", False, []),
        ("/srv/scratch/link", True, [("host-access", None)]),
        ("/srv", True, [("host-access", None)]),
    ],
)
def test_allowed_host_paths(path: str, read_only: bool, found: list[Any]) -> None:
    obj = pod(container(volumeMounts=[{"name": "h", "mountPath": "/data", "readOnly": read_only}]),
              volumes=[{"name": "h", "hostPath": {"path": path}}])
    assert rules_of(obj, policy(**ALLOWING)) == found
    if not found:
        _, result = admit(obj, policy(**ALLOWING))
        assert result is not None


def test_an_ephemeral_container_is_judged_for_what_it_adds_only() -> None:
    running = pod(container(), hostNetwork=True)
    debug = {"name": "dbg", "image": "busybox",
             "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}}
    updated = {**running, "spec": {**running["spec"], "ephemeralContainers": [debug]}}
    decision = reviewing.admit(updated, policy=policy(), endpoint="mutate", group="",
                               kind="Pod", operation="UPDATE",
                               sub_resource="ephemeralcontainers", old=running)
    assert [(v.rule, v.container) for v in decision.violations] == [("host-access", "dbg")]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"pathPrefix": "models"}, "not an absolute path"),
        ({"pathPrefix": "/srv/../proc"}, "not clean"),
        ({"pathPrefix": "/var/lib"}, "kubelet plugins and state"),
        ({"pathPrefix": "/proc/1"}, "procfs"),
        ({"pathPrefix": "/var/run/nvidia"}, "MPS pipes"),
        ({"pathPrefix": "/"}, "device nodes"),
    ],
)
def test_a_policy_cannot_allow_what_hands_out_gpus(entry: dict[str, Any], problem: str) -> None:
    with pytest.raises((PolicyError, AssertionError)) as raised:
        policy(hostAccess={"allowedHostPaths": [entry]})
    assert problem in str(raised.value)


def test_a_policy_can_deny_more_host_paths() -> None:
    p = policy(hostAccess={"deniedHostPaths": ["/data/kubelet"]})
    obj = pod(container(), volumes=[{"name": "k", "hostPath": {"path": "/data"}}])
    assert rules_of(obj, enforced(p)) == [("host-path", None)]
    assert rules_of(obj, enforced(policy())) == []


def test_trust_pod_security_false_applies_host_access_everywhere() -> None:
    p = policy(hostAccess={"trustPodSecurity": False})
    obj = pod(container(), hostNetwork=True)
    assert rules_of(obj, enforced(p)) == [("host-access", None)]


def _pod_update(new: dict[str, Any], old: dict[str, Any], p: policies.Policy) -> list[str]:
    decision = reviewing.admit(new, policy=p, endpoint="validate", group="", kind="Pod",
                               operation="UPDATE", old=old)
    assert decision.patch == []
    return [v.rule for v in decision.violations]


def _annotated(**annotations: str) -> dict[str, Any]:
    obj = pod(shared())
    obj["metadata"]["annotations"] = annotations
    return obj


def test_a_pod_update_is_refused_only_for_the_cdi_annotations_it_adds_or_changes() -> None:
    p = policy()
    cdi = {"cdi.k8s.io/x": "nvidia.com/gpu=all"}
    assert _pod_update(_annotated(**cdi), _annotated(), p) == ["cdi-annotations"]
    assert _pod_update(_annotated(**cdi), _annotated(**{"cdi.k8s.io/x": "nvidia.com/gpu=0"}),
                       p) == ["cdi-annotations"]
    # Kept as it was (admitted before the rule), removed, or another annotation: allowed.
    assert _pod_update(_annotated(**cdi, other="1"), _annotated(**cdi), p) == []
    assert _pod_update(_annotated(), _annotated(**cdi), p) == []
    # Nothing else of the pod is judged on an update.
    privileged = pod(container(securityContext={"privileged": True}))
    assert _pod_update(privileged, privileged, p) == []
    assert _pod_update(_annotated(**cdi), _annotated(),
                       policy(rules={"denyCdiAnnotations": False})) == []


def test_policy_paths() -> None:
    loaded = policies.build_set([policy()])
    p = loaded.policies["team"]
    assert loaded.governing("team") is p
    variant = loaded.governing("team/baseline")
    assert variant.pod_security
    assert not p.pod_security
    assert loaded.governing("team/baseline") is variant  # made once: caches key on it
    assert loaded.governing("nope/baseline").unavailable is not None
    assert loaded.get("team/other") is None


def test_a_status_update_or_a_binding_that_adds_a_cdi_annotation_is_refused() -> None:
    """Two more ways to a Pod's annotations: `pods/status` keeps the metadata it is sent
    with, and a Binding's annotations are copied onto the pod."""
    p = policy()
    cdi = {"cdi.k8s.io/x": "nvidia.com/gpu=all"}
    status = reviewing.admit(_annotated(**cdi), policy=p, endpoint="validate", group="",
                             kind="Pod", operation="UPDATE", sub_resource="status",
                             old=_annotated())
    assert [v.rule for v in status.violations] == ["cdi-annotations"]
    kept = reviewing.admit(_annotated(**cdi), policy=p, endpoint="validate", group="",
                           kind="Pod", operation="UPDATE", sub_resource="status",
                           old=_annotated(**cdi))
    assert kept.allowed
    for added, rules in ((cdi, ["cdi-annotations"]), ({"note": "x"}, []), (None, [])):
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": "p", **({"annotations": added} if added
                                                else {})},
                   "target": {"kind": "Node", "name": "n"}}
        for sub_resource in ("binding", ""):  # pods/binding, and the older `bindings`
            decision = reviewing.admit(binding, policy=p, endpoint="mutate", group="",
                                       kind="Binding", operation="CREATE",
                                       sub_resource=sub_resource)
            assert [v.rule for v in decision.violations] == rules
            assert decision.patch == []


def test_an_ephemeral_container_may_not_mount_an_allowed_read_only_path_writable() -> None:
    p = policy(**ALLOWING)
    running = pod(container(volumeMounts=[{"name": "m", "mountPath": "/m", "readOnly": True}]),
                  volumes=[{"name": "m", "hostPath": {"path": "/srv/models"}}])
    for mount, rules in (({"name": "m", "mountPath": "/w"}, [("host-access", "dbg")]),
                         ({"name": "m", "mountPath": "/w", "readOnly": True}, [])):
        debug = {"name": "dbg", "image": "busybox", "volumeMounts": [mount]}
        updated = {**running, "spec": {**running["spec"], "ephemeralContainers": [debug]}}
        decision = reviewing.admit(updated, policy=p, endpoint="mutate", group="",
                                   kind="Pod", operation="UPDATE",
                                   sub_resource="ephemeralcontainers", old=running)
        assert [(v.rule, v.container) for v in decision.violations] == rules


def test_a_dra_device_class_asked_for_by_extended_resource_name_is_refused() -> None:
    obj = pod(container(limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1},
                        requests={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}))
    assert rules_of(obj, policy()) == [("resource-claims", "main")]
    assert rules_of(obj, policy(rules={"denyResourceClaims": False})) == []
