"""What ``/admin/stats`` and ``/v1/requests`` report about finished requests.

``Record`` is one finished request, ``entry()`` the one function that turns it into
its wire dict, ``Stats`` the ring of records plus the summaries over what it retains.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import Any, NamedTuple

from .packed import columns
from .ring import Packing, Page, RequestRing
from .summary import mean_present, percentiles

DEFAULT_CAPACITY = 1024
MAX_PAGE = 256
"""The most rows one poll returns, whatever ``limit`` asks (never more than the ring holds)."""


class Record(NamedTuple):
    """One finished request. Immutable; anything unknown is ``None``.

    Times are milliseconds; ``at_ms`` is epoch ms when the request finished.
    ``ttft_ms`` and ``duration_ms`` run from arrival; ``decode_ms`` covers the decode
    loop only (first token to last). ``aborted`` is the abort reason, ``error`` a
    short description that never holds request or response content, and
    ``via_api_key`` a key's label, never its secret.
    """

    # A NamedTuple rather than a frozen dataclass: building one is on the hot path
    # of every request, and tuple construction is several times cheaper.
    request_id: str | None = None
    at_ms: int | None = None
    route: str | None = None
    model: str | None = None
    status: int | None = None
    stream: bool | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    ttft_ms: float | None = None
    duration_ms: float | None = None
    queue_ms: float | None = None
    decode_ms: float | None = None
    finish_reason: str | None = None
    aborted: str | None = None
    error: str | None = None
    client: str | None = None
    via_api_key: str | None = None
    replica: str | None = None


RECORD_FIELDS: tuple[str, ...] = Record._fields

as_record: Callable[[Sequence[Any]], Record] = partial(tuple.__new__, Record)
"""The ``Record`` of a row of its fields in order: what reads a ``row`` back.

