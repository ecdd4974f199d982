"""``manage.py ferrox_stats_token``: issue, list and revoke API tokens."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError

from ...conf import conf
from ...models import ApiToken
from ...tokens import issue, revoke


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
        actions.add_parser("list", help="List tokens (never their secrets).")
        revoke_parser = actions.add_parser("revoke", help="Revoke a token by its label.")
        revoke_parser.add_argument("label")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "create":
            self._create(
                options["label"], options["ingest"], not options["no_read"], options["infer"]
            )
        elif action == "list":
            self._list()
        else:
            self._revoke(options["label"])

    def _create(self, label: str, ingest_replica: str | None, read: bool, infer: bool) -> None:
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
            )
        except IntegrityError:
            raise CommandError(f"A token labelled {label!r} already exists.") from None
        scopes = ", ".join(_scopes(token))
        self.stdout.write(f"Token {label!r} ({scopes}). Its secret, shown only now:")
        self.stdout.write(secret)

    def _list(self) -> None:
        for token in ApiToken.objects.using(conf.ARCHIVE_DATABASE).order_by("label"):
            scopes = "+".join(_scopes(token))
            state = "revoked" if token.revoked_at else "active"
            replica = f" replica={token.replica}" if token.replica else ""
            self.stdout.write(f"{token.label}\t{token.prefix}…\t{scopes}\t{state}{replica}")

    def _revoke(self, label: str) -> None:
        token = ApiToken.objects.using(conf.ARCHIVE_DATABASE).filter(label=label).first()
        if token is None:
            raise CommandError(f"No token is labelled {label!r}.")
        revoke(token)
        self.stdout.write(f"Token {label!r} is revoked.")


def _scopes(token: ApiToken) -> list[str]:
    scopes = (("read", token.can_read), ("ingest", token.can_ingest), ("infer", token.can_infer))
    return [name for name, on in scopes if on]
