"""The ingest feeder: plans reported to an ingest endpoint over HTTP, as an engine would.

``ingest_record`` is the item an engine reports for a finished request; ``IngestClient``
POSTs batches of them with a bearer token (stdlib ``urllib``, this machine only);
``Sender`` batches from the worker threads onto one background thread, one POST per
interval or per full batch, and retries what failed until the run closes it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable
from typing import Any

from ferrox_stats.core.serving import CLIENT_DISCONNECT

from .plan import ABORTED, REFUSED, RequestPlan
from .pool import Pool
from .report import Report


class IngestRefused(Exception):
    """The endpoint refused a batch for a reason that retrying will not fix."""


def check_local_url(url: str) -> str:
    """``url`` if it is http(s) on this machine; a load generator never aims elsewhere."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL")
    host = parts.hostname
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if not local:
        raise ValueError(f"the load generator only targets this machine, not {host!r}")
    return url


class IngestClient:
    """POSTs batches to an ingest endpoint with a bearer token (stdlib only)."""

    def __init__(self, url: str, secret: str, instance: str | None = None) -> None:
        self.url = check_local_url(url)
        self._secret = secret
        self.instance = instance or f"loadgen-{os.getpid()}"
        # Localhost only: no environment proxy may sit in between.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(self, records: list[dict[str, Any]], gauges: dict[str, int] | None) -> dict[str, Any]:
        """The endpoint's answer; ``OSError`` when worth retrying, ``IngestRefused`` if not."""
        body: dict[str, Any] = {"records": records, "instance": self.instance}
        if gauges is not None:
            body["gauges"] = gauges
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {self._secret}", "Content-Type": "application/json"},
        )
        try:
            with self._opener.open(request, timeout=10) as response:
                answer: dict[str, Any] = json.load(response)
                return answer
        except urllib.error.HTTPError as exc:
            if exc.code == 429 or exc.code >= 500:
                raise
            raise IngestRefused(f"the ingest endpoint answered {exc.code} {exc.reason}") from None
        except ValueError:
            raise IngestRefused("the ingest endpoint did not answer JSON") from None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def ingest_record(plan: RequestPlan, at_ms: int, seq: int) -> dict[str, Any]:
    """The ingest item an engine would report for this request, finished at ``at_ms``."""
    refused = plan.outcome == REFUSED
    return {
        "request_id": plan.request_id,
        "seq": seq,
        "at_ms": at_ms,
        "route": plan.route,
        "model": plan.model,
        "status": plan.status,
        "stream": plan.stream,
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": None if refused else plan.completion_tokens,
        "cached_tokens": plan.cached_tokens,
        "ttft_ms": _ms(plan.ttft_s),
        "duration_ms": _ms(plan.duration_s),
        "queue_ms": None if refused else _ms(plan.queue_s),
        "decode_ms": _ms(plan.decode_s) if plan.completion_tokens else None,
        "finish_reason": plan.finish_reason,
        "aborted": CLIENT_DISCONNECT if plan.outcome == ABORTED else None,
        "error": plan.error,
        "client": plan.client,
        "via_api_key": plan.via_api_key,
    }


class Sender:
    """Batches ingest records: one POST per interval or per full batch, retried on failure.

    What it learns goes into ``report`` under ``lock`` (the run's, shared with its
    workers); a refusal that retrying will not fix calls ``stop`` to end the run.
    """

    def __init__(
        self,
        client: IngestClient,
        *,
        report: Report,
        lock: threading.Lock,
        pool: Pool,
        stop: Callable[[], None],
        batch_max: int,
        batch_interval_s: float,
    ) -> None:
        self._client = client
        self._report = report
        self._lock = lock
        self._pool = pool
        self._stop = stop
        self._batch_max = batch_max
        self._batch_interval_s = batch_interval_s
        self._records: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._dead = False
        self._thread = threading.Thread(target=self._run, name="ferrox-loadgen-ingest", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, record: dict[str, Any]) -> None:
        with self._cond:
            # Bounded: a long outage costs records (counted), not memory.
            if self._dead or len(self._records) >= 100 * self._batch_max:
                with self._lock:
                    self._report.unsent += 1
                return
            self._records.append(record)
            if len(self._records) >= self._batch_max:
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._closing or len(self._records) >= self._batch_max,
                    self._batch_interval_s,
                )
                closing = self._closing
            # On close everything left gets one attempt; what fails then stays unsent.
            while self._send() and closing:
                pass
            if closing or self._dead:
                with self._cond, self._lock:
                    self._report.unsent += len(self._records)
                    self._records.clear()
                return

    def _send(self) -> bool:
        """POST the batch at the head; whether one went through and more may follow."""
        report = self._report
        with self._cond:
            batch = [self._records[i] for i in range(min(self._batch_max, len(self._records)))]
        if not batch:
            return False
        with self._lock:
            # Gauges ride on some reports only, as an engine's would.
            gauges = self._pool.gauges() if report.batches % 3 == 0 else None
        try:
            answer = self._client.post(batch, gauges)
        except OSError:
            with self._lock:
                report.failed_posts += 1
            return False
        except IngestRefused as exc:
            self._dead = True
            with self._lock:
                report.fatal = str(exc)
            self._stop()
            return False
        with self._cond:
            for _ in batch:
                self._records.popleft()
        with self._lock:
            report.batches += 1
            for name in ("accepted", "duplicate", "rejected"):
                setattr(report, name, getattr(report, name) + int(answer.get(name, 0)))
        return True
