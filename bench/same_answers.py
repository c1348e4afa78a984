"""Whether two checkouts answer alike: the same response bytes for the same reviews, and the
same `mutate` output, messages and exit codes. For changes that must not change behaviour
(a refactor, a faster path).

    python bench/same_answers.py inputs OUT.pickle [--count 3000]  # once, this checkout's tests
    python bench/same_answers.py answers OUT.pickle CHECKOUT RESULT.json
    python bench/same_answers.py compare RESULT-A.json RESULT-B.json

`inputs` draws the reviews once (so that both checkouts get the same ones): the published
manifests and examples/ (each object, and each of its pod templates as a Pod), the corpus
of the tests (tests/support/corpus.py), the DRA claims, templates and pods of
tests/support/dra_objects.py, and reviews drawn by tests/support/fuzzing.py's and
tests/support/strategies.py's strategies with a fixed seed: pods and workloads, tame and hostile,
CREATE, `kubectl debug`, updates, deletes. The policies are kept as YAML text, loaded by each
checkout's own loader: the shipped ones, the tests' lab policy, and copies with other modes and
switches.

`answers` runs CHECKOUT's codec (`reviews.review`, put first on the path) over every review
under every policy and both endpoints, once without a cache and twice through one answer
cache (so that the second is answered from it where it keeps answers), and runs
`python -m webhook mutate -f FILE -n team-a -o patch` (and with the not-renamed policy's
labels) over every published manifest and example. `compare` prints what differs.
"""

# The project is imported inside the functions: `answers` puts the checkout it measures first
# on the path before it imports anything of it.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# The policies of the comparison, as changes of the shipped `default` (or of the tests' lab
# policy): other modes, rule modes and switches, so that every rule is met in every mode.
_VARIANTS: dict[str, dict[str, Any]] = {
    "warn": {"mode": "warn"},
    "dryrun": {"mode": "dry-run"},
    "rulemodes": {"ruleModes": {"mps-limits": "dry-run", "host-path": "warn",
                                "node-selection": "warn", "device-variables": "dry-run"}},
    "switches": {"rules": {"denyEnvFromOnGpuContainers": True,
                           "voidVisibleDevicesWithoutGpu": False,
                           "denyResourceClaims": False, "denyPrivileged": False}},
}


def _policy_texts() -> dict[str, str]:
    import yaml

    texts: dict[str, str] = {}
    for path in sorted((REPO / "policies").glob("*.yaml")):
        if path.name != "kustomization.yaml":
            texts[path.name] = path.read_text()
    default = next(
        d for d in yaml.safe_load_all(texts["default.yaml"]) if d["metadata"]["name"] == "default"
    )
    for suffix, change in _VARIANTS.items():
        doc = copy.deepcopy(default)
        doc["metadata"]["name"] = f"default-{suffix}"
        for key, value in change.items():
            if isinstance(value, dict) and isinstance(doc["spec"].get(key), dict):
                doc["spec"][key] = {**doc["spec"][key], **value}
            else:
                doc["spec"][key] = value
        texts[f"{suffix}.yaml"] = yaml.safe_dump(doc)
    texts["lab.yaml"] = yaml.safe_dump(_LAB)
    return texts


