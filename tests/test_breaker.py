"""The token database's circuit breaker (``ferrox_stats.breaker``), on times we pass in."""

from __future__ import annotations

from ferrox_stats.breaker import RETRY_S, Breaker


def test_closed_until_a_failure_and_no_probe_is_due_while_closed() -> None:
    breaker = Breaker()
    assert not breaker.open
    assert not breaker.claim_probe(0.0)


def test_one_probe_a_retry_s_once_open() -> None:
    breaker = Breaker()
    breaker.failed(10.0, ConnectionError())
    assert breaker.open
    assert not breaker.claim_probe(10.0 + RETRY_S / 2)
    assert breaker.claim_probe(10.0 + RETRY_S)
    assert not breaker.claim_probe(10.0 + RETRY_S)  # claimed: the others answer without it
    assert breaker.claim_probe(10.0 + 2 * RETRY_S)


def test_an_answer_closes_it() -> None:
    breaker = Breaker()
    breaker.failed(10.0, None)
    breaker.answered()
    assert not breaker.open
    assert not breaker.claim_probe(100.0)


def test_retry_after_is_whole_seconds_until_the_next_probe_at_least_one() -> None:
    breaker = Breaker()
    assert breaker.retry_after_s(0.0) == 1
    breaker.failed(10.0, None)
    assert breaker.retry_after_s(10.0) == 1
    assert breaker.retry_after_s(10.9) == 1
    assert breaker.retry_after_s(50.0) == 1
