"""The review bytes a server is receiving or reviewing at once, and their bound.

One `Budget` per server (`states.State.budget`). Each admission request takes a `Hold` for
its body (`with budget.hold(content_length) as held:`), adds bytes to it as they arrive
(`held.add`, which raises `Exceeded` past the bound) and gives them all back when it leaves
the `with`, however it leaves. Bytes are counted as they arrive, not as announced, so that
connections announcing large bodies and sending none hold nothing.

Two classes of review share the bound. Large ones (a Content-Length over `small_bytes`, or
none: chunked, which the API server never sends) may hold `max_bytes` between them. Small
ones may go `reserve_bytes` beyond it, and what they hold does not count against the large
ones, so that large reviews never get ordinary ones refused. Without the reserve, two 7 MiB
reviews filled 16 MiB and pods of a few KB were answered 429 (measured in bench/soak.py with
40 clients sending 7 MiB).
"""

from __future__ import annotations

from types import TracebackType

# Bytes of small reviews that may be in flight beyond the budget's `max_bytes`
# (--max-inflight-bytes). 4 MiB is hundreds of ordinary reviews.
SMALL_REVIEWS_RESERVE_BYTES = 4 * 1024 * 1024


class Exceeded(Exception):
    """A review's bytes would take the budget past its bound."""

    def __init__(self, others: int, limit: int) -> None:
        super().__init__(f"{others} bytes held by other reviews, the limit is {limit}")
        # Bytes held by the other reviews that count against `limit`, and the limit.
        self.others = others
        self.limit = limit


class Budget:
    """Review bytes in flight, of large and of small reviews (see the module docstring)."""

    __slots__ = ("large_held", "max_bytes", "reserve_bytes", "small_bytes", "small_held")

    def __init__(
        self,
        max_bytes: int,
        *,
        small_bytes: int,
        reserve_bytes: int = SMALL_REVIEWS_RESERVE_BYTES,
    ) -> None:
        self.max_bytes = max_bytes
        self.small_bytes = small_bytes
        self.reserve_bytes = reserve_bytes
        # Bytes held now, by large and by small reviews.
        self.large_held = 0
        self.small_held = 0

    def hold(self, announced: int | None) -> Hold:
        """A hold of nothing yet, for a body of `announced` bytes (its Content-Length).

        aiohttp reads no more than a Content-Length announces, so a body announced small
        stays small."""
        return Hold(self, small=announced is not None and announced <= self.small_bytes)


class Hold:
    """The bytes one request holds of a `Budget`; all given back on leaving its `with`."""

    __slots__ = ("_budget", "_released", "bytes", "small")

    def __init__(self, budget: Budget, *, small: bool) -> None:
        self._budget = budget
        self.small = small
        # Every byte this request has held (still there once given back).
        self.bytes = 0
        self._released = False

    def add(self, size: int) -> None:
        """Hold `size` more bytes; Exceeded when that takes this class past its limit (the
        bytes stay held until the hold is given back, as they have arrived)."""
        budget = self._budget
        self.bytes += size
        if self.small:
            budget.small_held += size
            counted = budget.large_held + budget.small_held
            limit = budget.max_bytes + budget.reserve_bytes
        else:
            budget.large_held += size
            counted = budget.large_held
            limit = budget.max_bytes
        if counted > limit:
            raise Exceeded(counted - self.bytes, limit)

    def release(self) -> None:
        """Give back every byte held (once: a second call gives back nothing)."""
        if self._released:
            return
        self._released = True
        if self.small:
            self._budget.small_held -= self.bytes
        else:
            self._budget.large_held -= self.bytes

    def __enter__(self) -> Hold:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