# A policy with several classes per resource, MIG, eight GPUs per node and three profiles.
_LAB = {
    "apiVersion": "gpu-share.io/v1alpha1",
    "kind": "SharingPolicy",
    "metadata": {"name": "lab"},
    "spec": {
        "sharedResources": ["nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb.shared"],
        "nodeClasses": [
            {"name": "t4-mps", "product": "Tesla-T4", "strategy": "mps", "replicas": 4,
             "memoryMiB": 15360},
            {"name": "l4-mps", "product": "NVIDIA-L4", "strategy": "mps", "replicas": 2,
             "memoryMiB": 23034},
            {"name": "a10g-ts", "product": "NVIDIA-A10G", "strategy": "time-slicing",
             "replicas": 4},
            {"name": "a100-ts", "product": "NVIDIA-A100-SXM4-80GB", "strategy": "time-slicing",
             "replicas": 2, "gpusPerNode": 8, "memoryMiB": 81920},
            {"name": "mig", "resource": "nvidia.com/mig-1g.10gb", "product": "A100-MIG-1g.10gb",
             "strategy": "time-slicing", "replicas": 2},
        ],
        "profiles": {"small": {"activeThreadPercentage": 10, "pinnedMemoryMiB": 1536},
                     "medium": {"activeThreadPercentage": 25, "pinnedMemoryMiB": 3840},
                     "large": {"activeThreadPercentage": 50}},
        "defaultProfile": "medium",
    },
}


def _manifests() -> list[Path]:
    from tests.support import corpus

    return corpus.manifests()


