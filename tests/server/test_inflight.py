"""The budget of review bytes in flight (transport/inflight.py), alone; tests/server/test_limits.py
holds it against the real server over TLS."""

from __future__ import annotations

import asyncio

import pytest

from webhook.server import inflight

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


# --- per source address


def per_source() -> inflight.Budget:
    return inflight.Budget(
        100 * KIB, small_bytes=16 * KIB, reserve_bytes=20 * KIB, per_source_bytes=50 * KIB
    )


def test_one_address_holds_at_most_its_bound_and_the_others_go_on() -> None:
    shared = per_source()
    with shared.hold(None, "10.0.0.1") as large, shared.hold(8 * KIB, "10.0.0.1") as small:
        large.add(45 * KIB)
        with pytest.raises(inflight.Exceeded) as refused:
            small.add(8 * KIB)  # small and large of one address count together
        assert refused.value.source == "10.0.0.1"
        assert (refused.value.others, refused.value.limit) == (45 * KIB, 50 * KIB)
        with shared.hold(None, "10.0.0.2") as other:
            other.add(50 * KIB)  # another address: its own bound, the total has room
        assert shared.by_source == {"10.0.0.1": 53 * KIB}
    assert shared.by_source == {}
    assert shared.large_held == shared.small_held == 0


def test_without_a_bound_per_address_none_is_kept() -> None:
    shared = budget()
    with shared.hold(None, "10.0.0.1") as held:
        held.add(90 * KIB)
    assert shared.by_source == {}


def test_large_shares_let_a_burst_pass_and_then_hold_an_address_to_its_share() -> None:
    shares = inflight.LargeShares(0.25, burst=1.0)
    shares.charge("a", 0.6, now=0.0)
    assert shares.wait("a", now=0.0) == 0  # within the burst
    shares.charge("a", 0.9, now=0.0)  # owes 1.5 s: 0.5 s beyond the burst
    assert shares.wait("a", now=0.0) == pytest.approx(2.0)  # paid back at 0.25 s a second
    assert shares.wait("a", now=1.0) == pytest.approx(1.0)
    assert shares.wait("a", now=2.0) == 0
    assert shares.wait("b", now=0.0) == 0  # another address owes nothing
    # Paid back, not below zero: idle time is not saved up for a later flood.
    shares.charge("a", 1.2, now=100.0)
    assert shares.wait("a", now=100.0) == pytest.approx(0.8)


def test_large_shares_forget_addresses_that_owe_nothing() -> None:
    shares = inflight.LargeShares(0.5, burst=1.0)
    for number in range(inflight.LargeShares.PRUNE_AT):
        shares.charge(f"10.0.{number // 256}.{number % 256}", 0.1, now=0.0)
    shares.charge("owing", 5.0, now=0.0)
    assert len(shares) == 1 + inflight.LargeShares.PRUNE_AT
    shares.charge("late", 0.1, now=1.0)  # the others have paid by now
    assert len(shares) == 2
    assert shares.wait("owing", now=1.0) == pytest.approx((5.0 - 0.5 - 1.0) / 0.5)


@pytest.mark.parametrize(("seconds", "header"), [(0.0, "1"), (0.2, "1"), (1.0, "1"), (2.01, "3")])
def test_retry_after_is_whole_seconds_and_at_least_one(seconds: float, header: str) -> None:
    assert inflight.retry_after(seconds) == header


# --- large reviews take turns per address


async def test_the_large_reviews_of_one_address_take_turns_and_others_do_not_wait() -> None:
    # Room for one waiting review of unknown size.
    turns = inflight.LargeTurns(
        inflight.LargeShares(0.25), waiting_bytes=inflight.LargeTurns.WAITING_WEIGHT_CAP
    )
    await turns.enter("a", 1.0)
    second = asyncio.create_task(turns.enter("a", 5.0))
    await asyncio.sleep(0.01)
    assert not second.done()  # waits for the first
    await asyncio.wait_for(turns.enter("b", 0.1), 1)  # another address: its own turn
    with pytest.raises(inflight.Busy, match="2 large reviews from a are being received"):
        await turns.enter("a", 5.0)  # one in progress and one waiting already
    turns.leave("a")
    await asyncio.wait_for(second, 1)  # the turn is handed on
    turns.leave("a")
    turns.leave("b")
    assert len(turns) == 0


async def test_a_large_review_that_gets_no_turn_in_time_is_busy_and_leaves_no_trace() -> None:
    turns = inflight.LargeTurns(inflight.LargeShares(0.25))
    await turns.enter("a", 1.0)
    with pytest.raises(inflight.Busy, match=r"did not leave it a turn within 0\.1 s"):
        await turns.enter("a", 0.1)
    turns.leave("a")
    assert len(turns) == 0


async def test_an_address_over_its_share_waits_it_out_or_is_told_how_long() -> None:
    shares = inflight.LargeShares(0.5, burst=1.0)
    turns = inflight.LargeTurns(shares)
    shares.charge("a", 1.05)  # 0.1 s to wait
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(turns.enter("a", 2.0), 1)
    assert loop.time() - started >= 0.09  # it waited the owed time out
    turns.leave("a")
    shares.charge("a", 3.0)  # about 6 s to wait: more than it may
    with pytest.raises(inflight.Busy) as busy:
        await turns.enter("a", 2.0)
    assert busy.value.share
    assert busy.value.wait > 2.0
    assert len(turns) == 0


def test_a_refusal_at_the_total_bound_leaves_the_address_count_right() -> None:
    shared = per_source()
    with shared.hold(None, "a") as first:
        first.add(45 * KIB)
        with shared.hold(None, "b") as other:
            other.add(50 * KIB)
            with shared.hold(None, "a") as refused:
                with pytest.raises(inflight.Exceeded) as exceeded:
                    refused.add(10 * KIB)  # 105 KiB: past the 100 KiB of large reviews
                assert exceeded.value.source is None
        assert shared.by_source == {"a": 45 * KIB}
        with shared.hold(None, "a") as more, pytest.raises(inflight.Exceeded) as per_address:
            more.add(10 * KIB)  # 55 KiB of the address's 50
        assert per_address.value.source == "a"
    assert shared.by_source == {}
