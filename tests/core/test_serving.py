"""ServingStats: FreeToken's counting rules for in-flight, completed and aborted requests."""

from __future__ import annotations

import pytest

from ferrox_stats.core.serving import ServingStats


def test_begin_puts_request_in_flight() -> None:
    stats = ServingStats()
    stats.begin("a")
    assert stats.active == 1
    assert stats.is_inflight("a")
    assert stats.snapshot(0.0).active == 1


def test_abort_defaults_to_client_disconnect() -> None:
    stats = ServingStats()
    stats.begin("a")
    assert stats.abort("a") is True
    assert stats.snapshot(0.0).aborts == {"client_disconnect": 1}


@pytest.mark.parametrize("reason", ["client_disconnect", "explicit", "timeout", "custom"])
def test_any_abort_reason_counts_under_its_own_key(reason: str) -> None:
    stats = ServingStats()
    stats.begin("a")
    stats.abort("a", reason)
    assert stats.snapshot(0.0).aborts == {reason: 1}


def test_aborted_request_stays_in_flight_until_finish() -> None:
    stats = ServingStats()
    stats.begin("a")
    stats.abort("a", "timeout")
    assert stats.active == 1
    assert stats.finish("a") is True
    assert stats.active == 0


@pytest.mark.parametrize("error", [False, True])
def test_finish_of_aborting_request_counts_nothing_more(error: bool) -> None:
    stats = ServingStats()
    stats.begin("a")
    stats.abort("a", "explicit")
    stats.finish("a", error=error)
    snap = stats.snapshot(0.0)
    assert snap.completed == 0
    assert snap.aborts == {"explicit": 1}


def test_failed_request_counts_as_completed_and_as_error_abort() -> None:
    stats = ServingStats()
    stats.begin("a")
    stats.finish("a", error=True)
    snap = stats.snapshot(0.0)
    assert (snap.active, snap.completed, snap.aborts) == (0, 1, {"error": 1})


def test_successful_request_counts_completed_only() -> None:
    stats = ServingStats()
    stats.begin("a")
    stats.finish("a")
    snap = stats.snapshot(0.0)
    assert (snap.active, snap.completed, snap.aborts) == (0, 1, {})


def test_double_abort_counts_once() -> None:
    stats = ServingStats()
    stats.begin("a")
    assert stats.abort("a", "timeout") is True
    assert stats.abort("a", "explicit") is False
    assert stats.snapshot(0.0).aborts == {"timeout": 1}


def test_abort_of_request_not_in_flight_counts_nothing() -> None:
    stats = ServingStats()
    stats.begin("a")
    stats.finish("a")
    assert stats.abort("a") is False
    assert stats.abort("never") is False
    assert stats.snapshot(0.0).aborts == {}


def test_finish_of_unknown_key_is_refused_and_active_never_negative() -> None:
    stats = ServingStats()
    assert stats.finish("never") is False
    stats.begin("a")
    stats.finish("a")
    assert stats.finish("a") is False
    snap = stats.snapshot(0.0)
    assert (snap.active, snap.completed) == (0, 1)


def test_begin_of_key_already_in_flight_raises() -> None:
    stats = ServingStats()
    stats.begin("a")
    with pytest.raises(ValueError, match="already in flight"):
        stats.begin("a")
    assert stats.active == 1


def test_key_can_begin_again_after_it_finished() -> None:
    stats = ServingStats()
    stats.begin("a")
    stats.finish("a")
    stats.begin("a")
    assert stats.active == 1


def test_token_totals_grow_by_observed_deltas() -> None:
    stats = ServingStats()
    stats.observe_tokens(1.0, prompt=12)
    stats.observe_tokens(1.5, completion=3)
    stats.observe_tokens(2.0, prompt=0, completion=4)
    snap = stats.snapshot(2.0)
    assert (snap.prompt_tokens_total, snap.completion_tokens_total) == (12, 7)


