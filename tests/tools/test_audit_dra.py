"""Issue 22: `gpu-share-webhook audit` finds the ResourceClaims and ResourceClaimTemplates
(`resource.k8s.io/v1`) of a cluster dump that the webhook would refuse or change if they were
created now: the claims made before their namespace opted in. Through the real command line,
text and JSON, on a dump of valid objects written after NVIDIA's documented examples
(the GPU DRA driver's quickstart) and after the claims kube-controller-manager makes from a
template for a pod (owned by the Pod, annotation `resource.kubernetes.io/pod-claim-name`:
the Kubernetes docs' "Well-Known Labels, Annotations and Taints").

`dra` here is the shipped policy as it sizes claims: `addMpsConfig` left to its default (the
shipped file turns it off; one test reads the shipped file itself).
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from webhook import cli
from webhook.policy import names

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "policies"
# The shipped policies, `dra` as it adds the profile's MPS configuration (see the module).
ADDING: dict[str, Path] = {}
OPTED_IN = {names.ENABLED_LABEL: "true"}
# resource.k8s.io/v1 is served from 1.34 on.
VERSIONS = ("1.34", kubernetes_validate.latest_version())
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"

# What the shipped `dra` policy adds to a GPU request with no configuration: the MPS
# configuration of its default profile, medium.
MEDIUM = (
    "GpuConfig, sharing MPS, defaultActiveThreadPercentage=25,"
    " defaultPinnedDeviceMemoryLimit=3840Mi"
)


# --------------------------------------------------------------------------- the dump


def request(
    name: str = "gpu", device_class: str = "gpu.nvidia.com", **fields: Any
) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, **fields}}


def devices(
    *requests: dict[str, Any], config: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"requests": list(requests or [request()])}
    if config is not None:
        out["config"] = config
    return {"devices": out}


def mps(request_name: str, threads: int, pinned: str) -> dict[str, Any]:
    return {
        "requests": [request_name],
        "opaque": {
            "driver": "gpu.nvidia.com",
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "GpuConfig",
                "sharing": {
                    "strategy": "MPS",
                    "mpsConfig": {
                        "defaultActiveThreadPercentage": threads,
                        "defaultPinnedDeviceMemoryLimit": pinned,
                    },
                },
            },
        },
    }


class Cluster:
    """The objects of a dump, with uids and controller references as the API server and the
    controllers set them."""

    def __init__(self) -> None:
        self.namespaces: list[dict[str, Any]] = []
        self.objects: list[dict[str, Any]] = []
        self._uid = 0

    def namespace(self, name: str, labels: dict[str, str]) -> None:
        self.namespaces.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": {names.NAME_LABEL: name, **labels}},
            }
        )

    def add(
        self,
        api: str,
        kind: str,
        name: str,
        ns: str,
        body: dict[str, Any],
        *,
        owner: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        self._uid += 1
        meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{self._uid}"}
        if annotations:
            meta["annotations"] = annotations
        if owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        obj = {"apiVersion": api, "kind": kind, "metadata": meta, **copy.deepcopy(body)}
        self.objects.append(obj)
        return obj

    def claim(self, name: str, ns: str, spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return self.add("resource.k8s.io/v1", "ResourceClaim", name, ns, {"spec": spec}, **extra)

    def template(self, name: str, ns: str, spec: dict[str, Any]) -> dict[str, Any]:
        return self.add(
            "resource.k8s.io/v1", "ResourceClaimTemplate", name, ns, {"spec": {"spec": spec}}
        )

    def generated(self, pod: dict[str, Any], spec: dict[str, Any], suffix: str) -> dict[str, Any]:
        """The claim kube-controller-manager makes for `pod`'s claim "gpu" from a template:
        owned by the pod, named after it, the template's spec."""
        name = f"{pod['metadata']['name']}-gpu-"
        obj = self.claim(
            name + suffix,
            pod["metadata"]["namespace"],
            spec,
            owner=pod,
            annotations={POD_CLAIM_NAME: "gpu"},
        )
        obj["metadata"]["generateName"] = name
        return obj

    def deployment(
        self, name: str, ns: str, pod_spec: dict[str, Any], replicas: int
    ) -> list[dict[str, Any]]:
        """A Deployment, its ReplicaSet and its pods (returned)."""
        template = {"metadata": {"labels": {"app": name}}, "spec": pod_spec}
        selector = {"matchLabels": {"app": name}}
        top = self.add(
            "apps/v1",
            "Deployment",
            name,
            ns,
            {"spec": {"replicas": replicas, "selector": selector, "template": template}},
        )
        current = self.add(
            "apps/v1",
            "ReplicaSet",
            f"{name}-5d4f8b",
            ns,
            {"spec": {"replicas": replicas, "selector": selector, "template": template}},
            owner=top,
        )
        return [
            self.add("v1", "Pod", f"{name}-5d4f8b-{i:05d}", ns, {"spec": pod_spec}, owner=current)
            for i in range(replicas)
        ]


