"""``manage.py ferrox_stats_partitions``: make the archive's day partitions ahead, or list them."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from django.utils import timezone

from ...archive import partitions
from ...conf import conf


class Command(BaseCommand):
    help = (
        "Create the archive's day partitions from yesterday to --days days ahead (UTC) on a "
        "partitioned archive (PostgreSQL), or --list them. The archive writer makes the "
        f"next {partitions.AHEAD_DAYS} days itself; run this from a scheduler to make more."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days",
            type=int,
            default=partitions.AHEAD_DAYS,
            metavar="N",
            help=f"Days ahead of today to make. Default: {partitions.AHEAD_DAYS}.",
        )
        parser.add_argument("--list", action="store_true", help="List the partitions; make none.")
        parser.add_argument(
            "--database",
            help="Database alias. Default: FERROX_STATS['ARCHIVE_DATABASE'].",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        using = options["database"] or conf.ARCHIVE_DATABASE
        days = options["days"]
        if not 0 <= days <= 366:
            raise CommandError(f"--days must be between 0 and 366, got {days}.")
        if not partitions.is_partitioned(using):
            raise CommandError(
                "The archive is not partitioned: it is on SQLite, or migration 0013 has not "
                "run (manage.py migrate ferrox_stats)."
            )
        if options["list"]:
            for p in partitions.partitions(using):
                self.stdout.write(_line(p))
            return
        today = timezone.now().astimezone(UTC).date()
        wanted = [today + timedelta(days=n) for n in range(-1, days + 1)]
        try:
            made = partitions.make_days(wanted, using)
        except DatabaseError as exc:
            raise CommandError(f"No partition made: {exc}".rstrip() + ".") from exc
        for name in made.created:
            self.stdout.write(f"Created {name}.")
        for name, reason in made.skipped.items():
            self.stderr.write(f"Not created {name}: {reason}.")
        covered = f"{wanted[0].isoformat()} to {wanted[-1].isoformat()}"
        if not made.created and not made.skipped:
            self.stdout.write(f"Every day from {covered} has its partition already.")
        if made.skipped:
            raise CommandError(f"{len(made.skipped)} of the days from {covered} have none.")


def _line(p: partitions.Partition) -> str:
    if p.default:
        span = "DEFAULT"
    else:
        lower = "MINVALUE" if p.lower is None else p.lower.isoformat()
        upper = "MAXVALUE" if p.upper is None else p.upper.isoformat()
        span = f"{lower} .. {upper}"
    rows = (
        "rows unknown (not analysed yet)"
        if p.rows_estimate is None
        else (f"about {p.rows_estimate} rows")
    )
    return f"{p.name}  {span}  {rows}"