def inputs(out: Path, count: int) -> None:
    sys.path.insert(0, str(REPO))
    import yaml
    from hypothesis import HealthCheck, Phase, given, settings

    from tests.support import corpus, dra_objects, fuzzing, kube, strategies

    bodies: list[bytes] = []

    def add(doc: dict[str, Any]) -> None:
        bodies.append(json.dumps(doc, separators=(",", ":")).encode())

    objects = [d for path in _manifests()
               for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    objects += list(corpus.objects())
    # The claims, templates and pods of NVIDIA's DRA driver examples (every policy, `dra`
    # among them, judges them).
    objects += [dra_objects.obj(name) for name in dra_objects.NAMES]
    for obj in objects:
        if "apiVersion" not in obj or "kind" not in obj:
            continue
        add(kube.admission_review(obj))
        for template in kube.templates_of(obj):
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": copy.deepcopy(template.get("metadata") or {"name": "p"}),
                   "spec": copy.deepcopy(template["spec"])}
            add(kube.admission_review(pod))
    drawn: list[dict[str, Any]] = []
    options = settings(max_examples=count, derandomize=True, database=None, deadline=None,
                       phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    for strategy in (fuzzing.pod_reviews(), fuzzing.workload_reviews()):
        @options
        @given(strategy)
        def collect(doc: dict[str, Any]) -> None:
            drawn.append(copy.deepcopy(doc))

        collect()
    for doc in drawn:
        bodies.append(fuzzing.encode(doc))
    pods: list[dict[str, Any]] = []
    for shared in ({"nvidia.com/gpu.shared"},
                   {"nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb.shared"}):

        @options
        @given(strategies.pods(frozenset(shared)))
        def collect_pods(pod: dict[str, Any]) -> None:
            pods.append(copy.deepcopy(pod))

        collect_pods()
    for pod in pods:
        add(kube.admission_review(pod))
    with out.open("wb") as f:
        pickle.dump({"policies": _policy_texts(), "bodies": bodies,
                     "manifests": [str(p) for p in _manifests()]}, f)
    print(f"{len(bodies)} reviews, {len(_manifests())} manifests -> {out}")


def answers(data_file: Path, checkout: Path, out: Path) -> None:
    sys.path.insert(0, str(checkout))
    from webhook.errors import BadReview

    # The checkout's codec, policies and workload kinds, wherever its layout keeps them
    # (in the older flat layout: webhook/reviews.py, webhook/policies.py, webhook/kinds.py).
    if (checkout / "webhook" / "server" / "codec.py").exists():
        from webhook.policy import kinds as workload_kinds
        from webhook.policy import policies
        from webhook.server import codec as reviews

        by_name = workload_kinds.kinds_by_name
    else:
        from webhook.core import pods  # type: ignore[import-not-found]

        from webhook import kinds as workload_kinds  # type: ignore[no-redef]
        from webhook import (
            policies,  # type: ignore[no-redef]
            reviews,  # type: ignore[attr-defined, no-redef]
        )

        by_name = pods.kinds_by_name

    with data_file.open("rb") as f:
        data = pickle.load(f)
    loaded = []
    for name, text in sorted(data["policies"].items()):
        if name == "kustomization.yaml":  # (inputs of before it was left out)
            continue
        found, problems = policies.parse_documents(text, name)
        assert not problems, problems
        loaded += found
    policy_set = policies.build_set(loaded)
    kinds = by_name(workload_kinds.all_kinds())
    names = [*policy_set.names, "no-such-policy", "_unknown"]

    def answer(body: bytes, name: str, endpoint: str, **caches: Any) -> str:
        try:
            outcome = reviews.review(body, policies=policy_set, policy_name=name,
                                     endpoint=endpoint, kinds=kinds, **caches)  # type: ignore[arg-type]
        except BadReview as exc:
            return f"400 {exc}"
        return outcome.body.decode("utf-8", "backslashreplace")

    fresh: dict[str, str] = {}
    # A checkout with an answer cache (an older one) answers through it too.
    kept = reviews.Answers(4096) if hasattr(reviews, "Answers") else None
    cached_differs: list[str] = []
    for i, body in enumerate(data["bodies"]):
        for name in names:
            for endpoint in ("mutate", "validate"):
                key = f"{i} {name} {endpoint}"
                fresh[key] = answer(body, name, endpoint)
                for _ in range(2 if kept is not None else 0):
                    again = answer(body, name, endpoint, answers=kept)
                    if again != fresh[key]:
                        cached_differs.append(key)
    cli: dict[str, str] = {}
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    for manifest in data["manifests"]:
        for labels in ([], ["-l", "gpu-share.io/enabled=true",
                            "-l", "gpu-share.io/policy=not-renamed"]):
            done = subprocess.run(
                [sys.executable, "-m", "webhook", "mutate", "-f", manifest, "-n", "team-a",
                 "-o", "patch", *labels, "--policies", str(REPO / "policies")],
                capture_output=True, env=env, cwd="/", check=False,
            )
            cli[f"{Path(manifest).name} {' '.join(labels)}".strip()] = (
                f"exit {done.returncode}\n--- stdout\n{done.stdout.decode()}"
                f"--- stderr\n{done.stderr.decode()}"
            )
    digest = hashlib.sha256(json.dumps([fresh, cli], sort_keys=True).encode()).hexdigest()
    out.write_text(json.dumps({"reviews": fresh, "cli": cli, "cached_differs": cached_differs,
                               "digest": digest}))
    print(f"{checkout}: {len(fresh)} answers, {len(cli)} mutate runs, digest {digest[:16]},"
          f" answers from the caches that differ: {len(cached_differs)}")


def compare(a_file: Path, b_file: Path) -> int:
    a, b = json.loads(a_file.read_text()), json.loads(b_file.read_text())
    differ = 0
    for part in ("reviews", "cli"):
        for key in sorted(set(a[part]) | set(b[part])):
            if a[part].get(key) != b[part].get(key):
                differ += 1
                if differ <= 5:
                    print(f"--- {part} {key}\nA: {a[part].get(key)}\nB: {b[part].get(key)}\n")
    for side, data in (("A", a), ("B", b)):
        if data["cached_differs"]:
            differ += 1
            print(f"{side}: {len(data['cached_differs'])} answers from the caches differ from"
                  f" fresh ones, first: {data['cached_differs'][:3]}")
    print(f"{len(a['reviews'])} answers and {len(a['cli'])} mutate runs compared:"
          f" {differ} differ")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("inputs")
    p.add_argument("out", type=Path)
    p.add_argument("--count", type=int, default=3000)
    p = sub.add_parser("answers")
    p.add_argument("data", type=Path)
    p.add_argument("checkout", type=Path)
    p.add_argument("out", type=Path)
    p = sub.add_parser("compare")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.step == "inputs":
        inputs(args.out, args.count)
        return 0
    if args.step == "answers":
        answers(args.data, args.checkout.resolve(), args.out)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