# The GPU request of NVIDIA's examples, and the pod of its quickstart that names a template.
SINGLE = devices()
QUICKSTART_POD = {
    "containers": [
        {
            "name": "ctr",
            "image": "ubuntu:22.04",
            "command": ["bash", "-c", "nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"],
            "resources": {"claims": [{"name": "gpu"}]},
        }
    ],
    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}
# NVIDIA's quickstart MPS template as published: 10Gi pinned, above the dra policy's 8192Mi.
QUICKSTART_MPS = devices(request("mps-gpu"), config=[mps("mps-gpu", 50, "10Gi")])


def cluster() -> Cluster:
    c = Cluster()
    c.namespace("gpu-test", {**OPTED_IN, names.POLICY_LABEL: "dra"})
    c.namespace("legacy", OPTED_IN)  # the default policy: no dra section
    c.namespace("off", {})

    # Made before the namespace opted in: the template and the claims made from it for the
    # pods of a Deployment have no sharing configuration.
    c.template("single-gpu", "gpu-test", SINGLE)
    for i, pod in enumerate(c.deployment("inference", "gpu-test", QUICKSTART_POD, replicas=2)):
        c.generated(pod, SINGLE, f"x7k2{i}")
    # A pod's claim whose pod was not dumped.
    gone = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gone", "namespace": "gpu-test", "uid": "uid-gone"},
    }
    c.generated(gone, SINGLE, "q9w8e")
    c.template("shared-gpu", "gpu-test", QUICKSTART_MPS)
    # Bare claims differing only in their names: one verdict.
    for name in ("pair-a", "pair-b"):
        c.claim(name, "gpu-test", devices(request(count=2)))
    c.claim("tuned", "gpu-test", devices(config=[mps("gpu", 50, "4Gi")]))
    c.claim("nic", "gpu-test", devices(request("nic", "nic.example.com")))
    c.template("nic", "gpu-test", devices(request("nic", "nic.example.com")))

    c.claim("single-gpu", "legacy", SINGLE)
    c.claim("pair", "off", devices(request(count=2)))
    return c


