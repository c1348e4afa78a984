"""The plain-HTTP routes for the kubelet and Prometheus: `/healthz`, `/readyz`, `/metrics`."""

from __future__ import annotations

from aiohttp import web

from webhook.server import metrics, states


async def healthz(request: web.Request) -> web.Response:
    # Alive is answering at all: a wedged event loop does not get here.
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    state = request.app[states.STATE]
    if state.draining:
        return web.Response(status=503, text="draining: shutting down\n")
    if not state.ready:
        return web.Response(status=503, text="starting\n")
    # Not ready while a policy file does not load and never loaded in this process: a new
    # replica of a rollout that brings a bad policy stays out of the Service and the rollout
    # stalls (maxUnavailable 0), while the old replicas serve their last good version. A file
    # that loaded here before keeps the replica ready: its last good version serves on, and
    # taking every replica out at once would refuse every GPU pod (failurePolicy Fail).
    watch = state.policy_watch
    unready = watch.unready()
    if unready:
        lines = ["not ready: a policy file that never loaded here", *unready]
        return web.Response(status=503, text="\n".join(lines) + "\n")
    return web.Response(text="\n".join(["ok", *watch.detail()]) + "\n")


async def exposition(request: web.Request) -> web.Response:
    """`/metrics`."""
    state = request.app[states.STATE]
    # The expiry moves with the clock, not only on reloads.
    state.update_gauges()
    response = web.Response(body=state.metrics.exposition())
    # With parameters, so set as a header: aiohttp's content_type= takes none.
    response.headers["Content-Type"] = metrics.CONTENT_TYPE
    return response