def test_token_deltas_feed_decode_and_prefill_rates() -> None:
    stats = ServingStats(window_s=5.0)
    stats.observe_tokens(100.0, prompt=30, completion=4)
    snap = stats.snapshot(101.0)
    assert snap.decode is not None
    assert snap.prefill is not None
    assert snap.decode.per_second == 4.0
    assert snap.prefill.per_second == 30.0


def test_totals_outlive_the_rate_window() -> None:
    stats = ServingStats(window_s=5.0)
    stats.observe_tokens(0.0, prompt=8, completion=9)
    snap = stats.snapshot(100.0)
    assert (snap.prompt_tokens_total, snap.completion_tokens_total) == (8, 9)
    assert snap.decode is not None
    assert snap.decode.per_second == 0.0


@pytest.mark.parametrize(("prompt", "completion"), [(-1, 0), (0, -1), (5, -1)])
def test_negative_token_deltas_refused_and_change_nothing(prompt: int, completion: int) -> None:
    stats = ServingStats()
    with pytest.raises(ValueError):
        stats.observe_tokens(0.0, prompt=prompt, completion=completion)
    snap = stats.snapshot(0.0)
    assert (snap.prompt_tokens_total, snap.completion_tokens_total) == (0, 0)


def test_aborted_requests_partial_tokens_count_in_totals() -> None:
    stats = ServingStats()
    stats.begin("a")
    stats.observe_tokens(1.0, prompt=20, completion=5)
    stats.abort("a")
    stats.finish("a")
    snap = stats.snapshot(1.0)
    assert (snap.prompt_tokens_total, snap.completion_tokens_total) == (20, 5)
    assert snap.completed == 0


def test_snapshot_aborts_is_a_copy() -> None:
    stats = ServingStats()
    stats.begin("a")
    stats.abort("a")
    stats.snapshot(0.0).aborts["client_disconnect"] = 99
    assert stats.snapshot(0.0).aborts == {"client_disconnect": 1}


def test_a_request_reported_after_it_finished_counts_by_the_same_rules() -> None:
    stats = ServingStats()
    stats.count_finished()
    stats.count_finished(error=True)
    stats.count_finished(aborted="client_disconnect", error=True)
    snapshot = stats.snapshot(0.0)
    assert (snapshot.active, snapshot.completed) == (0, 2)
    assert snapshot.aborts == {"error": 1, "client_disconnect": 1}


def test_leave_takes_a_key_out_of_flight_and_says_whether_it_was_aborting() -> None:
    stats = ServingStats()
    stats.begin("a")
    stats.begin("b")
    stats.abort("b", "timeout")
    assert (stats.leave("a"), stats.leave("b"), stats.leave("c")) == (False, True, None)
    assert stats.active == 0
    # Leaving counts nothing: the caller counts it (the recorder, when it folds).
    assert (stats.snapshot(0.0).completed, stats.snapshot(0.0).aborts) == (0, {"timeout": 1})


def test_an_abort_after_leave_counts_nothing_and_puts_nothing_back_in_flight() -> None:
    stats = ServingStats()
    stats.begin("a")
    stats.leave("a")
    assert stats.abort("a") is False
    assert (stats.active, stats.is_inflight("a"), stats.snapshot(0.0).aborts) == (0, False, {})


def test_batched_updates_count_as_the_calls_one_by_one() -> None:
    one_by_one, batched = ServingStats(), ServingStats()
    reports = [(1.0, 5, 0), (1.5, 0, 3), (2.0, 7, 2)]
    for now, prompt, completion in reports:
        one_by_one.observe_tokens(now, prompt, completion)
    one_by_one.count_finished()
    one_by_one.count_finished(error=True)
    with batched.lock:
        batched.observe_many_locked(
            [(now, p) for now, p, _ in reports if p], [(now, c) for now, _, c in reports if c]
        )
        batched.count_completed_locked(2, 1)
    assert batched.snapshot(2.5) == one_by_one.snapshot(2.5)
