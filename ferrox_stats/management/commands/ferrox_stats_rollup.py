"""``manage.py ferrox_stats_rollup``: rebuild the rollups of a time range from the archive."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from ...archive.rebuild import rebuild
from ...conf import conf


class Command(BaseCommand):
    help = (
        "Rebuild the usage rollups of [--since, --until) from the archived rows, one "
        "whole hour at a time, replacing what is there. Idempotent; safe while the "
        "archiver writes. Hours before the oldest archived row are left as they are."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        for name, what in (("--since", "from"), ("--until", "up to, not including")):
            parser.add_argument(
                name,
                required=True,
                metavar="DATETIME",
                help=f"Rebuild {what} this ISO 8601 moment (2026-01-31T00:00:00Z; "
                "without an offset: UTC), widened to whole hours.",
            )
        parser.add_argument(
            "--database",
            help="Database alias to rebuild in. Default: FERROX_STATS['ARCHIVE_DATABASE'].",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        since = _moment("--since", options["since"])
        until = _moment("--until", options["until"])
        if since >= until:
            raise CommandError("--since must be before --until.")
        result = rebuild(since, until, options["database"] or conf.ARCHIVE_DATABASE)
        span = f"[{result.since.isoformat()}, {result.until.isoformat()})"
        if result.first_hour is None:
            self.stdout.write(
                f"No archived rows before {result.until.isoformat()}: nothing rebuilt."
            )
            return
        hours = "hour" if result.hours == 1 else "hours"
        rows = "row" if result.rows == 1 else "rows"
        self.stdout.write(
            f"Rebuilt the rollups of {result.hours} {hours} from "
            f"{result.first_hour.isoformat()} ({result.rows} archived {rows}) in {span}."
        )


def _moment(option: str, text: str) -> datetime:
    try:
        moment = parse_datetime(text)
    except ValueError:
        moment = None
    if moment is None:
        raise CommandError(
            f"{option}: not an ISO 8601 date and time (like 2026-01-31T00:00:00Z): {text!r}."
        )
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
