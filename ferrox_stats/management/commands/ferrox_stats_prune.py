"""``manage.py ferrox_stats_prune``: delete archived rows past retention, in bounded batches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ...archive.retention import (
    PruneAlreadyRunning,
    cutoff_before,
    parse_age,
    prune,
    prune_rollups,
)
from ...archive.rollups import DAY
from ...conf import conf


class Command(BaseCommand):
    help = (
        "Delete archived finished requests and dead letters older than the retention "
        "period, oldest first, in bounded batches, and usage rollups older than theirs "
        "(ROLLUP_MINUTE_DAYS, ROLLUP_HOUR_DAYS). On a partitioned archive (PostgreSQL, "
        "migration 0013) the day partitions that end before the cutoff are detached and "
        "dropped whole instead of deleted row by row. Safe while the archiver writes; one "
        "prune runs at a time."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            metavar="AGE",
            help="Delete rows older than AGE: a whole number and d, h, m or s (30d, 12h, "
            "90m, 3600s). Default: FERROX_STATS['RETENTION_DAYS'] days.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Count what would be deleted; delete nothing.",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            metavar="N",
            help="Rows one batch deletes at most. Default: FERROX_STATS['PRUNE_BATCH_SIZE'].",
        )
        parser.add_argument(
            "--database",
            help="Database alias to prune. Default: FERROX_STATS['ARCHIVE_DATABASE'].",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cutoff = self._cutoff(options["older_than"])
        batch_size = options["batch_size"]
        if batch_size is None:
            batch_size = conf.PRUNE_BATCH_SIZE
        if batch_size < 1:
            raise CommandError(f"--batch-size must be at least 1, got {batch_size}.")
        using = options["database"] or conf.ARCHIVE_DATABASE
        try:
            result = prune(cutoff, batch_size=batch_size, dry_run=options["dry_run"], using=using)
        except PruneAlreadyRunning as exc:
            raise CommandError(f"Nothing pruned: {exc}.") from exc
        verb = "Would delete" if result.dry_run else "Deleted"
        self.stdout.write(
            f"{verb} {_count(result.finished_requests, 'finished request')} and "
            f"{_count(result.dead_letters, 'dead letter')} older than "
            f"{result.cutoff.isoformat()} in {_count(result.batches, 'batch')}."
        )
        if result.partitions:
            rows = result.partition_rows
            about = "" if rows is None else f", about {_count(rows, 'finished request')}"
            self.stdout.write(
                f"{'Would drop' if result.dry_run else 'Dropped'} "
                f"{_count(len(result.partitions), 'partition')} wholly older than the "
                f"cutoff{about}: {', '.join(result.partitions)}."
            )
        if result.partitions_busy:
            self.stderr.write(
                f"Not dropped (its lock was busy; the next prune tries again): "
                f"{', '.join(result.partitions_busy)}."
            )
        cutoffs = _rollup_cutoffs()
        if not cutoffs:
            return
        try:
            rollups = prune_rollups(
                cutoffs, batch_size=batch_size, dry_run=options["dry_run"], using=using
            )
        except PruneAlreadyRunning as exc:
            raise CommandError(f"Rollups not pruned: {exc}.") from exc
        for span, deleted in rollups.deleted.items():
            if deleted:  # said only when there were some: most runs have none
                self.stdout.write(
                    f"{verb} {_count(deleted, _SPANS[span] + ' rollup')} older than "
                    f"{rollups.cutoffs[span].isoformat()}."
                )

    def _cutoff(self, older_than: str | None) -> datetime:
        if older_than is not None:
            source = "--older-than"
            try:
                age = parse_age(older_than)
            except ValueError as exc:
                raise CommandError(f"{source}: {exc}.") from exc
        else:
            source = "FERROX_STATS['RETENTION_DAYS']"
            days = conf.RETENTION_DAYS
            if days is None:
                raise CommandError(
                    f"Retention is off ({source} is None): pass --older-than to prune anyway."
                )
            if days <= 0:
                raise CommandError(f"{source} must be positive, got {days}.")
            try:
                age = timedelta(days=days)
            except OverflowError:
                raise CommandError(f"{source} is too large, got {days}.") from None
        try:
            return cutoff_before(timezone.now(), age)
        except ValueError as exc:
            raise CommandError(f"{source}: {exc}.") from exc


_SPANS = {60: "minute", 3600: "hour", DAY: "day"}


def _rollup_cutoffs() -> dict[int, datetime]:
    """Each rollup width's cutoff from its setting (none for a width kept forever)."""
    now = timezone.now()
    cutoffs = {}
    for span, days in ((60, conf.ROLLUP_MINUTE_DAYS), (3600, conf.ROLLUP_HOUR_DAYS)):
        if days is not None:
            try:
                cutoffs[span] = cutoff_before(now, timedelta(days=days))
            except (OverflowError, ValueError):
                continue  # beyond the calendar: nothing is that old
    if 3600 in cutoffs:
        # Day rows go with their hours: each day that ends by the hours' cutoff.
        hours = cutoffs[3600].astimezone(UTC)
        cutoffs[DAY] = hours.replace(hour=0, minute=0, second=0, microsecond=0)
    return cutoffs


def _count(n: int, noun: str) -> str:
    plural = noun + ("es" if noun.endswith("ch") else "s")
    return f"{n} {noun if n == 1 else plural}"
