"""The archive: one row per finished request, and the rows that could never be written."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .archive.queries import FinishedRequestQuerySet
from .archive.rollups import COUNTERS, GROUP_FIELDS
from .indexes import CoveringIndex


class _PostgreSQLOnly(models.Func):
    """A database default that is ``sql`` on PostgreSQL and NULL elsewhere."""

    output_field = models.BigIntegerField()
    sql = "NULL"

    def __init__(self) -> None:
        super().__init__()

    def as_sql(
        self,
        compiler: Any,
        connection: Any,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> tuple[str, list[str | int]]:
        return "NULL", []

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        return self.sql, []


class CurrentTransactionId(_PostgreSQLOnly):
    """PostgreSQL's current transaction id (the old cursor column; migration 0004)."""

    sql = "(pg_current_xact_id()::text::bigint)"


# The archive's transaction-scoped advisory lock on PostgreSQL: 'ferrox' in ASCII, then
# 0x0001. Migration 0006's trigger takes it.
COMMIT_LOCK_KEY = 0x666572726F780001
# The rollup fold's lock (``archive/fold.py``): one fold at a time in the fleet, and
# none while a rebuild or a prune rewrites the rollups.
FOLD_LOCK_KEY = 0x666572726F780002


class NextCommitSeq(_PostgreSQLOnly):
    """The row's place in commit order on PostgreSQL; NULL elsewhere.

    A statement trigger (migration 0006) makes every INSERT or COPY into the archive
    take a transaction-scoped advisory lock before its rows draw from the sequence.
    The lock is held until commit, so values become visible in increasing order and
    a reader needs no horizon. Elsewhere means SQLite, whose writers are serialised:
    rows there become visible in id order, so the id alone is the commit-order cursor.
    """

    sql = "nextval('ferrox_stats_commit_seq')"


OUTCOME_OK = "ok"
OUTCOME_ERROR = "error"
OUTCOME_ABORTED = "aborted"
OUTCOMES = [(OUTCOME_OK, _("ok")), (OUTCOME_ERROR, _("error")), (OUTCOME_ABORTED, _("aborted"))]


