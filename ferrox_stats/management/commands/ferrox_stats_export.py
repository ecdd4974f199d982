"""``manage.py ferrox_stats_export``: stream archived finished requests as CSV or JSONL."""

from __future__ import annotations

import contextlib
import os
import sys
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...archive.export import WRITERS, export_entries, parse_moment
from ...conf import conf
from ...models import OUTCOMES


class Command(BaseCommand):
    help = (
        "Stream the archived finished requests that finished in [--since, --until) as CSV "
        "or JSON Lines, oldest first, in constant memory."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        moment = "an ISO 8601 datetime (naive means UTC) or epoch milliseconds"
        parser.add_argument(
            "--since", help=f"First moment included: {moment}. Default: the first row."
        )
        parser.add_argument("--until", help=f"First moment excluded: {moment}. Default: no end.")
        parser.add_argument(
            "--format", choices=sorted(WRITERS), default="csv", help="Default: csv."
        )
        parser.add_argument("--output", metavar="PATH", help="File to write. Default: stdout.")
        parser.add_argument(
            "--database",
            help="Database alias to read. Default: FERROX_STATS['ARCHIVE_DATABASE'].",
        )
        filters = parser.add_argument_group("filters (repeat a flag to match any of its values)")
        for name, what in (
            ("model", "the served model"),
            ("route", "the route, like /v1/chat/completions"),
            ("replica", "the replica that served it"),
            ("client", "the client it was served to"),
        ):
            filters.add_argument(f"--{name}", action="append", help=f"Only rows with {what}.")
        filters.add_argument(
            "--status", action="append", type=int, help="Only rows with this HTTP status."
        )
        filters.add_argument(
            "--outcome",
            action="append",
            choices=[value for value, _ in OUTCOMES],
            help="Only rows with this outcome.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        since = _moment("--since", options["since"])
        until = _moment("--until", options["until"])
        if since is not None and until is not None and since >= until:
            raise CommandError(
                f"--since must be before --until, got {since.isoformat()} and {until.isoformat()}."
            )
        filters = {
            name: options[name]
            for name in ("model", "route", "status", "outcome", "replica", "client")
            if options[name] is not None
        }
        entries = export_entries(
            since, until, filters, using=options["database"] or conf.ARCHIVE_DATABASE
        )
        write = WRITERS[options["format"]]
        path = options["output"]
        if path is None:
            # Each write is one whole line, ending in a newline: the wrapper adds none.
            try:
                count = write(entries, self.stdout)
            except BrokenPipeError:
                # The reader stopped early (`| head`): its choice, not an error. Point
                # stdout at /dev/null so the interpreter's final flush cannot fail again.
                with contextlib.suppress(OSError, ValueError):
                    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return
            self.stderr.write(f"Exported {_rows(count)}.")
            return
        try:
            with open(path, "w", encoding="utf-8", newline="") as out:
                count = write(entries, out)
        except OSError as exc:
            raise CommandError(f"--output: cannot write {path}: {exc.strerror or exc}.") from exc
        self.stdout.write(f"Exported {_rows(count)} to {path}.")


def _moment(flag: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return parse_moment(text)
    except ValueError as exc:
        raise CommandError(f"{flag}: {exc}.") from exc


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"