def check_valid(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        for version in VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


def beta_claim() -> dict[str, Any]:
    """A claim of resource.k8s.io/v1beta1 (requests flat), as a cluster before 1.34 serves it."""
    return {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": "old", "namespace": "gpu-test", "uid": "uid-old"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 2}]
            }
        },
    }


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """`-f` arguments: the Namespaces, and the rest as `kubectl get ... -o json` writes it."""
    root = tmp_path_factory.mktemp("audit-dra")
    c = cluster()
    check_valid([*c.namespaces, *c.objects])
    (root / "namespaces.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": c.namespaces})
    )
    items = [*c.objects, beta_claim()]
    (root / "workloads.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    return ["-f", str(root / "namespaces.json"), "-f", str(root / "workloads.json")]


@pytest.fixture(scope="module", autouse=True)
def _adding(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    directory = tmp_path_factory.mktemp("adding") / "policies"
    shutil.copytree(SHIPPED, directory)
    doc = yaml.safe_load((SHIPPED / "dra.yaml").read_text())
    for c in doc["spec"]["dra"]["deviceClasses"]:
        c.pop("addMpsConfig", None)
    (directory / "dra.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    ADDING["policies"] = directory
    yield
    ADDING.clear()


def audit(
    capsys: pytest.CaptureFixture[str], files: list[str], *extra: str, policies: Path | None = None
) -> tuple[int, str, str]:
    directory = policies or ADDING["policies"]
    code = cli.main(["audit", *files, "--policies", str(directory), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(
    capsys: pytest.CaptureFixture[str], files: list[str]
) -> tuple[int, dict[str, Any], str]:
    code, out, err = audit(capsys, files, "-o", "json", "--show", "all")
    doc: dict[str, Any] = json.loads(out)
    return code, doc, err


def namespace(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(ns for ns in doc["namespaces"] if ns["name"] == name)
    return found


def entry(ns: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    """The entry whose subject is kind/name, or that holds it as a member."""
    for e in ns["objects"]:
        if (e["kind"], e["name"]) == (kind, name) or {"kind": kind, "name": name} in e["members"]:
            found: dict[str, Any] = e
            return found
    raise AssertionError(f"{kind}/{name} is in no entry of {ns['name']}")


def claim_entries(ns: dict[str, Any]) -> dict[tuple[str, str], tuple[str, int]]:
    """(kind, name) of each entry of claims or templates: (verdict, count)."""
    return {
        (e["kind"], e["name"]): (e["verdict"], e["count"])
        for e in ns["objects"]
        if e["kind"] in ("ResourceClaim", "ResourceClaimTemplate")
    }


# --------------------------------------------------------------------------- verdicts


def test_each_claim_and_template_gets_the_verdict_of_the_webhook(
    capsys: pytest.CaptureFixture[str], dump: list[str]
) -> None:
    code, doc, _ = as_json(capsys, dump)
    assert code == 1
    gpu = namespace(doc, "gpu-test")
    assert claim_entries(gpu) == {
        ("ResourceClaimTemplate", "shared-gpu"): ("refused", 1),
        ("ResourceClaim", "pair-a"): ("refused", 2),
        ("ResourceClaimTemplate", "single-gpu"): ("changed", 1),
        ("ResourceClaim", "inference-5d4f8b-00000-gpu-x7k20"): ("changed", 2),
        ("ResourceClaim", "gone-gpu-q9w8e"): ("changed", 1),
        ("ResourceClaim", "nic"): ("untouched", 1),
        ("ResourceClaimTemplate", "nic"): ("untouched", 1),
        ("ResourceClaim", "tuned"): ("untouched", 1),
    }
    # Counted with the pods and workloads: 10 claims and templates, a Deployment, its
    # ReplicaSet and 2 pods.
    assert gpu["counts"]["objects"] == 14
    # Under a policy with no dra section a GPU claim is refused: it would serve the
    # namespace's pods, unreviewed, once the namespace moves to a policy with one.
    legacy = namespace(doc, "legacy")
    assert claim_entries(legacy) == {("ResourceClaim", "single-gpu"): ("refused", 1)}
    off = namespace(doc, "off")
    assert (off["status"], off["counts"]["untouched"], off["objects"]) == ("not-opted-in", 1, [])


def test_under_the_shipped_policy_claims_without_configuration_are_left_as_they_are(
    capsys: pytest.CaptureFixture[str], dump: list[str]
) -> None:
    """The shipped file adds no MPS configuration: the claims the sizing policy would
    change stay as they are; the refusals stand."""
    code, out, _ = audit(capsys, dump, "-o", "json", "--show", "all", policies=SHIPPED)
    assert code == 1
    gpu = namespace(json.loads(out), "gpu-test")
    verdicts = claim_entries(gpu)
    for name in ("inference-5d4f8b-00000-gpu-x7k20", "gone-gpu-q9w8e"):
        assert verdicts[("ResourceClaim", name)][0] == "untouched"
    assert verdicts[("ResourceClaimTemplate", "single-gpu")] == ("untouched", 1)
    assert verdicts[("ResourceClaimTemplate", "shared-gpu")] == ("refused", 1)
    assert entry(gpu, "ResourceClaimTemplate", "single-gpu")["unchanged"] == (
        'policy "dra" adds no MPS configuration to requests of class "gpu.nvidia.com"'
        " (addMpsConfig: false)"
    )


def test_a_refusal_names_the_claim_the_request_the_field_and_the_rule(
    capsys: pytest.CaptureFixture[str], dump: list[str]
) -> None:
    _, doc, _ = as_json(capsys, dump)
    gpu = namespace(doc, "gpu-test")
    [v] = entry(gpu, "ResourceClaimTemplate", "shared-gpu")["violations"]
    field = (
        "spec.spec.devices.config[0].opaque.parameters.sharing.mpsConfig"
        ".defaultPinnedDeviceMemoryLimit"
    )
    assert v == {
        "rule": "dra-mps-limits",
        "container": None,
        "field": field,
        "type": "FieldValueForbidden",
        "mode": "enforce",
        "message": f'claim template "shared-gpu" request "mps-gpu": {field}: "10Gi" is above the'
        ' ceiling of class "gpu.nvidia.com" in policy "dra" (8192Mi). Set it to 8192Mi or less',
    }
    pair = entry(gpu, "ResourceClaim", "pair-a")
    [v] = pair["violations"]
    assert (v["rule"], v["field"]) == (
        "dra-too-many-devices",
        "spec.devices.requests[0].exactly.count",
    )
    assert v["message"].startswith('claim "pair-a" request "gpu": ')


def test_a_change_says_what_configuration_would_be_added(
    capsys: pytest.CaptureFixture[str], dump: list[str]
) -> None:
    _, doc, _ = as_json(capsys, dump)
    gpu = namespace(doc, "gpu-test")
    single = entry(gpu, "ResourceClaimTemplate", "single-gpu")
    assert single["mutations"] == [{"rule": "dra-mps-limits", "mode": "enforce"}]
    assert single["adds"] == [f'config of request "gpu": {MEDIUM}']
    assert single["apiVersion"] == "resource.k8s.io/v1"


def test_claims_left_as_they_are_say_why(
    capsys: pytest.CaptureFixture[str], dump: list[str]
) -> None:
    _, doc, _ = as_json(capsys, dump)
    gpu = namespace(doc, "gpu-test")
    assert entry(gpu, "ResourceClaim", "tuned")["unchanged"] == (
        'it is already configured: request "gpu" (GpuConfig)'
    )
    assert entry(gpu, "ResourceClaim", "nic")["unchanged"] == (
        'it asks only for devices of classes policy "dra" does not govern (nic.example.com):'
        " the webhook leaves them alone"
    )
    [v] = entry(namespace(doc, "legacy"), "ResourceClaim", "single-gpu")["violations"]
    assert (v["rule"], v["field"]) == ("resource-claims", "metadata.namespace")
    assert v["message"].startswith(
        'claim "single-gpu": policy "default" has no dra section: its pods may not use claims'
    )


# --------------------------------------------------------------------------- grouping


def test_the_claims_made_for_a_deployments_pods_are_one_entry_of_the_deployment(
    capsys: pytest.CaptureFixture[str], dump: list[str]
) -> None:
    """Through their owner references, as its pods are; apart from its pods (another
    verdict), and with a note that their template decides the next ones."""
    _, doc, _ = as_json(capsys, dump)
    gpu = namespace(doc, "gpu-test")
    made = entry(gpu, "ResourceClaim", "inference-5d4f8b-00000-gpu-x7k20")
    assert made["owner"] == {"kind": "Deployment", "name": "inference"}
    assert made["members"] == [
        {"kind": "ResourceClaim", "name": "inference-5d4f8b-00001-gpu-x7k21"}
    ]
    assert (
        made["note"]
        == "made for its pod from a claim template, which decides the next pods' claims"
    )
    assert made["adds"] == [f'config of request "gpu": {MEDIUM}']
    deployment = entry(gpu, "Deployment", "inference")
    assert {"kind": "ResourceClaim", "name": "inference-5d4f8b-00000-gpu-x7k20"} not in deployment[
        "members"
    ]
    # A pod's claim whose pod is not in the files: an entry of its own, that says so.
    gone = entry(gpu, "ResourceClaim", "gone-gpu-q9w8e")
    assert gone["owner"] == {"kind": "Pod", "name": "gone"}
    assert gone["note"].endswith("; Pod/gone is not in the files")


def test_bare_claims_with_one_verdict_are_one_entry(
    capsys: pytest.CaptureFixture[str], dump: list[str]
) -> None:
    """As bare pods are: their names, which their messages start with, are left out of the
    comparison."""
    _, doc, _ = as_json(capsys, dump)
    gpu = namespace(doc, "gpu-test")
    pair = entry(gpu, "ResourceClaim", "pair-a")
    assert (pair["owner"], pair["count"]) == (None, 2)
    assert pair["members"] == [{"kind": "ResourceClaim", "name": "pair-b"}]
    # A claim and a template are never one entry, whatever their verdicts.
    nic = entry(gpu, "ResourceClaim", "nic")
    assert (nic["count"], nic["unchanged"]) == (
        1,
        entry(gpu, "ResourceClaimTemplate", "nic")["unchanged"],
    )


# --------------------------------------------------------------------------- the report


def test_the_text_report_lists_claims_like_other_objects(
    capsys: pytest.CaptureFixture[str], dump: list[str]
) -> None:
    code, out, err = audit(capsys, dump, "--show", "all")
    assert code == 1
    lines = out.splitlines()
    start = lines.index(
        'namespace gpu-test: policy "dra" (label gpu-share.io/policy=dra), mode enforce'
    )
    section = lines[start : lines.index("", start)]
    assert "    ResourceClaim/pair-a and ResourceClaim/pair-b" in section
    at = section.index("    ResourceClaimTemplate/shared-gpu")
    assert section[at + 1].startswith(
        '      - dra-mps-limits: claim template "shared-gpu" request "mps-gpu": spec.spec.devices'
    )
    at = section.index(
        "    ResourceClaim/inference-5d4f8b-00000-gpu-x7k20 and"
        " ResourceClaim/inference-5d4f8b-00001-gpu-x7k21 of Deployment/inference (made for its"
        " pod from a claim template, which decides the next pods' claims): dra-mps-limits"
    )
    assert section[at + 1] == f'      + config of request "gpu": {MEDIUM}'
    assert '    ResourceClaim/tuned: it is already configured: request "gpu" (GpuConfig)' in section
    summary = lines[lines.index("Summary") :]
    assert any(line.split()[:2] == ["gpu-test", "dra"] for line in summary)
    # The quickstart template and the two bare claims.
    assert "Would be refused: 4 objects. Fix them before enforcing." in lines
    assert (
        "Ignored: 1 object of kinds the webhook never reviews (ResourceClaim"
        " (resource.k8s.io/v1beta1))." in lines
    )
    assert err == (
        "warning: 1 object of resource.k8s.io/v1beta1 not judged: the webhook is sent claims as"
        " resource.k8s.io/v1 only (Kubernetes 1.34+); counted as ignored\n"
    )


def test_the_totals_count_claims(capsys: pytest.CaptureFixture[str], dump: list[str]) -> None:
    _, doc, _ = as_json(capsys, dump)
    counts = {ns["name"]: ns["counts"] for ns in doc["namespaces"]}
    refused = sum(c["refused"] for c in counts.values())
    assert doc["totals"]["refused"] == refused == 4
    assert doc["totals"]["objects"] == sum(c["objects"] for c in counts.values()) == 16
    assert doc["totals"]["ignored"] == 1


def test_a_dump_of_claims_alone_is_audited(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Namespaces and claims, no pod: something to audit (not bad input); exit 0 when
    nothing would be refused, only changed."""
    c = Cluster()
    c.namespace("gpu-test", {**OPTED_IN, names.POLICY_LABEL: "dra"})
    c.claim("single-gpu", "gpu-test", SINGLE)
    check_valid([*c.namespaces, *c.objects])
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump_all([*c.namespaces, *c.objects]))
    code, out, err = audit(capsys, ["-f", str(path)])
    assert (code, err) == (0, "")
    assert "  would be changed: 1 object\n    ResourceClaim/single-gpu: dra-mps-limits\n" in out
    assert out.endswith("Nothing would be refused.\n")
    c.claim("pair", "gpu-test", devices(request(count=2)))
    path.write_text(yaml.safe_dump_all([*c.namespaces, *c.objects]))
    code, out, _ = audit(capsys, ["-f", str(path)])
    assert code == 1
    assert "Would be refused: 1 object. Fix them before enforcing." in out


def test_a_claim_of_a_shape_no_kubernetes_object_has_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    c = Cluster()
    c.namespace("gpu-test", {**OPTED_IN, names.POLICY_LABEL: "dra"})
    bad = c.claim("bad", "gpu-test", devices())
    bad["spec"]["devices"]["requests"] = {"name": "gpu"}
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump_all([*c.namespaces, *c.objects]))
    code, out, err = audit(capsys, ["-f", str(path)])
    assert (code, out) == (2, "")
    assert err.startswith(
        'error: gpu-test/ResourceClaim/bad: claim "bad": spec.devices.requests: must be a list,'
        " not an object"
    )
    assert len(err.splitlines()) == 1