class FinishedRequest(models.Model):
    """Every field of a ``core.requests.Record``, plus who recorded it and its ring seq.

    ``finished_at`` holds the record's ``at_ms`` (millisecond precision round-trips
    exactly). ``outcome`` is derived from ``aborted``/``error``/``status`` so filters
    on it can use an index.
    """

    id = models.BigAutoField(primary_key=True)
    request_id = models.CharField(max_length=200, null=True, blank=True)
    finished_at = models.DateTimeField()
    route = models.CharField(max_length=200, null=True, blank=True)
    model = models.CharField(max_length=200, null=True, blank=True)
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    stream = models.BooleanField(null=True, blank=True)
    prompt_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    ttft_ms = models.FloatField(_("TTFT (ms)"), null=True, blank=True)
    duration_ms = models.FloatField(_("duration (ms)"), null=True, blank=True)
    queue_ms = models.FloatField(_("queue (ms)"), null=True, blank=True)
    decode_ms = models.FloatField(_("decode (ms)"), null=True, blank=True)
    finish_reason = models.CharField(max_length=64, null=True, blank=True)
    aborted = models.CharField(max_length=64, null=True, blank=True)
    error = models.CharField(max_length=200, null=True, blank=True)
    client = models.CharField(max_length=200, null=True, blank=True)
    via_api_key = models.CharField("via API key", max_length=100, null=True, blank=True)
    replica = models.CharField(max_length=200)
    instance = models.CharField(max_length=200, null=True, blank=True)
    seq = models.BigIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=OUTCOMES)
    # Whose word the row's keys are: True for a record an ingest token's replica
    # reported (its ``request_id``, ``instance`` and ``seq`` are the producer's), False
    # for one this deployment's own processes recorded (tracker, pass-through). The two
    # are separate namespaces, so no producer can collide with the server's records.
    # Rows archived before migration 0007 read True whatever their origin: marking them
    # would rewrite the table, and a row already stored cannot be made to vanish.
    ingested = models.BooleanField(db_default=True, editable=False)
    # The row's place in the order rows became visible, so a poller can follow the
    # archive's tail (see ``queries.committed_after``). Set by the database.
    commit_seq = models.BigIntegerField(
        null=True, blank=True, editable=False, db_default=NextCommitSeq()
    )

    objects: ClassVar[FinishedRequestQuerySet] = FinishedRequestQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        verbose_name = _("finished request")
        verbose_name_plural = _("finished requests")
        ordering = ("-finished_at", "-id")
        # The live views' permission (``access.DASHBOARD``); the archive's is the
        # model's built-in ``view_finishedrequest``.
        permissions = [("view_dashboard", "Can view the live telemetry dashboard")]
        constraints = [
            # A replayed record is never stored twice; keys are namespaced by what the
            # server knows (the token's replica, or its own processes), never only by
            # what a producer claims. Each key holds ``finished_at``, which a replay of
            # a record repeats: PostgreSQL requires it of a key on the partitioned
            # archive (migration 0013), and SQLite keeps the same meaning.
            models.UniqueConstraint(
                fields=["replica", "request_id", "ingested", "finished_at"],
                name="ferrox_stats_fr_ns_request_at_uniq",
            ),
            # ... nor is one re-sent after a commit whose acknowledgement was lost.
            # ``instance`` leads: the SQLite writer looks rows up by it.
            models.UniqueConstraint(
                fields=["instance", "seq", "replica", "ingested", "finished_at"],
                name="ferrox_stats_fr_ns_seq_at_uniq",
            ),
            models.CheckConstraint(
                condition=Q(status__isnull=True) | Q(status__gte=100, status__lte=599),
                name="ferrox_stats_fr_status_http",
            ),
            models.CheckConstraint(
                condition=(
                    (Q(ttft_ms__isnull=True) | Q(ttft_ms__gte=0))
                    & (Q(duration_ms__isnull=True) | Q(duration_ms__gte=0))
                    & (Q(queue_ms__isnull=True) | Q(queue_ms__gte=0))
                    & (Q(decode_ms__isnull=True) | Q(decode_ms__gte=0))
                ),
                name="ferrox_stats_fr_times_nonnegative",
            ),
        ]
        indexes = [
            # Keyset paging and time windows: (finished_at, id) in both directions.
            models.Index(fields=["finished_at", "id"], name="ferrox_fr_finished_id"),
            # The commit-order cursor.
            models.Index(fields=["commit_seq"], name="ferrox_fr_commit_seq"),
            # Lookup by the id a response carried (admin search, /v1/history/<id>): the
            # unique (replica, request_id) index cannot serve request_id alone.
            models.Index(fields=["request_id"], name="ferrox_fr_request_id"),
            # One per filter of the history page and /v1/history: the filter's column,
            # then the keyset order, so a page of any depth is one index range read
            # through ``queries.KeysetBeyond`` (migration 0011, docs/benchmarks.md
            # "perf-history"). A filter's common value needs none: the
            # (finished_at, id) index finds its rows densely, so the index leaves it
            # out and each archived row costs fewer index writes.
            models.Index(fields=["model", "finished_at", "id"], name="ferrox_fr_model_keyset"),
            models.Index(fields=["route", "finished_at", "id"], name="ferrox_fr_route_keyset"),
            models.Index(fields=["client", "finished_at", "id"], name="ferrox_fr_client_keyset"),
            models.Index(fields=["replica", "finished_at", "id"], name="ferrox_fr_replica_keyset"),
            models.Index(
                fields=["status", "finished_at", "id"],
                name="ferrox_fr_status_keyset",
                condition=~Q(status=200),
            ),
            models.Index(
                fields=["outcome", "finished_at", "id"],
                name="ferrox_fr_outcome_keyset",
                condition=Q(outcome__in=[OUTCOME_ERROR, OUTCOME_ABORTED]),
            ),
            models.Index(
                fields=["finish_reason", "finished_at", "id"],
                name="ferrox_fr_finish_keyset",
                condition=~Q(finish_reason="stop"),
            ),
            models.Index(
                fields=["aborted", "finished_at", "id"],
                name="ferrox_fr_aborted_keyset",
                condition=Q(aborted__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.request_id or f'#{self.pk}'} {self.model or '-'} {self.status or '-'}"


class DeadLetter(models.Model):
    """A finished record that can never be written, set aside with the reason why.

    ``payload`` is the record's wire dict (``core.requests.entry``): it holds no
    request or response content, so keeping it is safe.
    """

    id = models.BigAutoField(primary_key=True)
    created_at = models.DateTimeField(auto_now_add=True)
    replica = models.CharField(max_length=200, blank=True, default="")
    request_id = models.CharField(max_length=200, blank=True, default="")
    instance = models.CharField(max_length=200, blank=True, default="")
    reason = models.TextField()
    payload = models.JSONField()

    class Meta:
        verbose_name = _("dead-lettered record")
        verbose_name_plural = _("dead-lettered records")
        ordering = ("-created_at", "-id")
        indexes = [models.Index(fields=["created_at"], name="ferrox_dl_created")]

    def __str__(self) -> str:
        return f"{self.request_id or f'#{self.pk}'}: {self.reason[:60]}"


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def active(self, now: datetime | None = None) -> ApiTokenQuerySet:
        """Tokens neither revoked nor expired at ``now`` (default: the present). Whether
        the owner is active is asked of the users' database (``tokens.check``)."""
        moment = timezone.now() if now is None else now
        return self.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=moment)
        )


