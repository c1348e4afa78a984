"""The budget of review bytes in flight (transport/inflight.py), alone; tests/test_limits.py
holds it against the real server over TLS."""

from __future__ import annotations

import pytest

from webhook.transport import inflight

KIB = 1024


def budget() -> inflight.Budget:
    return inflight.Budget(100 * KIB, small_bytes=16 * KIB, reserve_bytes=20 * KIB)


@pytest.mark.parametrize(
    ("announced", "small"),
    [(0, True), (16 * KIB, True), (16 * KIB + 1, False), (None, False)],
    ids=["empty", "at-the-bound", "above-it", "chunked"],
)
def test_a_body_is_small_by_what_it_announces(announced: int | None, small: bool) -> None:
    assert budget().hold(announced).small is small


def test_large_reviews_share_the_bound_and_the_one_past_it_is_refused() -> None:
    shared = budget()
    with shared.hold(None) as first, shared.hold(None) as second:
        first.add(60 * KIB)
        with pytest.raises(inflight.Exceeded) as refused:
            second.add(41 * KIB)
        assert (refused.value.others, refused.value.limit) == (60 * KIB, 100 * KIB)
        # What arrived stays held until the request leaves.
        assert shared.large_held == 101 * KIB
    assert shared.large_held == shared.small_held == 0


def test_small_reviews_have_a_reserve_beyond_the_bound_and_no_more() -> None:
    shared = budget()
    with shared.hold(None) as large, shared.hold(10 * KIB) as small, shared.hold(10 * KIB) as last:
        large.add(100 * KIB)
        small.add(10 * KIB)  # within the reserve: large reviews do not lock small ones out
        assert (shared.large_held, shared.small_held) == (100 * KIB, 10 * KIB)
        last.add(10 * KIB)  # 120 KiB: the bound and the whole reserve
        with pytest.raises(inflight.Exceeded) as refused:
            last.add(1)
        assert refused.value.limit == 120 * KIB
    assert shared.large_held == shared.small_held == 0


def test_what_small_reviews_hold_does_not_count_against_large_ones() -> None:
    shared = budget()
    with shared.hold(10 * KIB) as small, shared.hold(None) as large:
        small.add(10 * KIB)
        large.add(100 * KIB)  # the whole bound, though small ones hold 10 KiB
        assert shared.large_held == 100 * KIB


def test_a_hold_given_back_twice_gives_back_once_and_keeps_its_count() -> None:
    shared = budget()
    with shared.hold(None) as other:
        other.add(5 * KIB)
        held = shared.hold(None)
        held.add(30 * KIB)
        held.release()
        held.release()
        assert shared.large_held == 5 * KIB
        assert held.bytes == 30 * KIB  # what the request took, for its trim
