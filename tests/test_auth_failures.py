"""Failed authentications are throttled per client address (``ferrox_stats.auth_failures``):
the ledger itself, and the REST API's bearer tokens end to end."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from ferrox_stats import auth_failures, live, tokens
from ferrox_stats.auth_failures import Ledger, parse_rate
from ferrox_stats.tokens import hash_secret
from tests.api.conftest import PREFIX
from tests.conftest import FakeClock

STATS = f"{PREFIX}/v1/stats"


# -- the ledger, on explicit time -------------------------------------------------------


def failures(
    ledger: Ledger, address: str, now: float, n: int, rate: str = "3/minute"
) -> list[int | None]:
    """``n`` attempts with keys that do not verify: what ``admit`` answered each."""
    count, period = parse_rate(rate)
    answers = []
    for i in range(n):
        answer = ledger.admit(address, f"guess-{i}", now, count, period)
        if answer is None:
            ledger.settle(address, None, now, count, period)
        answers.append(answer)
    return answers


def test_the_budget_then_the_wait_until_one_more_attempt() -> None:
    ledger = Ledger(100, 100)
    # 3/minute: three at once, then one every 20 s.
    assert failures(ledger, "10.0.0.1", 0.0, 5) == [None, None, None, 20, 20]
    assert failures(ledger, "10.0.0.1", 5.0, 1) == [15]
    assert failures(ledger, "10.0.0.1", 19.5, 1) == [1]  # whole seconds, rounded up
    assert failures(ledger, "10.0.0.1", 20.0, 2) == [None, 20]
    # Refused attempts are not counted: the wait does not grow while a guesser insists.
    assert failures(ledger, "10.0.0.1", 40.0, 2) == [None, 20]
    # A minute of quiet restores the whole budget.
    assert failures(ledger, "10.0.0.1", 100.0, 4) == [None, None, None, 20]


def test_a_rate_that_does_not_divide_evenly_still_allows_n() -> None:
    # 60 / 7 is not exact in binary; the 7th failure must not be refused by rounding.
    assert failures(Ledger(100, 100), "a", 0.0, 8, "7/minute") == [None] * 7 + [9]


def test_addresses_are_counted_apart_and_ipv6_by_its_64() -> None:
    ledger = Ledger(100, 100)
    failures(ledger, "10.0.0.1", 0.0, 3)
    assert failures(ledger, "10.0.0.1", 0.0, 1) == [20]
    assert failures(ledger, "10.0.0.2", 0.0, 1) == [None]
    failures(ledger, "2001:db8:1:2::1", 0.0, 3)
    # Another host of the same /64 is the same budget; another /64 is not.
    assert failures(ledger, "2001:db8:1:2:ffff::9", 0.0, 1) == [20]
    assert failures(ledger, "2001:db8:1:3::1", 0.0, 1) == [None]
    # An IPv4 address written as IPv6 is that IPv4 address.
    assert failures(ledger, "::ffff:10.0.0.1", 0.0, 1) == [20]


def test_an_attempt_is_charged_before_its_check_and_refunded_when_it_verifies() -> None:
    ledger = Ledger(100, 100)
    # Three checks under way at once (none settled yet): a fourth must wait, or a burst
    # of concurrent guesses would all pass before the first failed.
    assert [ledger.admit("a", f"k{i}", 0.0, 3, 60.0) for i in range(4)] == [None] * 3 + [20]
    ledger.settle("a", hash_secret("k0"), 0.0, 3, 60.0)  # it verified: its charge comes back
    assert ledger.admit("a", "k4", 0.0, 3, 60.0) is None


def test_a_key_this_process_verified_passes_a_blocked_address() -> None:
    ledger = Ledger(100, 100)
    assert ledger.admit("nat", "good", 0.0, 3, 60.0) is None
    ledger.settle("nat", hash_secret("good"), 0.0, 3, 60.0)
    failures(ledger, "nat", 1.0, 3)  # someone else behind the same address
    assert ledger.admit("nat", "new-key", 1.0, 3, 60.0) == 20
    assert ledger.admit("nat", "good", 1.0, 3, 60.0) is None


def test_the_addresses_and_keys_tracked_are_bounded() -> None:
    ledger = Ledger(max_addresses=3, max_verified=2)
    for i in range(5):
        failures(ledger, f"10.0.0.{i}", 0.0, 3)
    assert len(ledger) == 3
    # The oldest were forgotten and start afresh; the newest are still blocked.
    assert failures(ledger, "10.0.0.0", 0.0, 1) == [None]
    assert failures(ledger, "10.0.0.4", 0.0, 1) == [20]
    for key in ("k1", "k2", "k3"):
        ledger.admit("x", key, 0.0, 100, 60.0)
        ledger.settle("x", hash_secret(key), 0.0, 100, 60.0)
    failures(ledger, "x", 0.0, 200, "100/minute")
    assert ledger.admit("x", "k1", 0.0, 100, 60.0) is not None  # forgotten
    assert ledger.admit("x", "k3", 0.0, 100, 60.0) is None
    assert (auth_failures.MAX_ADDRESSES, auth_failures.MAX_VERIFIED) == (10_000, 4096)


def test_a_key_that_verifies_leaves_nothing_behind() -> None:
    ledger = Ledger(100, 100)
    for i in range(50):
        assert ledger.admit(f"10.1.0.{i}", "good", 0.0, 3, 60.0) is None
        ledger.settle(f"10.1.0.{i}", hash_secret("good"), 0.0, 3, 60.0)
    assert len(ledger) == 0


@pytest.mark.parametrize(
    ("rate", "parsed"),
    [
        ("20/minute", (20, 60.0)),
        ("1/s", (1, 1.0)),
        ("5/hour", (5, 3600.0)),
        ("2/day", (2, 86400.0)),
    ],
)
def test_rates_parse_as_drf_reads_them(rate: str, parsed: tuple[int, float]) -> None:
    assert parse_rate(rate) == parsed


@pytest.mark.parametrize(
    "rate", ["0/minute", "-1/minute", "x/minute", "20", "20/fortnight", 20, ""]
)
def test_bad_rates_are_refused(rate: Any) -> None:
    with pytest.raises(ValueError):
        parse_rate(rate)


# -- the REST API's bearer tokens ---------------------------------------------------------


@pytest.fixture
def tight(settings: Any, recorder: live.Recorder) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "AUTH_FAILURE_RATE": "3/minute"}


def bearer(secret: str, address: str = "127.0.0.1", **extra: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=address, **extra)


def statuses(client: Client, n: int) -> list[int]:
    return [client.get(STATS).status_code for _ in range(n)]


@pytest.mark.django_db
def test_the_api_answers_429_with_retry_after_past_the_budget(
    tight: None, clock: FakeClock, django_assert_num_queries: Any
) -> None:
    guesser = bearer("fxs_guess")
    assert statuses(guesser, 3) == [401, 401, 401]
    response = guesser.get(STATS)
    assert response.status_code == 429
    assert response["Retry-After"] == "20"
    error = json.loads(response.content)["error"]
    assert (error["status"], error["code"]) == (429, "auth_throttled")
    assert "failed authentications" in error["message"]
    # A key new to this process from that address is not even checked: no query.
    _, secret = tokens.issue("poller")
    with django_assert_num_queries(0):
        assert bearer(secret).get(STATS).status_code == 429
    # Another address is not affected.
    assert bearer("fxs_guess", "10.0.0.2").get(STATS).status_code == 401
    # Time passes (the recorder's clock): one more attempt, then the wait again.
    clock.advance(20)
    assert bearer(secret).get(STATS).status_code == 200
    assert statuses(guesser, 2) == [401, 429]


@pytest.mark.django_db
def test_successful_authentications_do_not_count(tight: None) -> None:
    _, secret = tokens.issue("poller")
    assert statuses(bearer(secret), 10) == [200] * 10
    assert statuses(bearer("fxs_guess"), 4) == [401, 401, 401, 429]
    # The key verified before still passes the blocked address (a NAT shared with a
    # misconfigured client must not lock everyone out).
    assert statuses(bearer(secret), 2) == [200, 200]


@pytest.mark.django_db
def test_a_forwarded_for_header_is_ignored_unless_the_host_trusts_proxies(
    tight: None, settings: Any
) -> None:
    # Otherwise a guesser would send a new X-Forwarded-For with every guess.
    answers = [
        bearer("fxs_guess", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}").get(STATS).status_code
        for i in range(4)
    ]
    assert answers == [401, 401, 401, 429]
    # Behind one trusted proxy (DRF's NUM_PROXIES), the address it forwarded counts.
    settings.REST_FRAMEWORK = {**getattr(settings, "REST_FRAMEWORK", {}), "NUM_PROXIES": 1}
    behind = bearer("fxs_guess", HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert statuses(behind, 4) == [401, 401, 401, 429]
    assert bearer("fxs_guess", HTTP_X_FORWARDED_FOR="198.51.100.8").get(STATS).status_code == 401


@pytest.mark.django_db
def test_none_leaves_failures_unthrottled(settings: Any) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "AUTH_FAILURE_RATE": None}
    assert set(statuses(bearer("fxs_guess"), 30)) == {401}


@pytest.mark.django_db
def test_the_default_budget_is_twenty_a_minute(recorder: live.Recorder) -> None:
    assert statuses(bearer("fxs_guess"), 21) == [401] * 20 + [429]
    assert bearer("fxs_guess").get(STATS)["Retry-After"] == "3"
