"""The review bytes a server is receiving or reviewing at once, and their bound.

One `Budget` per server (`states.State.budget`). Each admission request takes a `Hold` for
its body (`with budget.hold(content_length) as held:`), adds bytes to it as they arrive
(`held.add`, which raises `Exceeded` past the bound) and gives them all back when it leaves
the `with`, however it leaves. Bytes are counted as they arrive, not as announced, so that
connections announcing large bodies and sending none hold nothing.

Each source address may hold at most `per_source_bytes` of it, small and large reviews
together, so whatever one address holds, the others keep at least the reserve of small
reviews (below). And the large reviews of one address may take only a share of one core
(`LargeShares`): what a body costs is mostly its review, on a thread, which contends with the
event loop for the GIL; without the share, one address sending 7 MiB reviews back to back
keeps a large review running all the time.

Two classes of review share the bound. Large ones (a Content-Length over `small_bytes`, or
none: chunked, which the API server never sends) may hold `max_bytes` between them. Small
ones may go `reserve_bytes` beyond it, and what they hold does not count against the large
ones, so that large reviews never get ordinary ones refused. Without the reserve, two 7 MiB
reviews filled 16 MiB and pods of a few KB were answered 429 (measured in bench/soak.py with
40 clients sending 7 MiB).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections import deque
from types import TracebackType

# Bytes of small reviews that may be in flight beyond the budget's `max_bytes`
# (--max-inflight-bytes). 4 MiB is hundreds of ordinary reviews.
SMALL_REVIEWS_RESERVE_BYTES = 4 * 1024 * 1024


class Exceeded(Exception):
    """A review's bytes would take the budget past its bound (the bound of its source
    address when `source` is given)."""

    def __init__(self, others: int, limit: int, source: str | None = None) -> None:
        super().__init__(f"{others} bytes held by other reviews, the limit is {limit}")
        # Bytes held by the other reviews that count against `limit`, and the limit.
        self.others = others
        self.limit = limit
        self.source = source


# What receiving a review's body costs the event loop (the socket reads, TLS decryption and
# the copies into one `bytes`), counted against its address's share with the CPU time of its
# review. Measured with py-spy on bench/fairness.py's flood (7 MiB bodies over TLS on
# loopback, uvloop): ~40 ms of the loop's time per body, ~5.5 ms per MiB, more than the review
# of such a body (~7 ms). Charged by bytes, a little under that: a faster machine is held to
# a little less than its share, a slower one to a little more.
RECEIVE_SECONDS_PER_BYTE = 0.004 / (1024 * 1024)
# What refusing a large review costs (its connection's TLS handshake, the part of its body
# read with its headers, the answer): measured ~3 ms on the same flood. Counted against its
# address's share, so that an address whose large reviews are refused and who reconnects at
# once is held to its share too: it then begins no handshake until it is back within it.
REFUSAL_SECONDS = 0.003


class LargeShares:
    """How much of one core the large reviews of each source address have taken lately.

    A token bucket in CPU seconds: each large review adds the CPU time its thread spent
    (`charge`), and what an address owes goes down by `share` every second. An address
    that owes more than `burst` seconds gets its next large review refused (`wait` says for
    how long), so on average its large reviews take at most `share` of a core, while a
    burst of up to `burst` seconds of them (a few dozen of a megabyte) passes at once.
    """

    __slots__ = ("_lock", "_owed", "burst", "share")

    # Addresses remembered before the paid-up ones are forgotten.
    PRUNE_AT = 1024

    def __init__(self, share: float, *, burst: float = 1.0) -> None:
        self.share = share
        self.burst = burst
        # Per address: CPU seconds owed, as of a time.monotonic().
        self._owed: dict[str, tuple[float, float]] = {}
        # `charge` runs on the review threads.
        self._lock = threading.Lock()

    def _now_owed(self, source: str, now: float) -> float:
        owed, at = self._owed.get(source, (0.0, now))
        return max(0.0, owed - (now - at) * self.share)

    def wait(self, source: str, now: float | None = None) -> float:
        """Seconds until `source` may start a large review again (0: now)."""
        now = time.monotonic() if now is None else now
        over = self._now_owed(source, now) - self.burst
        return over / self.share if over > 0 else 0.0

    def charge(self, source: str, seconds: float, now: float | None = None) -> None:
        """Add a large review's CPU seconds to what `source` owes."""
        now = time.monotonic() if now is None else now
        owed = self._owed
        with self._lock:
            if len(owed) >= self.PRUNE_AT:
                for address in [a for a in owed if self._now_owed(a, now) == 0.0]:
                    del owed[address]
            owed[source] = (self._now_owed(source, now) + seconds, now)

    def __len__(self) -> int:
        return len(self._owed)


