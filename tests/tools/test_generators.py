"""The case generators take bounded memory, whatever the seed.

tests/support/fuzzing.py's "many" mangling made a list of up to 10,000 copies of whatever node it
picked: a node holding a 1 MB string (another mangling's, or a hostile pod's) gave bodies of
gigabytes, and a "many" of a node that held an earlier "many" squared the count.
`bench/fuzz.py --seed 4 --count 100000` took over 24 GB at its 62nd batch (seed 65: 1,000
copies of 2 MB). Now a "many" stops at `fuzzing.MANY_BYTES`.

Each probe runs in a fresh interpreter under an address-space limit (RLIMIT_AS), so that a
strategy that grows again fails here, with the seed, rather than taking the machine; it
reports its peak RSS (getrusage) and the largest body it made.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests.support import fuzzing
from tests.support.kube import REPO

MIB = 1024 * 1024
# The probe's address space: a batch takes 0.2-0.7 GB of RSS (the interpreter and hypothesis
# take ~100 MB), an unbounded one tens of GB.
LIMIT_MIB = 2048
PEAK_MIB = 1024
# The largest body a case may have: three "many"s of MANY_BYTES each, and a hostile pod's
# own 1 MB strings. Before the bound, bodies of 2 GB and more.
BODY_BOUND = 4 * fuzzing.MANY_BYTES
# The top-level strategies of tests/support/fuzzing.py, and tests/support/strategies.py's.
FUZZING = (
    "pod_cases", "workload_cases", "mangled_cases", "envelope_cases", "hollow_cases",
    "raw_cases", "oversized_cases", "any_cases",
)  # fmt: skip

PROBE = textwrap.dedent(
    """
    import json, resource, sys

    limit = int(sys.argv[1]) << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    from hypothesis import HealthCheck, Phase, given, seed, settings

    from tests.support import fuzzing, strategies

    sys.path.insert(0, "bench")
    import fuzz  # bench/fuzz.py

    def size(value):
        if isinstance(value, fuzzing.Case):
            return len(value.body)
        return len(fuzzing.encode(value[1]))  # strategies.policy_and_pod: (policy, pod)

    def run(name, examples, at):
        if name == "bench":  # a batch of bench/fuzz.py, as it makes it
            return max(len(case.body) for case in fuzz.batch(examples, at))
        strategy = (
            strategies.policy_and_pod if name == "policy_and_pod" else getattr(fuzzing, name)()
        )
        largest = [0]

        @seed(at)
        @settings(max_examples=examples, database=None, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def draw(case):
            largest[0] = max(largest[0], size(case))

        draw()
        return largest[0]

    largest = {}
    for job in json.loads(sys.argv[2]):
        name, examples, at = job
        largest[f"{name} seed {at}"] = run(name, examples, at)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps({"largest": largest, "peak_mib": peak}))
    """
)


def probe(jobs: list[tuple[str, int, int]], *, timeout: float) -> dict[str, object]:
    """Draw `examples` values of each (strategy, examples, seed) in a fresh, limited process;
    strategy "bench" is a batch of bench/fuzz.py."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(LIMIT_MIB), json.dumps(jobs)],
        cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"generating {jobs} under {LIMIT_MIB} MiB of address space failed"
        f" (exit {done.returncode}; -11 is orjson out of memory): {done.stderr[-3000:]}"
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def check(result: dict[str, object]) -> None:
    largest = result["largest"]
    assert isinstance(largest, dict)
    over = {name: size for name, size in largest.items() if size > BODY_BOUND}
    assert not over, f"bodies over {BODY_BOUND:,} bytes: {over}"
    assert isinstance(result["peak_mib"], int)
    assert result["peak_mib"] < PEAK_MIB, result


# A few examples of each top-level strategy, at seed 4.
STRATEGY_JOBS = [(name, 10, 4) for name in FUZZING if name != "oversized_cases"]
STRATEGY_JOBS += [("oversized_cases", 3, 4), ("policy_and_pod", 30, 4), ("mangled_cases", 30, 4)]
# The bench's batches: 65, reached by `--seed 4 --count 100000`, made a body of 1,000 copies
# of 2 MB before the bound; 4 is that run's first batch; 0 and 9, more of the same mix.
BENCH_SEEDS = (0, 4, 9, 65)


