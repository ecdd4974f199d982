"""Serializers that describe the API's documents for OpenAPI.

Responses are built as plain dicts (``documents.py``, the archive's ``.values()``):
a serializer per row measured about 10 times slower. These classes only tell drf-spectacular
the shape, and the schema tests hold the documents to it.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..models import OUTCOMES

S = serializers


class EntrySerializer(S.Serializer):
    """One finished request on the wire (``core.requests.entry``)."""

    seq = S.IntegerField(allow_null=True, help_text="Ring sequence number in its instance.")
    request_id = S.CharField(allow_null=True)
    at_ms = S.IntegerField(allow_null=True, help_text="Epoch ms when it finished.")
    route = S.CharField(allow_null=True)
    model = S.CharField(allow_null=True)
    status = S.IntegerField(allow_null=True)
    stream = S.BooleanField(allow_null=True)
    prompt_tokens = S.IntegerField(allow_null=True)
    completion_tokens = S.IntegerField(allow_null=True)
    cached_tokens = S.IntegerField(allow_null=True)
    ttft_ms = S.FloatField(allow_null=True, help_text="Arrival to first token.")
    duration_ms = S.FloatField(allow_null=True, help_text="Arrival to end.")
    queue_ms = S.FloatField(allow_null=True)
    decode_ms = S.FloatField(allow_null=True, help_text="Decode loop only.")
    finish_reason = S.CharField(allow_null=True)
    aborted = S.CharField(allow_null=True, help_text="Abort reason, or null.")
    error = S.CharField(allow_null=True, help_text="Short error; never content.")
    client = S.CharField(allow_null=True)
    via_api_key = S.CharField(allow_null=True, help_text="A key's label, never its secret.")
    replica = S.CharField(allow_null=True)
    decode_tps = S.FloatField(allow_null=True, help_text="Derived; null when not computable.")
    itl_ms = S.FloatField(allow_null=True, help_text="Derived; null when not computable.")


class ArchivedEntrySerializer(EntrySerializer):
    id = S.IntegerField(help_text="The archive row's id.")
    cost = S.FloatField(
        allow_null=True,
        help_text="Its tokens at the prices in force when it finished (PRICES); null "
        "without a price or without its token counts.",
    )


class RingPageSerializer(S.Serializer):
    instance = S.CharField(help_text="The ring instance (replica/process/epoch) that answered.")
    entries = EntrySerializer(many=True)
    next_cursor = S.IntegerField(help_text="Pass back as `since`.")
    missed = S.IntegerField(help_text="Rows at or after `since` evicted before this poll.")
    recorded_total = S.IntegerField()
    reset = S.BooleanField(help_text="The cursor came from another instance; restart here.")


class WindowSerializer(S.Serializer):
    requests = S.IntegerField()
    seconds = S.FloatField(allow_null=True)


class ThroughputSerializer(S.Serializer):
    decode_tps = S.FloatField()
    prefill_tps = S.FloatField()
    window_s = S.FloatField()
    decode_samples = S.IntegerField()
    prefill_samples = S.IntegerField()


class RequestCountersSerializer(S.Serializer):
    active = S.IntegerField()
    completed = S.IntegerField()
    aborts = S.DictField(child=S.IntegerField(), help_text="Count by abort reason.")
    prompt_tokens_total = S.IntegerField()
    completion_tokens_total = S.IntegerField()
    recorded_total = S.IntegerField()
    p95_ms = S.FloatField(allow_null=True)
    ttft_mean_ms = S.FloatField(allow_null=True)
    window = WindowSerializer()


class PoolSerializer(S.Serializer):
    occupancy = S.FloatField(allow_null=True, help_text="0..1; null until reported.")
    queue_depth = S.FloatField(allow_null=True)
    gauges_refused = S.IntegerField(
        help_text="Gauge reports ignored as impossible (negative, not finite, used > total)."
    )


class ArchiveHealthSerializer(S.Serializer):
    accepted = S.IntegerField()
    persisted = S.IntegerField()
    duplicates = S.IntegerField()
    pending = S.IntegerField()
    dropped = S.DictField(child=S.IntegerField())
    dead_lettered = S.IntegerField()
    failed_attempts = S.IntegerField()
    last_error = S.CharField(allow_null=True)
    queue_max = S.IntegerField()


class StatsSerializer(S.Serializer):
    instance = S.CharField()
    replica = S.CharField()
    uptime_s = S.FloatField()
    throughput = ThroughputSerializer()
    requests = RequestCountersSerializer()
    pool = PoolSerializer()
    archive = ArchiveHealthSerializer(allow_null=True)


class PercentilesSerializer(S.Serializer):
    p50 = S.FloatField(allow_null=True)
    p95 = S.FloatField(allow_null=True)
    p99 = S.FloatField(allow_null=True)


class SummarySerializer(S.Serializer):
    duration_ms = PercentilesSerializer()
    ttft_ms = PercentilesSerializer()
    ttft_mean_ms = S.FloatField(allow_null=True)
    window = WindowSerializer()


class AdminStatsSerializer(RingPageSerializer):
    summary = SummarySerializer()
    live = StatsSerializer()


class HistoryPageSerializer(S.Serializer):
    entries = ArchivedEntrySerializer(many=True)
    next_cursor = S.CharField(allow_null=True, help_text="Pass back as `cursor`; null at the end.")


class HistoryDetailSerializer(S.Serializer):
    entries = ArchivedEntrySerializer(many=True, help_text="One per replica that served it.")


class IngestRecordSerializer(S.Serializer):
    request_id = S.CharField(max_length=200, help_text="The producer's id; idempotency key.")
    at_ms = S.IntegerField(help_text="Epoch ms when it finished.")
    route = S.CharField(required=False, allow_null=True)
    model = S.CharField(required=False, allow_null=True)
    status = S.IntegerField(required=False, allow_null=True, min_value=100, max_value=599)
    stream = S.BooleanField(required=False, allow_null=True)
    prompt_tokens = S.IntegerField(required=False, allow_null=True, min_value=0)
    completion_tokens = S.IntegerField(required=False, allow_null=True, min_value=0)
    cached_tokens = S.IntegerField(required=False, allow_null=True, min_value=0)
    ttft_ms = S.FloatField(required=False, allow_null=True, min_value=0)
    duration_ms = S.FloatField(required=False, allow_null=True, min_value=0)
    queue_ms = S.FloatField(required=False, allow_null=True, min_value=0)
    decode_ms = S.FloatField(required=False, allow_null=True, min_value=0)
    finish_reason = S.CharField(required=False, allow_null=True)
    aborted = S.CharField(required=False, allow_null=True)
    error = S.CharField(required=False, allow_null=True)
    client = S.CharField(required=False, allow_null=True)
    via_api_key = S.CharField(required=False, allow_null=True)
    seq = S.IntegerField(required=False, allow_null=True, min_value=0)


class GaugesSerializer(S.Serializer):
    pool_used = S.FloatField(required=False, allow_null=True, min_value=0)
    pool_total = S.FloatField(required=False, allow_null=True, min_value=0)
    queue_depth = S.FloatField(required=False, allow_null=True, min_value=0)


class IngestBatchSerializer(S.Serializer):
    records = IngestRecordSerializer(many=True)
    instance = S.CharField(required=False, allow_null=True, help_text="The producer's process.")
    gauges = GaugesSerializer(required=False, allow_null=True)


class NamedChoiceField(S.ChoiceField):
    """Choices described as their own ``FerroxStats<component_name>`` schema component
    (drf-spectacular would name an inline enum after the field, e.g. ``StatusEnum``)."""

    def __init__(self, *, component_name: str, **kwargs: Any) -> None:
        self.component_name = component_name
        super().__init__(**kwargs)


class IngestItemResultSerializer(S.Serializer):
    index = S.IntegerField()
    request_id = S.CharField(allow_null=True)
    status = NamedChoiceField(
        choices=["accepted", "duplicate", "rejected"], component_name="IngestItemStatus"
    )
    reason = S.CharField(allow_null=True, help_text="Why it was rejected; names the field.")


class IngestResultSerializer(S.Serializer):
    accepted = S.IntegerField()
    duplicate = S.IntegerField()
    rejected = S.IntegerField()
    results = IngestItemResultSerializer(many=True)
    gauges = S.CharField(allow_null=True, help_text="accepted, a reason, or null if none sent.")


class QuantilesSerializer(S.Serializer):
    count = S.IntegerField(help_text="Values in the merged distribution.")
    p50 = S.FloatField(allow_null=True)
    p95 = S.FloatField(allow_null=True)
    p99 = S.FloatField(allow_null=True)


class FleetLatencySerializer(S.Serializer):
    duration_s = QuantilesSerializer(help_text="Arrival to end, seconds.")
    ttft_s = QuantilesSerializer(help_text="Arrival to first token, seconds.")
    tpot_s = QuantilesSerializer(help_text="Time per output token after the first, seconds.")


class FleetArchiveSerializer(S.Serializer):
    accepted = S.IntegerField()
    persisted = S.IntegerField()
    pending = S.IntegerField()
    dropped = S.DictField(child=S.IntegerField(), help_text="Count by reason.")
    dead_lettered = S.IntegerField()


class FleetTotalsSerializer(S.Serializer):
    instances = S.IntegerField(help_text="Instances summed: the live ones (or the one asked).")
    active = S.IntegerField()
    completed = S.IntegerField()
    aborts = S.DictField(child=S.IntegerField(), help_text="Count by abort reason.")
    prompt_tokens_total = S.IntegerField()
    completion_tokens_total = S.IntegerField()
    decode_tps = S.FloatField(help_text="Summed amounts over the longest window span.")
    prefill_tps = S.FloatField()
    window_s = S.FloatField()
    latency = FleetLatencySerializer(
        help_text="Percentiles of the distributions merged bucket by bucket."
    )
    archive = FleetArchiveSerializer(allow_null=True)


class FleetInstanceSerializer(S.Serializer):
    instance = S.CharField(help_text="replica/pid/epoch.")
    replica = S.CharField()
    host = S.CharField()
    pid = S.IntegerField()
    started_ms = S.IntegerField()
    uptime_s = S.FloatField(help_text="At its last heartbeat.")
    last_seen_ms = S.IntegerField(help_text="Epoch ms of its last heartbeat (its clock).")
    age_s = S.FloatField()
    state = NamedChoiceField(
        choices=["live", "stale", "lost", "stopped"], component_name="InstanceState"
    )
    active = S.IntegerField()
    completed = S.IntegerField()
    decode_tps = S.FloatField()
    prefill_tps = S.FloatField()
    pending = S.IntegerField(allow_null=True, help_text="Queued for the archive; null: no archive.")
    dropped = S.DictField(child=S.IntegerField(), help_text="Not archived, by reason.")
    not_archived = S.IntegerField(
        allow_null=True,
        help_text="Lost only: up to this many records never archived (pending at its last "
        "heartbeat), plus any finished after it.",
    )


class FleetLostSerializer(S.Serializer):
    instance = S.CharField()
    last_seen_ms = S.IntegerField()
    not_archived = S.IntegerField(allow_null=True)


class FleetSerializer(S.Serializer):
    scope = S.CharField(help_text="Always 'fleet'.")
    instance = S.CharField(allow_null=True, help_text="The instance `totals` is narrowed to.")
    at_ms = S.IntegerField(help_text="Epoch ms the states were judged at.")
    heartbeat_s = S.FloatField(help_text="HEARTBEAT_S: answers agree within one interval.")
    relative_error = S.FloatField(help_text="Of every percentile (bucket width).")
    totals = FleetTotalsSerializer()
    instances = FleetInstanceSerializer(many=True, help_text="Newest heartbeat first.")
    stale = S.ListField(child=S.CharField(), help_text="Missed heartbeats: named, not summed.")
    lost = FleetLostSerializer(many=True, help_text="Gone without the clean-shutdown mark.")
    unreadable = S.IntegerField(help_text="Heartbeat rows skipped: not a state document.")


class ErrorBodySerializer(S.Serializer):
    status = S.IntegerField()
    code = S.CharField()
    message = S.CharField()
    # The error document's key is "fields"; the serializer only describes it.
    fields = S.DictField(child=S.ListField(child=S.CharField()), required=False)  # type: ignore[assignment]


class ErrorSerializer(S.Serializer):
    error = ErrorBodySerializer()


OUTCOME_CHOICES = [value for value, _ in OUTCOMES]


class UsageLatencySerializer(S.Serializer):
    """The distributions asked for in ``latency`` only."""

    duration_s = QuantilesSerializer(required=False, help_text="Arrival to end, seconds.")
    ttft_s = QuantilesSerializer(required=False, help_text="Arrival to first token, seconds.")
    tpot_s = QuantilesSerializer(
        required=False, help_text="Time per output token after the first, seconds."
    )


class UsageTotalSerializer(S.Serializer):
    """One group's sums; its dimensions (key, model, replica, route, outcome, as grouped)
    are fields of the row too, null for requests that had none."""

    requests = S.IntegerField()
    prompt_tokens = S.IntegerField()
    completion_tokens = S.IntegerField()
    cached_tokens = S.IntegerField()
    out_of_range = S.IntegerField(help_text="Values left out of the sums (beyond any real one).")
    aborts = S.DictField(child=S.IntegerField(), help_text="Count by abort reason.")
    # The document's key is "errors"; the serializer only describes it.
    errors = S.IntegerField(help_text="Requests that ended in an error (outcome error).")  # type: ignore[assignment]
    aborted = S.IntegerField(help_text="Requests that were aborted (outcome aborted).")
    cost = S.FloatField(
        allow_null=True, help_text="Token cost at the prices in force; null: nothing priced."
    )
    unpriced_requests = S.IntegerField(help_text="Requests whose model had no price in force.")
    replica_cost = S.FloatField(
        allow_null=True,
        help_text="Replicas' hourly cost over the buckets they served in; null unless "
        "grouped and filtered by replica only, or no price.",
    )
    latency = UsageLatencySerializer(help_text="Percentiles of the merged distributions.")


class UsageRowSerializer(UsageTotalSerializer):
    bucket = S.CharField(help_text="The bucket's start, ISO 8601 UTC.")
    bucket_ms = S.IntegerField(help_text="The bucket's start, epoch ms.")


class UsageHeadSerializer(S.Serializer):
    since = S.CharField(help_text="The range's start, widened to a whole bucket.")
    until = S.CharField(help_text="The range's end (exclusive), widened to a whole bucket.")
    since_ms = S.IntegerField()
    until_ms = S.IntegerField()
    bucket = S.CharField()
    group_by = S.ListField(child=S.CharField())
    filters = S.DictField(child=S.CharField())
    rollups_kept = S.BooleanField(
        help_text="Whether the rollups are kept as records are archived (ROLLUPS)."
    )
    relative_error = S.FloatField(help_text="Of every percentile (bucket width).")
    currency = S.CharField()
    replica_costed = S.BooleanField(help_text="Whether replica_cost was computed.")
    latency = S.ListField(child=S.CharField(), help_text="The distributions asked for.")


class UsageSerializer(UsageHeadSerializer):
    rows = UsageRowSerializer(many=True, help_text="By bucket, then group.")
    totals = UsageTotalSerializer(many=True, help_text="Per group, over the whole range.")


class UsageTopSerializer(UsageHeadSerializer):
    by = S.CharField()
    metric = S.CharField()
    rows = UsageTotalSerializer(many=True, help_text="Most first.")
