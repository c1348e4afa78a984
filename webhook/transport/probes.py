"""The plain-HTTP routes for the kubelet and Prometheus: `/healthz`, `/readyz`, `/metrics`."""

from __future__ import annotations

from aiohttp import web

from webhook.transport import metrics, states


async def healthz(request: web.Request) -> web.Response:
    # Alive is answering at all: a wedged event loop does not get here.
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    state = request.app[states.STATE]
    if state.draining:
        return web.Response(status=503, text="draining: shutting down\n")
    if not state.ready:
        return web.Response(status=503, text="starting\n")
    # Ready even when a policy file does not load: the other policies serve, and the
    # namespaces of the broken one are told why. Not ready would take the replica out of the
    # Service, and with failurePolicy Fail no GPU pod could be created anywhere.
    detail = state.policy_watch.detail()
    return web.Response(text="\n".join(["ok", *detail]) + "\n")


async def exposition(request: web.Request) -> web.Response:
    """`/metrics`."""
    state = request.app[states.STATE]
    # The expiry moves with the clock, not only on reloads.
    state.update_gauges()
    response = web.Response(body=state.metrics.exposition())
    # With parameters, so set as a header: aiohttp's content_type= takes none.
    response.headers["Content-Type"] = metrics.CONTENT_TYPE
    return response