class Busy(Exception):
    """A large review cannot have its turn in time (`LargeTurns.enter`); `wait` is how long
    its address should wait before it tries again."""

    def __init__(self, reason: str, wait: float, *, share: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wait = wait
        # Its address's share of a core, not its turns, stands in the way.
        self.share = share


class _Lane:
    """The large reviews of one address: whether one has its turn, and who waits (and what
    they weigh)."""

    __slots__ = ("busy", "waiters", "weight")

    def __init__(self) -> None:
        self.busy = False
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.weight = 0


class LargeTurns:
    """Large reviews take turns per source address: one at a time for each address, at most
    `waiting_bytes` of them waiting (429 beyond), and none started while its address owes more than
    the burst of its share (`LargeShares`), which it then waits out when it can.

    Waiting costs nothing but the connection: the body is not read until the turn comes
    (aiohttp stops reading a connection whose body is not being read beyond 64 KiB). So one
    address sending many large reviews at once has one being received and reviewed, and the
    bytes of the others wait in the network, instead of all being received at once, each
    holding part of the in-flight budget until none of them fits (which refused them all).
    """

    __slots__ = ("_lanes", "shares", "waiting_bytes")

    # What the waiting reviews of one address may weigh: each holds what aiohttp and the TLS
    # layer read of its body before they stop reading, at most its size and at most
    # `WAITING_WEIGHT_CAP` (a few hundred KiB): 16 at the body limit, hundreds of 16 KiB.
    WAITING_BYTES = 8 * 1024 * 1024
    WAITING_WEIGHT_CAP = 512 * 1024

    def __init__(self, shares: LargeShares, *, waiting_bytes: int = WAITING_BYTES) -> None:
        self.shares = shares
        self.waiting_bytes = waiting_bytes
        self._lanes: dict[str, _Lane] = {}

    def __len__(self) -> int:
        return len(self._lanes)

    async def enter(self, source: str, within: float, size: int | None = None) -> None:
        """Wait for `source`'s turn, at most `within` seconds, for a body of `size` bytes
        (None: unknown, chunked); Busy when it cannot come in time. Each `enter` that returns
        is followed by one `leave`."""
        lane = self._lanes.get(source)
        if lane is None:
            lane = self._lanes[source] = _Lane()
        if lane.busy:
            weight = min(
                size if size is not None else self.WAITING_WEIGHT_CAP, self.WAITING_WEIGHT_CAP
            )
            if lane.weight + weight > self.waiting_bytes or within <= 0:
                raise Busy(
                    f"{len(lane.waiters) + 1} large reviews from {source} are being received,"
                    " reviewed or waiting",
                    1.0,
                )
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            lane.waiters.append(waiter)
            lane.weight += weight
            try:
                await asyncio.wait_for(asyncio.shield(waiter), within)
            except (TimeoutError, asyncio.CancelledError) as ended:
                if waiter.done() and not waiter.cancelled():
                    self.leave(source)  # the turn came just as the wait ended: pass it on
                else:
                    waiter.cancel()
                    with contextlib.suppress(ValueError):
                        lane.waiters.remove(waiter)
                    self._forget(source, lane)
                if isinstance(ended, asyncio.CancelledError):
                    raise
                raise Busy(
                    f"the large reviews from {source} before this one did not leave it a turn"
                    f" within {within:.1f} s",
                    1.0,
                ) from None
            finally:
                lane.weight -= weight
        else:
            lane.busy = True
        owed = self.shares.wait(source)
        if owed <= 0:
            return
        if owed >= within:
            self.leave(source)
            raise Busy(
                f"the large reviews from {source} took more than {self.shares.share:.0%} of"
                f" a core lately: retry in {owed:.1f} s",
                owed,
                share=True,
            )
        try:
            await asyncio.sleep(owed)
        except BaseException:
            self.leave(source)
            raise

    def leave(self, source: str) -> None:
        """End `source`'s turn: the next waiting one of it has its turn."""
        lane = self._lanes.get(source)
        if lane is None:
            return
        while lane.waiters:
            waiter = lane.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the lane stays busy: the turn is handed on
                return
        lane.busy = False
        self._forget(source, lane)

    def _forget(self, source: str, lane: _Lane) -> None:
        if not lane.busy and not lane.waiters and self._lanes.get(source) is lane:
            del self._lanes[source]


def retry_after(seconds: float) -> str:
    """A Retry-After header's value for a wait of `seconds`: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))


class Budget:
    """Review bytes in flight, of large and of small reviews (see the module docstring)."""

    __slots__ = (
        "by_source",
        "large_held",
        "max_bytes",
        "per_source_bytes",
        "reserve_bytes",
        "shares",
        "small_bytes",
        "small_held",
        "turns",
    )

    def __init__(
        self,
        max_bytes: int,
        *,
        small_bytes: int,
        reserve_bytes: int = SMALL_REVIEWS_RESERVE_BYTES,
        per_source_bytes: int | None = None,
        large_share: float = 1.0,
    ) -> None:
        self.max_bytes = max_bytes
        self.small_bytes = small_bytes
        self.reserve_bytes = reserve_bytes
        # None: no bound per address.
        self.per_source_bytes = per_source_bytes
        self.shares = LargeShares(large_share)
        self.turns = LargeTurns(self.shares)
        # Bytes held now, by large and by small reviews, and by each source address.
        self.large_held = 0
        self.small_held = 0
        self.by_source: dict[str, int] = {}

    def hold(self, announced: int | None, source: str = "") -> Hold:
        """A hold of nothing yet, for a body of `announced` bytes (its Content-Length) from
        the address `source`.

        aiohttp reads no more than a Content-Length announces, so a body announced small
        stays small."""
        small = announced is not None and announced <= self.small_bytes
        return Hold(self, small=small, source=source)


class Hold:
    """The bytes one request holds of a `Budget`; all given back on leaving its `with`."""

    __slots__ = ("_budget", "_kept", "_released", "bytes", "small", "source")

    def __init__(self, budget: Budget, *, small: bool, source: str = "") -> None:
        self._budget = budget
        self.small = small
        self.source = source
        # Every byte this request has held (still there once given back).
        self.bytes = 0
        self._released = False
        # Leaving the `with` does not give the bytes back (`keep`).
        self._kept = False

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
        # Each byte added here is given back by `release`: the address's count too, before
        # any refusal.
        from_source = 0
        if size and budget.per_source_bytes is not None:
            from_source = budget.by_source.get(self.source, 0) + size
            budget.by_source[self.source] = from_source
        if counted > limit:
            raise Exceeded(counted - self.bytes, limit)
        if budget.per_source_bytes is not None and from_source > budget.per_source_bytes:
            raise Exceeded(from_source - self.bytes, budget.per_source_bytes, self.source)

    def release(self) -> None:
        """Give back every byte held (once: a second call gives back nothing)."""
        if self._released:
            return
        self._released = True
        budget = self._budget
        if self.small:
            budget.small_held -= self.bytes
        else:
            budget.large_held -= self.bytes
        if self.bytes and budget.per_source_bytes is not None:
            left = budget.by_source.get(self.source, 0) - self.bytes
            if left > 0:
                budget.by_source[self.source] = left
            else:
                budget.by_source.pop(self.source, None)

    def keep(self) -> None:
        """Leaving the `with` gives nothing back: the bytes are still in use (a review on a
        thread that outlived its request); `release` gives them back later."""
        self._kept = True

    def __enter__(self) -> Hold:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self._kept:
            self.release()