def user_is_active_field() -> bool:
    """Whether the user model stores ``is_active`` (a custom one may not: then every
    user is active, as Django's own backends assume)."""
    try:
        field = get_user_model()._meta.get_field("is_active")
    except FieldDoesNotExist:
        return False
    return bool(field.concrete)


class ApiToken(models.Model):
    """A credential: read scope for pollers, ingest scope for replicas, and the infer
    scope for clients of the OpenAI-compatible pass-through.

    Only a SHA-256 of the secret is stored (secrets are 256 random bits, so a slow
    hash adds nothing); the secret is shown once, when the token is issued. ``label``
    is what logs and telemetry name it by.
    """

    id = models.BigAutoField(primary_key=True)
    label = models.CharField(max_length=100, unique=True)
    prefix = models.CharField(max_length=12, editable=False)
    secret_hash = models.CharField(max_length=64, unique=True, editable=False)
    can_read = models.BooleanField("read scope", default=True)
    can_ingest = models.BooleanField("ingest scope", default=False)
    can_infer = models.BooleanField(
        "infer scope",
        default=False,
        help_text="May call the OpenAI-compatible pass-through; its label is recorded as "
        "via_api_key.",
    )
    replica = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="The replica that records ingested with this token are attributed to.",
    )
    # Who the token acts for: it stops working when they are deactivated, and goes
    # with them when they are deleted. NULL only on tokens issued before migration 0008.
    # No database constraint and no cascade: the archive may live on another database
    # than the users (``routers``), and deleting a user must never query this table
    # there. A token whose owner is gone is refused (``tokens.check``).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
        help_text="The user the token acts for; set to whoever issues it in the admin.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Refused from this moment on; empty: never expires."
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[ApiTokenQuerySet] = ApiTokenQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        verbose_name = "API token"
        verbose_name_plural = "API tokens"
        ordering = ("label",)
        constraints = [
            models.CheckConstraint(
                condition=Q(can_ingest=False) | ~Q(replica=""),
                name="ferrox_stats_token_ingest_needs_replica",
            )
        ]

    def __str__(self) -> str:
        return f"{self.label} ({self.prefix}…)"

    def clean(self) -> None:
        # A token issued already expired could never be used: say so on the form.
        expires = self.expires_at
        if self._state.adding and expires is not None and expires <= timezone.now():
            raise ValidationError({"expires_at": "This moment is already past."})

    def works_at(self, now: datetime) -> bool:
        """Neither revoked nor expired at ``now`` (what ``active`` filters on, less the
        owner, whose state is the database's)."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


class Instance(models.Model):
    """One recorder's last heartbeat: who it is, when it last spoke, its state document.

    One row per recorder (process epoch), written only by that process's heartbeat
    thread (``heartbeat.py``) with one upsert per tick, and read by ``fleet.py``.
    Whether it is live, stale, lost or stopped is computed by readers from
    ``last_seen``, ``heartbeat_s`` and ``stopped``; nothing else updates the row.
    """

    # ``live.new_instance_id``: replica/pid/epoch, so a reused pid is another row.
    instance = models.CharField(max_length=255, primary_key=True)
    replica = models.CharField(max_length=200)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    # The heartbeat's own wall time (the process's clock), not the database's.
    last_seen = models.DateTimeField()
    # The interval it promised: readers judge its age against this, not their own.
    heartbeat_s = models.FloatField()
    # The clean-shutdown mark: its last heartbeat, written after the archive closed.
    stopped = models.BooleanField(default=False)
    # ``state.process_state``'s document without its breakdown, as JSON text (text, not
    # jsonb: PostgreSQL's jsonb output cost most of a fleet read), its three latency
    # distributions' bucket counts packed apart in ``latency_counts`` (``fleet_rows``).
    state = models.TextField()
    # NULL: the counts are lists in ``state`` (rows of the previous release).
    latency_counts = models.BinaryField(null=True)

    class Meta:
        verbose_name = _("instance")
        verbose_name_plural = _("instances")
        ordering = ("-last_seen", "instance")
        indexes = [
            # Newest first for the fleet, and the publisher's prune of old rows.
            models.Index(fields=["last_seen"], name="ferrox_instance_last_seen"),
        ]

    def __str__(self) -> str:
        return self.instance

    def document(self) -> dict[str, Any]:
        """The stored state document, its latency counts as lists (form D);
        ``ValueError`` if the row holds no document this release wrote or reads."""
        from .fleet_rows import read_document

        return read_document(self.state, self.latency_counts)


ROLLUP_MINUTE = 60
ROLLUP_HOUR = 3600
ROLLUP_DAY = 86400  # the merged levels' only (``archive.rollups.DAY``)
ROLLUP_SPANS = [(ROLLUP_MINUTE, _("minute")), (ROLLUP_HOUR, _("hour")), (ROLLUP_DAY, _("day"))]
# What a rollup row keeps of its group (``archive.rollups.LEVELS``): every label, one
# label only, nothing (the bucket's total), or a label and the model (counters only).
ROLLUP_LEVELS = [
    (0, _("group")),
    (1, _("model")),
    (2, _("total")),
    (3, _("key")),
    (4, _("replica")),
    (5, _("route")),
    (6, _("outcome")),
    (7, _("key and model, counters")),
    (8, _("replica and model, counters")),
    (9, _("route and model, counters")),
    (10, _("outcome and model, counters")),
]


class RollupSums(models.Model):
    """What a ``Rollup`` row and a ``RollupDelta`` both hold: a group's labels and the
    sums of its requests (``core.rollup.Tally``, ``archive.rollups.stored_tally``)."""

    model = models.CharField(max_length=200, null=True, blank=True)
    route = models.CharField(max_length=200, null=True, blank=True)
    replica = models.CharField(max_length=200)
    via_api_key = models.CharField("via API key", max_length=100, null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=OUTCOMES, blank=True)
    requests = models.BigIntegerField(default=0)
    # The requests of the error and of the aborted outcome: a group's requests or none
    # at level 0, summed over the groups merged at the others.
    errors = models.BigIntegerField(default=0)
    aborted = models.BigIntegerField(default=0)
    # The aborted requests by the reasons every feeder gives (``core.rollup.KNOWN_ABORTS``):
    # counters the database sums (and the covering index holds); any other reason is
    # counted in ``aborts``.
    aborts_client_disconnect = models.BigIntegerField(default=0)
    aborts_explicit = models.BigIntegerField(default=0)
    aborts_timeout = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    # Values left out of the sums and distributions (``core.rollup.MAX_TOKENS``...).
    out_of_range = models.BigIntegerField(default=0)
    # Text, "" when empty: {abort reason: count} as JSON, of the reasons not counted
    # in a column of their own (``aborts_*``); the three latency
    # distributions in seconds, each as ``zeros;sum;index,count,...`` (its non-empty
    # buckets, ``core.rollup.Tally.texts``). Text, not jsonb: read back and merged in
    # Python under the row's lock (usage answers sum ``aborts`` by the database's JSON
    # functions, from the rows that have any).
    aborts = models.TextField(blank=True, default="")
    duration = models.TextField(blank=True, default="")
    ttft = models.TextField(blank=True, default="")
    tpot = models.TextField(blank=True, default="")

    class Meta:
        abstract = True


class Rollup(RollupSums):
    """The archived requests of one time bucket and one group, summed (``core.rollup``).

    Written in the transaction that archives the rows it sums, as a delta
    (``RollupDelta``) that a fold adds to these rows soon after (``archive/fold.py``):
    the rollups with the deltas never disagree with the rows; rebuilt from the archive by
    ``manage.py ferrox_stats_rollup``. A group is ``(model, route, replica,
    via_api_key, outcome)``, a NULL label its own group; ``group_key`` is a digest of
    it, so the unique key stays narrow and NULLs compare equal in it (a unique
    constraint over the nullable columns themselves would let NULLs repeat). Rows
    outlive the archive's retention: they are what is left of pruned requests.

    Each bucket's groups are also kept merged (``level``): per model, per key, per
    replica, per route, per outcome, and in total, so that a usage answer grouped by
    one label or by nothing reads a row per value or per bucket instead of every
    group's (``archive.usage``). Such a row's dropped labels are NULL (``replica`` and
    ``outcome`` ""). The merged rows are also kept per UTC day, and carry their
    distributions' percentiles (``percentiles``). Levels 7-10 keep a label and the
    model, with counters only (empty distributions): what a priced answer by one
    label sums.
    """

    id = models.BigAutoField(primary_key=True)
    # The bucket's width: every record is summed in its minute and in its hour, and
    # at the merged levels in its UTC day too.
    span_s = models.PositiveIntegerField(choices=ROLLUP_SPANS)
    # The bucket's start (UTC, a whole minute or hour).
    bucket = models.DateTimeField()
    group_key = models.CharField(max_length=32)
    level = models.PositiveSmallIntegerField(choices=ROLLUP_LEVELS, default=0)
    # At the merged levels, each distribution's count and p50/p95/p99 as JSON
    # (``archive.rollups.percentiles_text``), written with them: an answer at the
    # row's own bucket reads these instead of parsing the distributions. "" at level 0
    # (its answers merge rows) and on rows written before migration 0017.
    percentiles = models.TextField(blank=True, default="")

    class Meta:
        verbose_name = _("rollup")
        verbose_name_plural = _("rollups")
        ordering = ("span_s", "bucket", "group_key")
        constraints = [
            # One row per cell: the upsert's conflict target. Its (span_s, bucket)
            # prefix is also what every read ranges over.
            models.UniqueConstraint(
                fields=["span_s", "bucket", "group_key"], name="ferrox_stats_rollup_cell_uniq"
            ),
        ]
        indexes = [
            # The usage answers read these columns only (``archive.usage``): covering
            # them, a range is an index-only scan that skips the wide heap rows (their
            # distributions), on PostgreSQL (SQLite has no INCLUDE: a plain index, and
            # no W040 warning: ``indexes.CoveringIndex``).
            CoveringIndex(
                fields=["span_s", "level", "bucket"],
                covering=[*GROUP_FIELDS, *COUNTERS],
                name="ferrox_rollup_level_counters",
            ),
            CoveringIndex(
                fields=["span_s", "level", "bucket"],
                covering=[*GROUP_FIELDS, "aborts"],
                condition=~Q(aborts=""),
                name="ferrox_rollup_level_aborts",
            ),
            # The merged levels' stored percentiles, which an answer by one label or
            # by nothing reads a row per value and bucket of: an index-only scan of
            # these rows alone, not a heap read per row among every group's.
            CoveringIndex(
                fields=["span_s", "level", "bucket"],
                covering=[*GROUP_FIELDS, "percentiles"],
                condition=Q(level__gt=0),
                name="ferrox_rollup_percentiles_all",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.bucket:%Y-%m-%d %H:%M} {self.span_s}s {self.model or '-'} {self.outcome}"


class RollupDelta(RollupSums):
    """One archive batch's sums of one group in one minute, not yet in the ``Rollup``
    rows (``archive/fold.py``).

    A batch inserts these in its own transaction, beside the rows they sum: rows of
    its own, so that no two writers of the fleet ever wait on each other's rollup
    rows. A fold moves them into the rollups (the minute, its hour and day, every
    level), deleting them in the same transaction: each writer's, after its batches a
    few times a minute, or a usage answer's when their writers stopped. The rollups
    and the deltas together always equal the archive. Its sums are a level-0 minute
    row's (``RollupSums``).
    """

    id = models.BigAutoField(primary_key=True)
    # When the batch inserted it, by the database's clock (the same for every host): a
    # delta no writer folded within a few ROLLUP_FOLD_S is folded by the next usage
    # answer (``archive.fold.fold_abandoned``).
    made = models.DateTimeField(db_default=Now())
    bucket = models.DateTimeField()  # the minute's start (UTC)

    class Meta:
        verbose_name = _("rollup delta")
        verbose_name_plural = _("rollup deltas")
        # No index but the key: a fold takes the oldest ids, a rebuild or prune the
        # rows of a range (rare; the table holds seconds of batches).

    def __str__(self) -> str:
        return f"{self.bucket:%Y-%m-%d %H:%M} {self.model or '-'} {self.outcome}"
