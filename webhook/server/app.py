"""The two aiohttp applications of a server, and what runs while they run.

- `create_app(settings)` -- HTTPS, the port the API server calls (8443):
  `POST /mutate`, `POST /validate` (policy `default`), `POST /mutate/{policy}`,
  `POST /validate/{policy}`, and `POST /mutate/{policy}/baseline`,
  `POST /validate/{policy}/baseline` for namespaces that enforce Pod Security baseline or
  restricted (`admission`). No Kubernetes API call on this path: the policy and the level
  come from the URL, which the webhook configurations set per namespace selector.
- `create_probe_app(app)` -- plain HTTP on its own port (8080): `GET /healthz`,
  `GET /readyz`, `GET /metrics` (`probes`). Separate so that the kubelet and Prometheus need
  neither the CA nor a client certificate, and so that nothing but admission is reachable
  over TLS.

Both share one `states.State`. While the admission application runs (its cleanup context),
the policy and certificate files are watched and the review threads are there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from webhook.policy import names
from webhook.server import admission, codec, configuration, limits, logs, probes, states

# Aliased: `create_app` has a `metrics` parameter.
from webhook.server import metrics as metrics_module

logger = logging.getLogger(__name__)

# Threads for large reviews. The GIL makes more of them no faster; two let one large review
# not queue behind another.
REVIEW_THREADS = 2


def create_app(
    settings: configuration.Settings,
    *,
    review: states.ReviewFunction = codec.review,
    metrics: metrics_module.Metrics | None = None,
    review_log: logs.ReviewLog | None = None,
) -> web.Application:
    """The HTTPS admission application.

    Loads the policies and the certificate pair now, so that a server that cannot serve
    fails before it listens (CertificateError; a policy file that does not load does not
    stop it, see `watching.PolicyWatch`); the pair must exist (see
    `certificates.ensure_local_certs`). Serve it with `app[states.STATE].ssl_context`. The
    policy and certificate watchers run while the application runs. `review` replaces the
    codec's `codec.review` (tests inject faults through it). Review lines go to
    `review_log` when given (`serve` passes a `logs.JsonLines`), else to the logger
    `webhook.review`.
    """
    bounds = settings.limits
    budget = limits.Budget(
        bounds.max_inflight_bytes, bounds.max_inflight_bytes_per_source, share=bounds.large_share
    )
    state = states.State.load(
        settings,
        budget=budget,
        review=review,
        metrics=metrics or metrics_module.Metrics(),
        review_lines=logs.ReviewWriter(review_log),
    )
    app = web.Application(client_max_size=bounds.max_body_bytes)
    app[states.STATE] = state
    for endpoint in codec.ENDPOINTS:
        policy_fixed = admission.Route(state, endpoint, names.DEFAULT_POLICY)
        policy_in_path = admission.Route(state, endpoint, None)
        under_pod_security = admission.Route(state, endpoint, None, pod_security=True)
        app.router.add_post(f"/{endpoint}", policy_fixed.handle)
        app.router.add_post(f"/{endpoint}/{{policy}}", policy_in_path.handle)
        # Any other second segment matches no route: 404.
        app.router.add_post(
            f"/{endpoint}/{{policy}}/{names.POD_SECURITY_SEGMENT}", under_pod_security.handle
        )
    app.cleanup_ctx.append(_running)
    return app


def create_probe_app(app: web.Application) -> web.Application:
    """The plain-HTTP application for the kubelet's probes and Prometheus, sharing `app`'s state."""
    probe_app = web.Application()
    probe_app[states.STATE] = app[states.STATE]
    probe_app.router.add_get("/healthz", probes.healthz)
    probe_app.router.add_get("/readyz", probes.readyz)
    probe_app.router.add_get("/metrics", probes.exposition)
    return probe_app


async def _running(app: web.Application) -> AsyncIterator[None]:
    state = app[states.STATE]
    state.executor = ThreadPoolExecutor(REVIEW_THREADS, thread_name_prefix="review")
    watchers = [
        asyncio.create_task(_watch(state.check_policies, state, in_thread=True)),
        # On the loop's thread: OpenSSL does not allow changing a context while another
        # thread starts handshakes from it, and a check is a millisecond of work.
        asyncio.create_task(_watch(state.check_certificate, state, in_thread=False)),
    ]
    state.ready = True
    try:
        yield
    finally:
        state.ready = False
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        # A large review cut off at its deadline may still be running; it is not waited for.
        state.executor.shutdown(wait=False, cancel_futures=True)


async def _watch(check: Callable[[], bool], state: states.State, *, in_thread: bool) -> None:
    interval = state.settings.reload_interval
    while True:
        await asyncio.sleep(interval)
        try:
            if in_thread:
                await asyncio.to_thread(check)
            else:
                check()
        except Exception:
            logger.exception("checking for changed files failed; will look again")
