"""Hostile AdmissionReviews through the real application, over TLS (tests/support/fuzzing.py).

Whatever the body, the answer is a 200 with an AdmissionReview that echoes the request's
uid (allowed, with a patch that applies to the object as sent and wants nothing more when
the patched object is reviewed again; or denied with a message), or a 400, 413 or 415 with
a one-line reason. Never a 5xx, never the denial of an internal error, never a dropped
connection. One application and one keep-alive client serve every example of a test.

The examples are derandomized (the same ones on every run); the bench runs many more,
random ones: `python bench/fuzz.py --count 100000` (see docs/robustness.md).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings

from tests.support import fuzzing
from tests.support import server_helpers as h
from webhook.server import app as server

Client = TestClient[Any, Any]

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    # One application and client for all the examples of a test is the point.
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)


@pytest.fixture
async def client(aiohttp_server: Any, aiohttp_client: Any, tmp_path: Path) -> Client:
    app = server.create_app(h.settings(tmp_path))
    return await h.start(aiohttp_server, aiohttp_client, app)


async def send(client: Client, case: fuzzing.Case) -> fuzzing.Answer:
    headers = {} if case.content_type is None else {"Content-Type": case.content_type}
    response = await h.post_review(
        client, case.path.partition("?")[0], case.body, headers=headers,
        skip_auto_headers=["Content-Type"],
    )  # fmt: skip
    async with response:
        body = await response.read()
    return fuzzing.Answer(response.status, response.headers.get("Content-Type", ""), body)


async def exchange(client: Client, case: fuzzing.Case, caplog: pytest.LogCaptureFixture) -> None:
    """Send `case` (and the review of the patched object, if any); fail with the reason, the
    body and the server's traceback if the answer breaks the contract."""
    caplog.clear()
    answer: fuzzing.Answer | None = None
    try:
        answer = await send(client, case)
        verdict = fuzzing.judge(case, answer)
        problems = verdict.problems
        if verdict.again is not None and not problems:
            again = await send(client, verdict.again)
            problems = fuzzing.judge_again(verdict.again, again).problems
    except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
        problems = [(fuzzing.DROPPED, f"{type(exc).__name__}: {exc}")]
    if problems:
        traces = [
            f"{r.getMessage()}\n{logging.Formatter().formatException(r.exc_info)}"
            for r in caplog.records
            if r.exc_info
        ]
        pytest.fail(
            "\n".join([fuzzing.report(case, problems, answer), *traces]), pytrace=False
        )


@pytest.mark.slow  # 700 hypothesis examples through the app over TLS
@settings(FUZZ, max_examples=700)
@given(case=fuzzing.pod_cases())
async def test_pods_are_admitted_idempotently_or_refused(
    client: Client, case: fuzzing.Case, caplog: pytest.LogCaptureFixture
) -> None:
    await exchange(client, case, caplog)


@pytest.mark.slow  # 400 hypothesis examples through the app over TLS
@settings(FUZZ, max_examples=400)
@given(case=fuzzing.workload_cases())
async def test_workloads_of_every_kind_are_admitted_or_refused(
    client: Client, case: fuzzing.Case, caplog: pytest.LogCaptureFixture
) -> None:
    await exchange(client, case, caplog)


@pytest.mark.slow  # 800 hypothesis examples through the app over TLS
@settings(FUZZ, max_examples=800)
@given(case=fuzzing.mangled_cases())
async def test_wrong_json_anywhere_in_the_review_is_a_refusal_or_a_400(
    client: Client, case: fuzzing.Case, caplog: pytest.LogCaptureFixture
) -> None:
    await exchange(client, case, caplog)


@pytest.mark.slow  # 400 hypothesis examples through the app over TLS
@settings(FUZZ, max_examples=400)
@given(case=fuzzing.hollow_cases())
async def test_null_empty_or_mistyped_fields_where_the_patch_writes(
    client: Client, case: fuzzing.Case, caplog: pytest.LogCaptureFixture
) -> None:
    await exchange(client, case, caplog)


@pytest.mark.slow  # 250 hypothesis examples through the app over TLS
@settings(FUZZ, max_examples=250)
@given(case=fuzzing.envelope_cases())
async def test_a_broken_admission_review_is_a_400_or_answered(
    client: Client, case: fuzzing.Case, caplog: pytest.LogCaptureFixture
) -> None:
    await exchange(client, case, caplog)


@pytest.mark.slow  # 400 hypothesis examples through the app over TLS
@settings(FUZZ, max_examples=400)
@given(case=fuzzing.raw_cases())
async def test_bytes_that_are_no_review_and_other_content_types_are_a_4xx(
    client: Client, case: fuzzing.Case, caplog: pytest.LogCaptureFixture
) -> None:
    await exchange(client, case, caplog)


@settings(FUZZ, max_examples=12)
@given(case=fuzzing.oversized_cases())
async def test_bodies_at_and_over_the_limit_are_answered_or_a_413(
    client: Client, case: fuzzing.Case, caplog: pytest.LogCaptureFixture
) -> None:
    await exchange(client, case, caplog)
