"""``manage.py ferrox_stats_token`` (``ferrox_stats.management.commands.ferrox_stats_token``)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

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
