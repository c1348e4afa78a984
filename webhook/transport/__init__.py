"""Transport: the HTTP side of the webhook, in one direction of imports.

- `app`: the aiohttp applications (admission over HTTPS, probes and metrics over HTTP), the
  routes, the content-type, body-size and in-flight limits, counting and the review log;
- `limits`: the bounds of connections (header, body and idle timeouts, the connection cap)
  and the listener that enforces them;
- `serving`: running both applications until SIGTERM, the drain, the event loop;
- `memory`: the process's memory settings, made once by `serve`, and the heap's trimming;
- `logs`, `metrics`: the log lines and the Prometheus metrics.

Below transport, and never importing from it: the AdmissionReview codec (`webhook.reviews`),
the pure core (`webhook.core`), the files it watches (`webhook.watching`) and the names the
project shares (`webhook.names`). The command line (`webhook.commands`) sits above it all.
"""
