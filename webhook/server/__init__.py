"""Transport: the HTTP side of the webhook, in one direction of imports.

One review's path (docs/architecture.md):

- `connections`: the admission listener: connection and handshake caps, TLS, and the one
  adapter in front of aiohttp's handler (the header timeout);
- `admission`: the admission routes: content type, body size and timeout, the bytes in
  flight, the review (inline or on a thread), the answer, counting and the review line;
- `codec`: the AdmissionReview codec (bytes in, bytes out), above the engine;
- `metrics`, `logs`: the Prometheus metrics and the log lines.

Around it:

- `serving`: running both applications until SIGTERM, the drain, the event loop;
- `app`: the two aiohttp applications (admission over HTTPS, probes and metrics over HTTP)
  and what runs while they run (file watchers, review threads);
- `probes`: `/healthz`, `/readyz`, `/metrics`;
- `states`: what both applications share (policies, certificate, metrics, budget);
- `configuration`: `Settings`, all that `serve` can be told;
- `limits`: the fixed bounds of connections and requests, and the budget of review bytes;
- `reload`, `certificates`: the policy and certificate files.

Below transport, and never importing from it: the pure core (`webhook.engine`) and the
names the project shares (`webhook.policy.names`). The command line (`webhook.tools`) sits
above it all.
"""
