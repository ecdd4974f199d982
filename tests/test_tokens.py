"""Issuing, checking and revoking tokens (``ferrox_stats.tokens``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ferrox_stats import live, tokens
from ferrox_stats.breaker import RETRY_S, Unavailable
from ferrox_stats.models import ApiToken
from tests.conftest import FakeClock
from tests.faults import TokenDatabase

pytestmark = pytest.mark.django_db


def test_only_the_hash_is_stored_and_the_secret_is_recognisable() -> None:
    token, secret = tokens.issue("poller")
    assert secret.startswith("fxs_")
    assert token.secret_hash == tokens.hash_secret(secret)
    assert secret not in str(list(ApiToken.objects.values()))


@pytest.mark.parametrize("secret", ["", "sk-abc", "fxs_not-a-real-one"])
def test_unknown_secrets_are_refused(secret: str) -> None:
    tokens.issue("poller")
    assert tokens.check(secret) is None


def test_an_ingest_token_needs_a_replica() -> None:
    with pytest.raises(ValueError, match="replica"):
        tokens.issue("engine", ingest=True)


def test_a_checked_token_is_trusted_for_token_cache_s_without_a_query(
    recorder: live.Recorder, clock: FakeClock
) -> None:
    token, secret = tokens.issue("poller")
    assert tokens.check(secret) == token
    with CaptureQueriesContext(connection) as queries:
        assert tokens.check(secret) == token
    assert len(queries) == 0


def test_a_revocation_elsewhere_takes_effect_within_token_cache_s(
    recorder: live.Recorder, clock: FakeClock, settings: Any
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "TOKEN_CACHE_S": 5.0}
    token, secret = tokens.issue("poller")
    assert tokens.check(secret) == token
    # Another process revokes it: this one only learns from the token_db.
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    clock.advance(4.9)
    assert tokens.check(secret) == token
    clock.advance(0.2)
    assert tokens.check(secret) is None


def test_a_revocation_here_takes_effect_at_once(recorder: live.Recorder) -> None:
    token, secret = tokens.issue("poller")
    assert tokens.check(secret) == token
    tokens.revoke(token)
    assert tokens.check(secret) is None


def test_a_zero_cache_checks_every_time(recorder: live.Recorder, settings: Any) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "TOKEN_CACHE_S": 0}
    token, secret = tokens.issue("poller")
    tokens.check(secret)
    with CaptureQueriesContext(connection) as queries:
        assert tokens.check(secret) == token
    assert len(queries) == 1


def test_the_cache_is_bounded(recorder: live.Recorder) -> None:
    cache = tokens._RecentTokens()
    token = ApiToken(label="x")
    for n in range(cache.MAX + 10):
        cache.put(f"digest-{n}", 0.0, token)
    assert cache.get("digest-0", 0.0, 5.0) is None
    assert cache.get(f"digest-{cache.MAX + 9}", 0.0, 5.0) is token


# -- while the database is unreachable ------------------------------------------------


def test_a_checked_token_outlives_the_cache_while_the_database_is_down(
    recorder: live.Recorder, clock: FakeClock, token_db: TokenDatabase, inline_probes: None
) -> None:
    token, secret = tokens.issue("poller")
    assert tokens.check(secret) == token
    token_db.down = True
    clock.advance(60)
    assert tokens.check(secret) == token
    assert tokens.recently_checked(secret) == token  # the async path: no thread hop


def test_the_last_good_answer_lasts_token_stale_s_from_the_last_confirmation(
    recorder: live.Recorder,
    clock: FakeClock,
    token_db: TokenDatabase,
    inline_probes: None,
    settings: Any,
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "TOKEN_STALE_S": 300.0}
    token, secret = tokens.issue("poller")
    assert tokens.check(secret) == token
    token_db.down = True
    clock.advance(299.9)
    assert tokens.check(secret) == token
    clock.advance(0.2 + RETRY_S)
    with pytest.raises(Unavailable):
        tokens.check(secret)


def test_an_unknown_token_is_unavailable_and_the_database_is_not_asked_again_at_once(
    recorder: live.Recorder, clock: FakeClock, token_db: TokenDatabase, inline_probes: None
) -> None:
    _, secret = tokens.issue("poller")
    token_db.down = True
    with pytest.raises(Unavailable) as raised:
        tokens.check(secret)
    assert raised.value.retry_after_s >= 1
    assert token_db.lookups == 1
    for _ in range(100):
        with pytest.raises(Unavailable):
            tokens.check(secret)
    assert token_db.lookups == 1  # the breaker is open: nobody waits on the database


def test_one_caller_probes_after_retry_s_and_the_database_answering_closes_the_breaker(
    recorder: live.Recorder, clock: FakeClock, token_db: TokenDatabase, inline_probes: None
) -> None:
    token, secret = tokens.issue("poller")
    token_db.down = True
    with pytest.raises(Unavailable):
        tokens.check(secret)
    clock.advance(RETRY_S)
    with pytest.raises(Unavailable):
        tokens.check(secret)  # the probe, still failing
    assert token_db.lookups == 2
    token_db.down = False
    clock.advance(RETRY_S)
    assert tokens.check(secret) == token
    assert not tokens.outage.open
    assert token_db.lookups == 3


def test_a_token_revoked_once_the_database_answers_has_no_last_good_answer(
    recorder: live.Recorder, clock: FakeClock, token_db: TokenDatabase, inline_probes: None
) -> None:
    token, secret = tokens.issue("poller")
    assert tokens.check(secret) == token
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    clock.advance(6)
    assert tokens.check(secret) is None
    token_db.down = True
    clock.advance(6)
    with pytest.raises(Unavailable):
        tokens.check(secret)


def test_a_zero_stale_time_refuses_every_unconfirmed_token_during_an_outage(
    recorder: live.Recorder,
    clock: FakeClock,
    token_db: TokenDatabase,
    inline_probes: None,
    settings: Any,
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "TOKEN_CACHE_S": 5.0, "TOKEN_STALE_S": 0}
    token, secret = tokens.issue("poller")
    assert tokens.check(secret) == token
    token_db.down = True
    assert tokens.check(secret) == token  # within TOKEN_CACHE_S: not a stale answer
    clock.advance(5.1)
    with pytest.raises(Unavailable):
        tokens.check(secret)


def test_a_lookup_that_took_too_long_opens_the_breaker(
    recorder: live.Recorder, clock: FakeClock, token_db: TokenDatabase, inline_probes: None
) -> None:
    token, secret = tokens.issue("poller")
    assert tokens.check(secret) == token
    clock.advance(6)
    assert tokens.unanswered(secret) == token
    assert tokens.outage.open
    assert tokens.check(secret) == token
    assert token_db.lookups == 1


def _wall(clock: FakeClock) -> datetime:
    return datetime.fromtimestamp(clock.wall / 1000, tz=UTC)


def test_a_token_works_until_its_expiry_and_not_a_moment_after(
    recorder: live.Recorder, clock: FakeClock
) -> None:
    token, secret = tokens.issue("poller", expires_at=_wall(clock) + timedelta(seconds=60))
    assert tokens.check(secret) == token
    clock.advance(59.9)
    assert tokens.check(secret) == token
    clock.advance(0.1)
    assert tokens.check(secret) is None


def test_a_token_expiring_within_the_clocks_millisecond_is_already_refused(
    recorder: live.Recorder, clock: FakeClock
) -> None:
    # The wall clock reads whole milliseconds; an expiry is stored to the microsecond.
    # CI once saw a token expired at timezone.now() still accepted: the next request
    # read the same millisecond, floored below the expiry. Refusing up to a millisecond
    # early is the safe side.
    _, secret = tokens.issue("poller", expires_at=_wall(clock) + timedelta(microseconds=400))
    assert tokens.check(secret) is None
    assert tokens.recently_checked(secret) is None


def test_the_cache_never_serves_a_token_past_its_expiry(
    recorder: live.Recorder, clock: FakeClock, settings: Any
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "TOKEN_CACHE_S": 60.0}
    token, secret = tokens.issue("poller", expires_at=_wall(clock) + timedelta(seconds=2))
    assert tokens.check(secret) == token
    assert tokens.recently_checked(secret) == token
    clock.advance(2.0)  # well inside TOKEN_CACHE_S
    assert tokens.recently_checked(secret) is None
    assert tokens.check(secret) is None


def test_a_token_stops_working_when_its_owner_is_deactivated(
    recorder: live.Recorder, settings: Any, django_user_model: Any
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "TOKEN_CACHE_S": 0}
    owner = django_user_model.objects.create_user("alice")
    token, secret = tokens.issue("poller", owner=owner)
    assert tokens.check(secret) == token
    owner.is_active = False
    owner.save()
    assert tokens.check(secret) is None


def test_a_deleted_owners_tokens_stop_working(
    recorder: live.Recorder, settings: Any, django_user_model: Any
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "TOKEN_CACHE_S": 0}
    owner = django_user_model.objects.create_user("alice")
    token, secret = tokens.issue("poller", owner=owner)
    owner_id = owner.pk
    # Deleting the user never touches the token table (it may be another database's).
    owner.delete()
    assert tokens.check(secret) is None
    token.refresh_from_db()
    assert tokens.owner_name(token) == f"(deleted user {owner_id})"


def test_a_token_issued_before_owners_existed_keeps_working(recorder: live.Recorder) -> None:
    token, secret = tokens.issue("legacy")
    assert token.owner is None and token.expires_at is None
    assert tokens.check(secret) == token
