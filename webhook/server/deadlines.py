"""How long a review may take: the API server's `?timeout=`, a Go duration, less a margin."""

from __future__ import annotations

import functools
import re
import urllib.parse

from webhook.policy import names

# Answer this long before the API server's deadline at most (a fifth of a short timeout):
# the answer must still cross the network and be read before the API server gives up.
DEADLINE_MARGIN_SECONDS = 1.0


@functools.lru_cache(maxsize=64)
def review_seconds(raw_path: str) -> float:
    """Seconds a review may take: the API server's `?timeout=` less a margin.

    Past it, the answer is an internal-error denial: a denial the API server still reads and
    shows the user, rather than a timeout it would resolve by the webhook's failurePolicy
    with a less helpful message. Cached by the raw path: the API server calls the same one
    for every review of a webhook.
    """
    query = raw_path.partition("?")[2]
    raw = urllib.parse.parse_qs(query).get("timeout", [""])[-1] if query else ""
    timeout = parse_duration(raw) if raw else None
    if timeout is None or timeout <= 0:
        timeout = names.API_SERVER_DEFAULT_TIMEOUT_SECONDS
    return timeout - min(DEADLINE_MARGIN_SECONDS, timeout / 5)


_DURATION = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_duration(text: str) -> float | None:
    """Seconds in a Go duration as the API server writes `?timeout=` ("10s", "1m0s",
    "1.5s"); a bare number is seconds. None when it is neither."""
    text = text.strip()[:64]
    try:
        return float(text)
    except ValueError:
        pass
    if not _DURATION.fullmatch(text):
        return None
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))
