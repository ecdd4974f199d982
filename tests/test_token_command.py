"""``manage.py ferrox_stats_token`` (``ferrox_stats.management.commands.ferrox_stats_token``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from ferrox_stats.models import ApiToken
from ferrox_stats.tokens import check, hash_secret

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("ferrox_stats_token", *args, stdout=out)
    return out.getvalue()


def test_create_prints_the_secret_once_and_stores_only_its_hash() -> None:
    output = run("create", "engine-a", "--ingest", "gpu-a")
    header, secret, _ = output.split("\n")
    assert header == "Token 'engine-a' (read, ingest). Its secret, shown only now:"
    token = ApiToken.objects.get()
    assert secret not in str(list(ApiToken.objects.values()))
    assert token.secret_hash == hash_secret(secret)
    assert (token.replica, check(secret)) == ("gpu-a", token)


def test_an_infer_token_for_the_pass_through() -> None:
    output = run("create", "team-a", "--infer", "--no-read")
    assert output.split("\n")[0] == "Token 'team-a' (infer). Its secret, shown only now:"
    token = ApiToken.objects.get()
    assert (token.can_infer, token.can_read, token.can_ingest) == (True, False, False)


def test_list_shows_scopes_and_state_never_secrets() -> None:
    secret = run("create", "poller").split("\n")[1]
    run("create", "engine", "--ingest", "gpu-1", "--no-read")
    run("revoke", "poller")
    listing = run("list")
    prefix_poller = ApiToken.objects.get(label="poller").prefix
    prefix_engine = ApiToken.objects.get(label="engine").prefix
    assert listing == (
        f"engine\t{prefix_engine}…\tingest\tactive replica=gpu-1\n"
        f"poller\t{prefix_poller}…\tread\trevoked\n"
    )
    assert secret not in listing
    assert check(secret) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("create", "x", "--no-read"), "A token needs a scope"),
        (("revoke", "nobody"), "No token is labelled 'nobody'."),
    ],
)
def test_mistakes_are_command_errors(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run(*args)


def test_labels_are_unique() -> None:
    run("create", "twice")
    with pytest.raises(CommandError, match="already exists"):
        run("create", "twice")


def test_create_for_a_user_with_an_expiry_in_days(django_user_model: Any) -> None:
    alice = django_user_model.objects.create_user("alice")
    before = timezone.now()
    output = run("create", "poller", "--user", "alice", "--expires", "30")
    token = ApiToken.objects.get()
    assert token.owner == alice
    assert token.expires_at is not None
    assert before + timedelta(days=30) <= token.expires_at <= timezone.now() + timedelta(days=30)
    expires = token.expires_at.isoformat(timespec="seconds")
    assert output.split("\n")[0] == (
        f"Token 'poller' (read), owned by alice, expires {expires}. Its secret, shown only now:"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2030-01-02", datetime(2030, 1, 2, tzinfo=UTC)),
        ("2030-01-02T03:04", datetime(2030, 1, 2, 3, 4, tzinfo=UTC)),
        ("2030-01-02T03:04:00+02:00", datetime(2030, 1, 2, 1, 4, tzinfo=UTC)),
    ],
)
def test_create_with_an_expiry_date(value: str, expected: datetime) -> None:
    output = run("create", "poller", "--expires", value)
    assert output.split("\n")[0] == (
        f"Token 'poller' (read), expires {expected.isoformat()}. Its secret, shown only now:"
    )
    assert ApiToken.objects.get().expires_at == expected


def test_list_shows_owner_expiry_and_expired_tokens(django_user_model: Any) -> None:
    django_user_model.objects.create_user("alice")
    run("create", "later", "--user", "alice", "--expires", "2030-01-02")
    run("create", "over", "--expires", "1")
    ApiToken.objects.filter(label="over").update(
        expires_at=datetime(2026, 1, 1, tzinfo=UTC), created_at=datetime(2025, 1, 1, tzinfo=UTC)
    )
    later, over = (ApiToken.objects.get(label=label).prefix for label in ("later", "over"))
    assert run("list") == (
        f"later\t{later}…\tread\tactive owner=alice expires=2030-01-02T00:00:00+00:00\n"
        f"over\t{over}…\tread\texpired expires=2026-01-01T00:00:00+00:00\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--user", "nobody"), "No user is called 'nobody'."),
        (("--expires", "0"), "--expires needs at least 1 day."),
        (("--expires", "soon"), "--expires takes a number of days or an ISO date, not 'soon'."),
        (("--expires", "2020-01-01"), "--expires 2020-01-01 is already past."),
    ],
)
def test_bad_owner_or_expiry_is_a_command_error(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        run("create", "poller", *args)
    assert not ApiToken.objects.exists()
