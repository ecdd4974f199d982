"""The app's settings: one namespaced ``FERROX_STATS`` dict, read at access time.

Each key has a default and one typed accessor; ``checks.py`` validates them.
"""

from __future__ import annotations

import copy
import socket
from typing import Any

from django.conf import settings as django_settings

from .core.prices import PriceBook
from .core.prices import parse as parse_prices

DEFAULTS: dict[str, Any] = {
    # Finished requests each process keeps in memory for the since-cursor poll: about
    # 0.7 KB each, or about 110 B past the newest 1024 in a ring of 2048 or more (packed).
    "RING_CAPACITY": 1024,
    # The most rows one poll returns, whatever ``limit`` asks; at most RING_CAPACITY.
    "MAX_PAGE": 256,
    # Seconds the decode/prefill throughput windows span.
    "RATE_WINDOW_S": 5.0,
    # Samples each throughput window keeps at most.
    "RATE_SAMPLE_CAP": 4096,
    # Seconds: the least span a rate divides by, so one fresh sample cannot explode.
    "RATE_MIN_SPAN_S": 1.0,
    # Seconds after which a gauge only some reports carry (pool occupancy, queue
    # depth) reads null again; None keeps the last report forever.
    "GAUGE_MAX_AGE_S": 60.0,
    # Models named apart in the per-label breakdown (heartbeats, /metrics), at most;
    # later ones count as "other", so clients cannot grow the label set without bound.
    "LABEL_MAX_MODELS": 20,
    # The name this process records as ``replica``; None means the host name.
    "REPLICA": None,
    # Dotted path of a callable taking ``instance=`` and returning the sink finished
    # records are handed to. None keeps records in memory only.
    "ARCHIVE_SINK": "ferrox_stats.archive.writer.from_settings",
    # The database alias the archive is written to.
    "ARCHIVE_DATABASE": "default",
    # Records waiting to be archived, at most; past it new records are dropped (counted).
    "ARCHIVE_QUEUE_MAX": 100_000,
    # Records per write (one COPY or bulk insert, one transaction).
    "ARCHIVE_BATCH_SIZE": 1000,
    # Seconds a partial batch waits before it is written anyway.
    "ARCHIVE_FLUSH_INTERVAL_S": 1.0,
    # Seconds: the longest wait between retries of a batch that could not commit.
    "ARCHIVE_RETRY_MAX_S": 30.0,
    # Seconds the queue may take to drain when the process exits.
    "ARCHIVE_SHUTDOWN_DEADLINE_S": 10.0,
    # Seconds between this process's heartbeats: its state document, upserted into the
    # archive's database (GET v1/fleet reads them) and written for the host's /metrics.
    # None: no heartbeat thread (the process is then absent from the fleet).
    "HEARTBEAT_S": 2.0,
    # Seconds without a heartbeat after which an instance that did not stop cleanly
    # counts as lost (before that, past 3 heartbeats, it is stale).
    "INSTANCE_LOST_S": 30.0,
    # Seconds a stopped or lost instance's row is kept before the heartbeats delete it.
    "INSTANCE_KEEP_S": 86400.0,
    # Whether each archive batch also adds its rows to the usage rollups (as deltas in
    # the batch's transaction, folded into the rollups soon after; README "Usage
    # rollups"). They cost the archive writer about half its rows/s (docs/benchmarks.md
    # "Rollup deltas"); the usage API and page read them.
    "ROLLUPS": True,
    # Seconds between folds of the batches' rollup deltas into the rollups, at most, by
    # each process's archive writer (archive/fold.py; a usage answer folds first).
    "ROLLUP_FOLD_S": 5.0,
    # Prices per model, per 1M tokens, each from a whole UTC hour on (core/prices.py):
    # {"llama-3-8b": [{"from": "2026-01-01", "input": 0.2, "output": 0.6,
    # "cached": 0.05}]}. A model without a price in force costs null, never 0.
    "PRICES": {},
    # Self-hosted engines' cost per hour, by replica, in the same form:
    # {"gpu-a-0": [{"from": "2026-01-01", "per_hour": 2.4}]}.
    "REPLICA_HOURLY_COST": {},
    # The currency PRICES and REPLICA_HOURLY_COST are in, as the usage API names it.
    "CURRENCY": "USD",
    # Rows (buckets x groups) one usage answer may hold; past it the answer is a 400
    # asking for a shorter range, a wider bucket or fewer groups.
    "USAGE_MAX_ROWS": 10_000,
    # Days finished requests are kept; None keeps them forever.
    "RETENTION_DAYS": 30,
    # Days the usage rollups are kept (ferrox_stats_prune), minute and hour buckets
    # apart: minute rows are 60x as many; hour rows outlive the archive's rows by
    # default (they are what is left of pruned requests). None keeps them forever.
    "ROLLUP_MINUTE_DAYS": 7,
    "ROLLUP_HOUR_DAYS": None,
    # Rows one prune statement deletes at most.
    "PRUNE_BATCH_SIZE": 5000,
    # API endpoints anyone may read without credentials, by name: "requests",
    # "stats", "admin_stats", "history", "history_detail", "history_export",
    # "schema", "docs", "fleet", "metrics", "usage", "usage_top". Everything else needs
    # a staff session or a token.
    "PUBLIC_ENDPOINTS": [],
    # Whether the host project's own drf-spectacular schema describes the app's API
    # (prefixed names, the "ferrox_stats" tag). False: only the app's schema does.
    "HOST_SCHEMA": False,
    # Where each process of this host writes its state for /metrics (one file per
    # process, plus retired.json summing processes that ended). None: a directory under
    # the system temp dir named for the settings module and the user. Wiping it (a
    # reboot wipes the default) resets the host's counters.
    "METRICS_DIR": None,
    # The metric families /metrics exposes: "otel" (OpenTelemetry GenAI names and
    # ferrox_stats_*), "vllm" (vLLM's names, for dashboards built on them).
    "METRICS_FAMILIES": ["otel"],
    # The prefix of the vLLM family's names: "<prefix>:e2e_request_latency_seconds".
    "METRICS_VLLM_PREFIX": "vllm",
    # Rows a since-cursor poll returns when it does not ask (capped at MAX_PAGE).
    "REQUESTS_DEFAULT_LIMIT": 100,
    # Rows a history page returns when it does not ask, and at most.
    "HISTORY_DEFAULT_LIMIT": 100,
    "HISTORY_MAX_PAGE": 500,
    # Records one ingest batch may hold, and the largest body it may send (bytes).
    "INGEST_MAX_BATCH": 1000,
    "INGEST_MAX_BODY_BYTES": 4 * 1024 * 1024,
    # Seconds a process trusts a token it checked before asking the database again
    # (a revocation elsewhere takes up to this long to reach it); 0 checks every time.
    "TOKEN_CACHE_S": 5.0,
    # Failed authentications (a bearer key that does not verify) each client address
    # may make, as "<n>/<second|minute|hour|day>": n at once, then one every period/n;
    # past it, 429 with Retry-After. None: unthrottled.
    "AUTH_FAILURE_RATE": "20/minute",
    # Seconds: while the database is unreachable, a token this process confirmed within
    # this long is still accepted (a token revoked meanwhile works up to this long
    # during an outage); others get 503. 0 refuses every unconfirmed token at once.
    "TOKEN_STALE_S": 300.0,
    # The OpenAI-compatible pass-through's upstream engines, by name: {"engine-a":
    # {"BASE_URL": "http://10.0.0.5:8000/v1", "API_KEY": None, "MODELS": ["llama-3-8b"]}}.
    # A request goes to the upstream that lists its model, else to the one without
    # MODELS (or with "*"). "STREAM_USAGE": False stops asking that upstream for usage
    # in streams (for an engine that rejects ``stream_options``).
    "PROXY_UPSTREAMS": {},
    # Whether the pass-through needs an API token with the infer scope; False lets
    # anyone through (recorded with a null via_api_key).
    "PROXY_REQUIRE_KEY": True,
    # The largest request body the pass-through forwards (bytes).
    "PROXY_MAX_BODY_BYTES": 8 * 1024 * 1024,
    # Seconds to connect to an upstream (and to wait for a pooled connection).
    "PROXY_CONNECT_TIMEOUT_S": 5.0,
    # Seconds an upstream may stay silent (before its answer, or between two reads of
    # a stream) before the request ends as upstream_timeout.
    "PROXY_READ_TIMEOUT_S": 600.0,
    # Connections this process keeps open to each upstream, at most.
    "PROXY_MAX_CONNECTIONS": 256,
    # DRF throttle rates per scope ("<n>/<second|minute|hour|day>"); None: unthrottled.
    "THROTTLE_RATES": {
        "ferrox_stats_ingest": "600/minute",
        "ferrox_stats_history": "600/minute",
    },
}