@pytest.mark.slow  # a subprocess per strategy under a memory cap (about 2 s)
def test_each_strategy_generates_in_bounded_memory(
    probes: Probes, request: pytest.FixtureRequest
) -> None:
    """A few examples of each top-level strategy, at seed 4 (a smoke test: the rare cases that
    grew are the chains below, and the bench's batches)."""
    check(probes[request.node.name].result())


@pytest.mark.slow  # four thousand cases: bench/fuzz.py's batches of 1,000, about 20 s each
@pytest.mark.parametrize("at", BENCH_SEEDS)
def test_bench_batches_generate_in_bounded_memory(
    probes: Probes, request: pytest.FixtureRequest, at: int
) -> None:
    """Batches as bench/fuzz.py makes them; `--seed 4 --count 100000` reaches seed 65, whose
    batch made a body of 1,000 copies of 2 MB before the bound."""
    check(probes[request.node.name].result())


# "many" at chosen nodes: the draws a mangling makes, given rather than drawn.
CHAINS = {
    # A 1 MB string (3 MB encoded), then 10,000 copies of the request that holds it: 30 GB.
    "huge string, then many": [
        [("request", "uid"), "replace", ["\u24fd", MIB]],  # the string, as a repeat
        [("request",), "many", 10000],
    ],
    # 10,000 containers, then 10,000 copies of the spec that holds them: 10^8 containers.
    "many of many": [
        [("request", "object", "spec", "containers"), "many", 10000],
        [("request", "object", "spec"), "many", 10000],
    ],
}
CHAIN_PROBE = textwrap.dedent(
    """
    import json, resource, sys

    limit = int(sys.argv[1]) << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    from tests.support import fuzzing

    def made(chain):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "main", "image": "cuda"}]}}
        doc = fuzzing.review_doc(pod, kind=("", "v1", "Pod"), operation="CREATE", uid="u")
        for path, action, value in chain:
            if isinstance(value, list):
                value = value[0] * value[1]
            paths = [tuple(p) for _, _, p in fuzzing.nodes(doc)]
            answers = iter([paths.index(tuple(path)), action, value])
            fuzzing._mangle_once(lambda _: next(answers), doc, envelope=False)
        return len(fuzzing.encode(doc))

    largest = {name: made(chain) for name, chain in json.loads(sys.argv[2]).items()}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps({"largest": largest, "peak_mib": peak}))
    """
)


def chain_probe() -> dict[str, object]:
    """The chains made in a fresh, limited process: the size of each body, and the peak."""
    done = subprocess.run(
        [sys.executable, "-c", CHAIN_PROBE, str(LIMIT_MIB), json.dumps(CHAINS)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.slow  # the chains that used to grow, built in a subprocess (about 1.5 s)
def test_many_stops_at_its_bytes(probes: Probes, request: pytest.FixtureRequest) -> None:
    """The ways "many" grew without bound, made on purpose: the bodies stay under the bound."""
    result = probes[request.node.name].result()
    check(result)
    largest = result["largest"]
    assert isinstance(largest, dict)
    for size in largest.values():
        assert size > fuzzing.MAX_BODY_BYTES // 2  # it still makes many


# Each test's probe, by the test's name.
Probes = dict[str, Future[dict[str, object]]]


def _runs() -> dict[str, Callable[[], dict[str, object]]]:
    """Each test's probe, by the test's name; the longest (the batches) first."""
    runs: dict[str, Callable[[], dict[str, object]]] = {
        f"test_bench_batches_generate_in_bounded_memory[{at}]": functools.partial(
            probe, [("bench", 1000, at)], timeout=300
        )
        for at in BENCH_SEEDS
    }
    runs["test_each_strategy_generates_in_bounded_memory"] = functools.partial(
        probe, STRATEGY_JOBS, timeout=60
    )
    runs["test_many_stops_at_its_bytes"] = chain_probe
    return runs


@pytest.fixture(scope="module")
def probes(request: pytest.FixtureRequest) -> Iterator[Probes]:
    """The probes of this module's selected tests, started together: each is an interpreter
    generating on one CPU, so as many run at once as this process may use CPUs."""
    selected = {item.name for item in request.session.items if item.path == request.path}
    with ThreadPoolExecutor(max_workers=len(os.sched_getaffinity(0))) as pool:
        yield {name: pool.submit(run) for name, run in _runs().items() if name in selected}
        pool.shutdown(cancel_futures=True)
