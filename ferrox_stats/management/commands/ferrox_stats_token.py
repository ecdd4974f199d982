"""``manage.py ferrox_stats_token``: issue, list and revoke API tokens."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError
from django.utils import timezone

from ...conf import conf
from ...models import ApiToken
from ...tokens import issue, owner_name, revoke


class Command(BaseCommand):
    help = "Issue, list and revoke ferrox_stats API tokens (the secret is shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="Issue a token and print its secret once.")
        create.add_argument("label", help="What the token is called in logs and the admin.")
        create.add_argument(
            "--ingest", metavar="REPLICA", help="Allow ingest, attributing records to REPLICA."
        )
        create.add_argument(
            "--infer",
            action="store_true",
            help="Allow calls to the OpenAI-compatible pass-through.",
        )
        create.add_argument("--no-read", action="store_true", help="Without the read scope.")
        create.add_argument(
            "--user",
            metavar="USERNAME",
            help="The user the token acts for (it stops working when they are inactive).",
        )
        create.add_argument(
            "--expires",
            metavar="DAYS|DATE",
            help="Expire after DAYS days, or at an ISO date (00:00 in TIME_ZONE) or datetime.",
        )
        actions.add_parser("list", help="List tokens (never their secrets).")
        revoke_parser = actions.add_parser("revoke", help="Revoke a token by its label.")
        revoke_parser.add_argument("label")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "create":
            self._create(
                options["label"],
                options["ingest"],
                not options["no_read"],
                options["infer"],
                _user(options["user"]),
                _expiry(options["expires"], timezone.now()),
            )
        elif action == "list":
            self._list()
        else:
            self._revoke(options["label"])

    def _create(
        self,
        label: str,
        ingest_replica: str | None,
        read: bool,
        infer: bool,
        owner: Any,
        expires_at: datetime | None,
    ) -> None:
        if not (read or ingest_replica or infer):
            raise CommandError(
                "A token needs a scope: drop --no-read, or add --ingest REPLICA or --infer."
            )
        try:
            token, secret = issue(
                label,
                read=read,
                ingest=bool(ingest_replica),
                infer=infer,
                replica=ingest_replica or "",
                owner=owner,
                expires_at=expires_at,
            )
        except IntegrityError:
            raise CommandError(f"A token labelled {label!r} already exists.") from None
        scopes = ", ".join(_scopes(token))
        about = "".join(
            [
                f", owned by {owner.get_username()}" if owner is not None else "",
                f", expires {_moment(expires_at)}" if expires_at is not None else "",
            ]
        )
        self.stdout.write(f"Token {label!r} ({scopes}){about}. Its secret, shown only now:")
        self.stdout.write(secret)

    def _list(self) -> None:
        now = timezone.now()
        for token in ApiToken.objects.using(conf.ARCHIVE_DATABASE).order_by("label"):
            scopes = "+".join(_scopes(token))
            if token.revoked_at:
                state = "revoked"
            elif token.expires_at is not None and token.expires_at <= now:
                state = "expired"
            else:
                state = "active"
            extra = "".join(
                [
                    f" replica={token.replica}" if token.replica else "",
                    f" owner={owner_name(token)}" if token.owner_id is not None else "",
                    f" expires={_moment(token.expires_at)}" if token.expires_at else "",
                ]
            )
            self.stdout.write(f"{token.label}\t{token.prefix}…\t{scopes}\t{state}{extra}")

    def _revoke(self, label: str) -> None:
        token = ApiToken.objects.using(conf.ARCHIVE_DATABASE).filter(label=label).first()
        if token is None:
            raise CommandError(f"No token is labelled {label!r}.")
        revoke(token)
        self.stdout.write(f"Token {label!r} is revoked.")


def _scopes(token: ApiToken) -> list[str]:
    scopes = (("read", token.can_read), ("ingest", token.can_ingest), ("infer", token.can_infer))
    return [name for name, on in scopes if on]


def _moment(moment: datetime) -> str:
    """In the current time zone (TIME_ZONE), to the second."""
    return timezone.localtime(moment).isoformat(timespec="seconds")


def _user(username: str | None) -> Any:
    if username is None:
        return None
    User = get_user_model()
    try:
        return User._default_manager.get_by_natural_key(username)
    except User.DoesNotExist:
        raise CommandError(f"No user is called {username!r}.") from None


def _expiry(value: str | None, now: datetime) -> datetime | None:
    """``--expires``: a whole number of days from ``now``, or an ISO date or datetime
    (naive ones are in the current time zone); never a moment already past."""
    if value is None:
        return None
    if value.isdigit():
        if int(value) < 1:
            raise CommandError("--expires needs at least 1 day.")
        expires = now + timedelta(days=int(value))
    else:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise CommandError(
                f"--expires takes a number of days or an ISO date, not {value!r}."
            ) from None
        if len(value) <= len("YYYY-MM-DD"):  # a date: its first moment
            parsed = datetime.combine(date.fromisoformat(value), time())
        expires = timezone.make_aware(parsed) if timezone.is_naive(parsed) else parsed
    if expires <= now:
        raise CommandError(f"--expires {value} is already past.")
    return expires
