"""Transport: the HTTP side of the webhook, in one direction of imports.

- `serving`: running both applications until SIGTERM, the drain, the event loop;
- `app`: the two aiohttp applications (admission over HTTPS, probes and metrics over HTTP)
  and what runs while they run (file watchers, review threads, metric publishing);
- `admission`: the admission routes: content type, body size, the deadline, the review,
  counting and the review line;
- `probes`: `/healthz`, `/readyz`, `/metrics`;
- `states`: what both applications share (policies, certificate, metrics, budget, flags);
- `configuration`: `Settings`, all that `serve` can be told;
- `limits`: the bounds of connections (header, body and idle timeouts, the connection cap)
  and the listener that enforces them;
- `inflight`: the budget of review bytes being received or reviewed;
- `deadlines`: how long a review may take (the API server's `?timeout=`);
- `memory`: the process's memory settings, made once by `serve`, and the heap's trimming;
- `logs`, `metrics`: the log lines and the Prometheus metrics.

Below transport, and never importing from it: the AdmissionReview codec (`webhook.server.codec`),
the pure core (`webhook.engine`), the files it watches (`webhook.server.reload`) and the names the
project shares (`webhook.policy.names`). The command line (`webhook.tools`) sits above it all.
"""