class Settings:
    """Typed accessors over ``settings.FERROX_STATS``, falling back to ``DEFAULTS``."""

    def _get(self, name: str) -> Any:
        user = getattr(django_settings, "FERROX_STATS", {}) or {}
        return user.get(name, DEFAULTS[name])

    @property
    def user_settings(self) -> Any:
        return getattr(django_settings, "FERROX_STATS", {})

    @property
    def RING_CAPACITY(self) -> int:
        return int(self._get("RING_CAPACITY"))

    @property
    def MAX_PAGE(self) -> int:
        return int(self._get("MAX_PAGE"))

    @property
    def RATE_WINDOW_S(self) -> float:
        return float(self._get("RATE_WINDOW_S"))

    @property
    def RATE_SAMPLE_CAP(self) -> int:
        return int(self._get("RATE_SAMPLE_CAP"))

    @property
    def RATE_MIN_SPAN_S(self) -> float:
        return float(self._get("RATE_MIN_SPAN_S"))

    @property
    def GAUGE_MAX_AGE_S(self) -> float | None:
        value = self._get("GAUGE_MAX_AGE_S")
        return None if value is None else float(value)

    @property
    def LABEL_MAX_MODELS(self) -> int:
        return int(self._get("LABEL_MAX_MODELS"))

    @property
    def REPLICA(self) -> str:
        value = self._get("REPLICA")
        return str(value) if value else socket.gethostname()

    @property
    def ARCHIVE_SINK(self) -> str | None:
        value = self._get("ARCHIVE_SINK")
        return None if value is None else str(value)

    @property
    def ARCHIVE_DATABASE(self) -> str:
        return str(self._get("ARCHIVE_DATABASE"))

    @property
    def ARCHIVE_QUEUE_MAX(self) -> int:
        return int(self._get("ARCHIVE_QUEUE_MAX"))

    @property
    def ARCHIVE_BATCH_SIZE(self) -> int:
        return int(self._get("ARCHIVE_BATCH_SIZE"))

    @property
    def ARCHIVE_FLUSH_INTERVAL_S(self) -> float:
        return float(self._get("ARCHIVE_FLUSH_INTERVAL_S"))

    @property
    def ARCHIVE_RETRY_MAX_S(self) -> float:
        return float(self._get("ARCHIVE_RETRY_MAX_S"))

    @property
    def ARCHIVE_SHUTDOWN_DEADLINE_S(self) -> float:
        return float(self._get("ARCHIVE_SHUTDOWN_DEADLINE_S"))

    @property
    def HEARTBEAT_S(self) -> float | None:
        value = self._get("HEARTBEAT_S")
        return None if value is None else float(value)

    @property
    def INSTANCE_LOST_S(self) -> float:
        return float(self._get("INSTANCE_LOST_S"))

    @property
    def INSTANCE_KEEP_S(self) -> float:
        return float(self._get("INSTANCE_KEEP_S"))

    @property
    def ROLLUP_MINUTE_DAYS(self) -> float | None:
        value = self._get("ROLLUP_MINUTE_DAYS")
        return None if value is None else float(value)

    @property
    def ROLLUP_HOUR_DAYS(self) -> float | None:
        value = self._get("ROLLUP_HOUR_DAYS")
        return None if value is None else float(value)

    @property
    def RETENTION_DAYS(self) -> float | None:
        value = self._get("RETENTION_DAYS")
        return None if value is None else float(value)

    @property
    def PRUNE_BATCH_SIZE(self) -> int:
        return int(self._get("PRUNE_BATCH_SIZE"))

    @property
    def PUBLIC_ENDPOINTS(self) -> frozenset[str]:
        return frozenset(self._get("PUBLIC_ENDPOINTS"))

    @property
    def HOST_SCHEMA(self) -> bool:
        return bool(self._get("HOST_SCHEMA"))

    @property
    def METRICS_DIR(self) -> str | None:
        value = self._get("METRICS_DIR")
        return str(value) if value else None

    @property
    def METRICS_FAMILIES(self) -> frozenset[str]:
        return frozenset(self._get("METRICS_FAMILIES"))

    @property
    def METRICS_VLLM_PREFIX(self) -> str:
        return str(self._get("METRICS_VLLM_PREFIX"))

    @property
    def REQUESTS_DEFAULT_LIMIT(self) -> int:
        return int(self._get("REQUESTS_DEFAULT_LIMIT"))

    @property
    def HISTORY_DEFAULT_LIMIT(self) -> int:
        return int(self._get("HISTORY_DEFAULT_LIMIT"))

    @property
    def HISTORY_MAX_PAGE(self) -> int:
        return int(self._get("HISTORY_MAX_PAGE"))

    @property
    def INGEST_MAX_BATCH(self) -> int:
        return int(self._get("INGEST_MAX_BATCH"))

    @property
    def INGEST_MAX_BODY_BYTES(self) -> int:
        return int(self._get("INGEST_MAX_BODY_BYTES"))

    @property
    def TOKEN_CACHE_S(self) -> float:
        return float(self._get("TOKEN_CACHE_S"))

    @property
    def AUTH_FAILURE_RATE(self) -> str | None:
        value = self._get("AUTH_FAILURE_RATE")
        return None if value is None else str(value)

    @property
    def TOKEN_STALE_S(self) -> float:
        return float(self._get("TOKEN_STALE_S"))

    @property
    def THROTTLE_RATES(self) -> dict[str, str | None]:
        # A partial dict overrides only the scopes it names.
        return {**DEFAULTS["THROTTLE_RATES"], **(self._get("THROTTLE_RATES") or {})}

    @property
    def PROXY_UPSTREAMS(self) -> dict[str, dict[str, Any]]:
        return dict(self._get("PROXY_UPSTREAMS") or {})

    @property
    def ROLLUPS(self) -> bool:
        return bool(self._get("ROLLUPS"))

    @property
    def ROLLUP_FOLD_S(self) -> float:
        return float(self._get("ROLLUP_FOLD_S"))

    # The last PRICES and REPLICA_HOURLY_COST parsed (a copy, so that a change made in
    # place is seen), and their book.
    _priced: tuple[tuple[Any, Any], PriceBook] | None = None

    @property
    def PRICE_BOOK(self) -> PriceBook:
        """``PRICES`` and ``REPLICA_HOURLY_COST`` parsed (the checks refuse bad ones),
        once per value they take: a catalogue of 50 models cost each usage answer 2.4 ms
        and 150 objects to parse again."""
        given = (self._get("PRICES"), self._get("REPLICA_HOURLY_COST"))
        priced = self._priced
        if priced is None or priced[0] != given:
            priced = self._priced = (copy.deepcopy(given), parse_prices(*given))
        return priced[1]

    @property
    def CURRENCY(self) -> str:
        return str(self._get("CURRENCY"))

    @property
    def USAGE_MAX_ROWS(self) -> int:
        return int(self._get("USAGE_MAX_ROWS"))

    @property
    def PROXY_REQUIRE_KEY(self) -> bool:
        return bool(self._get("PROXY_REQUIRE_KEY"))

    @property
    def PROXY_MAX_BODY_BYTES(self) -> int:
        return int(self._get("PROXY_MAX_BODY_BYTES"))

    @property
    def PROXY_CONNECT_TIMEOUT_S(self) -> float:
        return float(self._get("PROXY_CONNECT_TIMEOUT_S"))

    @property
    def PROXY_READ_TIMEOUT_S(self) -> float:
        return float(self._get("PROXY_READ_TIMEOUT_S"))

    @property
    def PROXY_MAX_CONNECTIONS(self) -> int:
        return int(self._get("PROXY_MAX_CONNECTIONS"))


conf = Settings()