A ``Record`` is a tuple subclass, which CPython's cycle collector never untracks: every
one still alive after two young collections moves to the oldest generation and counts
toward the next full collection, which walks the whole heap of the process and stops
every thread. A record the ring retains (1 024 by default), or queued for a fold or the
archive, lives that long, so a tracked request cost a worker full collections where
an untracked one cost none (docs/benchmarks.md, "The garbage collector"). The recorder
keeps a tracker's record as a ``row`` instead: an exact tuple of the same fields, which
the collector untracks at its first young collection (all of its values are atomic).
Whatever hands a record out (the ring's reads, a sink) reads it through this."""

RECORD_PACKING: Packing[Record] = columns(
    Record,
    labels=(
        "route",
        "model",
        "status",
        "finish_reason",
        "aborted",
        "error",
        "client",
        "via_api_key",
        "replica",
    ),
)
"""How a ring of records keeps the ones older than its newest 1024: by column, each
label (a value most requests share) as a one-byte code into its block's own values."""
DERIVED_FIELDS: tuple[str, ...] = ("decode_tps", "itl_ms")


_SURROGATE = re.compile("[\ud800-\udfff]")


_TEXT_FIELDS = itemgetter(
    *(
        Record._fields.index(name)
        for name in (
            "request_id",
            "route",
            "model",
            "finish_reason",
            "aborted",
            "error",
            "client",
            "via_api_key",
            "replica",
        )
    )
)


def encodable(record: Record) -> Record:
    """``record`` with each lone surrogate in its strings replaced by U+FFFD.

    Such a string (a client's ``"model": "\\ud800"``) cannot be encoded as UTF-8, so no
    response or page could show it and no database store it. The same record when there
    is none (the usual case). Applied where a record is shown (``entry``) or archived,
    never on the request path.
    """
    try:
        # The usual case, checked in C: every text field ASCII (about a third of the
        # per-field scan below, on the request path).
        if "".join(filter(None, _TEXT_FIELDS(record))).isascii():
            return record
    except TypeError:
        pass  # a field that is not text where text belongs: the scan below skips it
    changes: dict[str, Any] = {
        name: _SURROGATE.sub("\ufffd", value)
        for name, value in zip(Record._fields, record, strict=True)
        if isinstance(value, str) and not value.isascii() and _SURROGATE.search(value)
    }
    return record._replace(**changes) if changes else record


def decode_tps(record: Record) -> float | None:
    """Tokens per second of the decode loop; ``None`` when it cannot be computed.

    The first token ends the prefill, so the decode loop produced
    ``completion_tokens - 1`` tokens in ``decode_ms``. A rate too large for a float
    (a denormal ``decode_ms``) is not a measurement either: ``None``, never infinity.
    """
    tokens, decode_ms = record.completion_tokens, record.decode_ms
    if tokens is None or tokens < 2 or decode_ms is None or decode_ms <= 0:
        return None
    rate = (tokens - 1) * 1000.0 / decode_ms
    return rate if math.isfinite(rate) else None


def itl_ms(record: Record) -> float | None:
    """Mean inter-token latency of the decode loop; ``None`` when it cannot be computed.

    A decode loop of zero time measured nothing (the tokens arrived together).
    """
    tokens, decode_ms = record.completion_tokens, record.decode_ms
    if tokens is None or tokens < 2 or decode_ms is None or decode_ms <= 0:
        return None
    return decode_ms / (tokens - 1)


def entry(record: Record, seq: int | None = None) -> dict[str, Any]:
    """The wire dict of ``record``: ``seq`` (``None`` outside a ring), fields, derived rates;
    a lone surrogate in its text replaced (see ``encodable``), so any renderer can encode it."""
    record = encodable(record)
    wire: dict[str, Any] = {"seq": seq}
    wire.update(record._asdict())
    wire["decode_tps"] = decode_tps(record)
    wire["itl_ms"] = itl_ms(record)
    return wire


def page_entries(page: Page[Record]) -> list[dict[str, Any]]:
    """The wire dicts of a ring page's rows, oldest first."""
    return [entry(record, seq) for seq, record in page.rows]


@dataclass(frozen=True, slots=True)
class Summary:
    """Summaries over the records a ring retains; each is ``None`` when nothing measured it.

    ``window_requests`` and ``window_seconds`` say what the percentiles span: how many
    records, and the time from the oldest one's finish to the newest one's.
    """

    duration_p50_ms: float | None
    duration_p95_ms: float | None
    duration_p99_ms: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    ttft_mean_ms: float | None
    window_requests: int
    window_seconds: float | None


def summarize(records: list[Record]) -> Summary:
    """Nearest-rank percentiles of duration and TTFT, and mean TTFT, over ``records``."""
    durations = percentiles(r.duration_ms for r in records)
    ttfts = percentiles(r.ttft_ms for r in records)
    finished = [r.at_ms for r in records if r.at_ms is not None]
    seconds = (max(finished) - min(finished)) / 1000.0 if finished else None
    return Summary(
        duration_p50_ms=durations[50],
        duration_p95_ms=durations[95],
        duration_p99_ms=durations[99],
        ttft_p50_ms=ttfts[50],
        ttft_p95_ms=ttfts[95],
        ttft_p99_ms=ttfts[99],
        ttft_mean_ms=mean_present(r.ttft_ms for r in records),
        window_requests=len(records),
        window_seconds=seconds,
    )


class Stats:
    """The ring of finished-request records, and the summaries over what it retains."""

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        max_page: int = MAX_PAGE,
        instance: str | None = None,
    ) -> None:
        if not isinstance(max_page, int) or isinstance(max_page, bool) or max_page < 1:
            raise ValueError(f"max_page must be a positive integer, got {max_page!r}")
        # Rows pushed as exact tuples (a tracker's) are read as records (``as_record``).
        self.ring: RequestRing[Record] = RequestRing(
            capacity, instance, RECORD_PACKING, view=as_record
        )
        # A poll never returns more than the ring can hold.
        self.max_page = min(max_page, capacity)

    @property
    def instance(self) -> str:
        return self.ring.instance

    @property
    def recorded_total(self) -> int:
        return self.ring.recorded_total

    def record(self, record: Record) -> int:
        """Push a finished request; return its seq."""
        return self.ring.push(record)

    def since(
        self, cursor: int, limit: int = MAX_PAGE, instance: str | None = None
    ) -> Page[Record]:
        """A ring page from ``cursor``; ``limit`` must be >= 1 and is capped at ``max_page``."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
        return self.ring.since(cursor, min(limit, self.max_page), instance)

    def summary(self) -> Summary:
        return summarize(self.ring.rows())
