"""The archive writer's retry schedule (``ferrox_stats.archive.retry``), on a clock we move."""

from __future__ import annotations

import pytest

from ferrox_stats.archive.retry import PROBE, RETRY, Retry


def test_nothing_waits_before_a_failure() -> None:
    retry = Retry(retry_max_s=30.0)
    assert not retry.waiting
    assert retry.due(0.0) == RETRY
    assert retry.wait_s(0.0) == 0.0


def test_failures_back_off_exponentially_up_to_retry_max_s() -> None:
    retry = Retry(retry_max_s=30.0, probe_s=1.0)
    backoffs = []
    for n in range(12):
        retry.failed(float(n))
        backoffs.append(retry.backoff)
    assert backoffs[:4] == pytest.approx([0.1, 0.2, 0.4, 0.8])
    assert backoffs[-1] == 30.0
    assert max(backoffs) == 30.0


def long_outage() -> Retry:
    """A schedule deep in an outage: the last failure at t=100 backed off 30 s."""
    retry = Retry(retry_max_s=30.0, probe_s=1.0)
    while retry.backoff < 30.0:
        retry.failed(100.0)
    return retry


def test_the_database_answering_again_makes_the_batch_due_within_a_probe() -> None:
    retry = long_outage()
    assert retry.due(100.5) is None
    assert retry.wait_s(100.0) == pytest.approx(1.0)
    now = 101.0
    for _ in range(10):  # still down: a probe a second, the batch waits
        assert retry.due(now) == PROBE
        retry.probed(now, answered=False)
        assert retry.due(now) is None
        assert retry.wait_s(now) == pytest.approx(1.0)
        now += 1.0
    assert retry.due(now) == PROBE
    retry.probed(now, answered=True)  # back at t=111, 19 s before the backoff ends
    assert retry.due(now) == RETRY
    assert retry.wait_s(now) == 0.0


def test_a_retry_that_fails_while_down_does_not_forget_the_failed_probes() -> None:
    retry = long_outage()
    retry.probed(101.0, answered=False)
    retry.failed(130.0)  # the retry, the database still down
    assert retry.due(131.0) == PROBE
    retry.probed(131.0, answered=True)
    assert retry.due(131.0) == RETRY


def test_one_early_retry_per_return_of_the_database() -> None:
    retry = long_outage()
    retry.probed(101.0, answered=False)
    retry.probed(102.0, answered=True)
    assert retry.due(102.0) == RETRY
    retry.failed(102.0)  # it answers, but the batch fails for its own reasons
    assert retry.due(103.0) == PROBE
    retry.probed(103.0, answered=True)
    assert retry.due(103.0) is None  # no retry a second: the backoff stands


def test_a_batch_that_fails_with_the_database_up_waits_its_backoff_out() -> None:
    retry = long_outage()
    assert retry.due(101.0) == PROBE
    retry.probed(101.0, answered=True)  # reachable all along: the batch is the problem
    assert retry.due(101.0) is None
    assert retry.wait_s(101.0) == pytest.approx(29.0)  # no more probes
    assert retry.due(130.0) == RETRY


def test_no_probe_when_the_backoff_is_shorter_than_a_probe() -> None:
    retry = Retry(retry_max_s=30.0, probe_s=1.0)
    retry.failed(0.0)
    assert retry.wait_s(0.0) == pytest.approx(0.1)
    assert retry.due(0.05) is None
    assert retry.due(0.1) == RETRY


def test_success_ends_the_backoff() -> None:
    retry = long_outage()
    retry.succeeded()
    assert not retry.waiting and retry.backoff == 0.0
    retry.failed(200.0)
    assert retry.backoff == pytest.approx(0.1)
