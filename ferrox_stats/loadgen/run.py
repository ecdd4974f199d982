"""A load generator run: worker threads that claim plans and play them through the feeders.

Each worker claims the next plan, plays it either in-process or over ingest, then
thinks; the run stops by itself at a request count or a deadline, or at ``stop()``.
It sleeps on purpose: the sleeps stand in for serving time (``speed`` divides them).
"""

from __future__ import annotations

import copy
import random
import threading
import time
from collections.abc import Callable

from .. import live
from .ingest_client import IngestClient, Sender, ingest_record
from .inprocess import InProcessFeeder
from .plan import RequestPlan, plan_request
from .pool import Pool
from .report import Report


class LoadGenerator:
    """Plays planned requests from ``concurrency`` threads until a bound, then stops.

    ``requests`` bounds the count; ``duration_s`` (wall seconds) the time: no request
    starts that would end after it. ``ingest_share`` of the requests are reported to
    ``ingest`` instead of played through ``recorder`` (this process's by default).
    """

    def __init__(
        self,
        *,
        requests: int | None = None,
        duration_s: float | None = None,
        concurrency: int = 4,
        seed: int | None = None,
        speed: float = 1.0,
        ingest_share: float = 0.0,
        ingest: IngestClient | None = None,
        recorder: live.Recorder | None = None,
        think_s: float = 0.5,
        batch_interval_s: float = 0.75,
        batch_max: int = 100,
    ) -> None:
        if requests is None and duration_s is None:
            raise ValueError("a run needs a bound: requests or duration_s")
        if ingest_share > 0 and ingest is None:
            raise ValueError("ingest_share > 0 needs an ingest client")
        self.requests = requests
        self.duration_s = duration_s
        self.concurrency = concurrency
        self.speed = speed
        self.ingest_share = ingest_share
        self.ingest = ingest
        self.recorder = recorder
        self.think_s = think_s
        self.batch_interval_s = batch_interval_s
        self.batch_max = batch_max
        self.pool = Pool()
        self.report = Report()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._issued = 0
        self._seq = 0  # of ingest records, as a producer numbers its own
        self._in_process: InProcessFeeder | None = None
        self._sender: Sender | None = None
        self._deadline: float | None = None

    def stop(self) -> None:
        """End the run now: requests in flight end as client aborts."""
        self._stop.set()

    def snapshot(self) -> Report:
        with self._lock:
            return copy.deepcopy(self.report)

    def run(
        self, progress: Callable[[float, Report], None] | None = None, every_s: float = 10.0
    ) -> Report:
        """Play until the bound (or ``stop()``); ``progress`` hears from this thread."""
        started = time.monotonic()
        if self.duration_s is not None:
            self._deadline = started + self.duration_s
        if self.recorder is None and self.ingest_share < 1:
            self.recorder = live.get_recorder()
        if self.recorder is not None:
            self._in_process = InProcessFeeder(self.recorder, self.pool)
        sender = self._sender = (
            Sender(
                self.ingest,
                report=self.report,
                lock=self._lock,
                pool=self.pool,
                stop=self.stop,
                batch_max=self.batch_max,
                batch_interval_s=self.batch_interval_s,
            )
            if self.ingest is not None
            else None
        )
        if sender is not None:
            sender.start()
        workers = [
            threading.Thread(target=self._work, name=f"ferrox-loadgen-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for worker in workers:
            worker.start()
        last = started
        for worker in workers:
            while worker.is_alive():
                # Short joins: a signal handler in this thread can still stop the run.
                worker.join(0.2)
                now = time.monotonic()
                if progress is not None and now - last >= every_s:
                    last = now
                    progress(now - started, self.snapshot())
        if sender is not None:
            sender.close()
        return self.snapshot()

    def _claim(self) -> tuple[RequestPlan | None, bool, float] | None:
        """The next request to play (``None`` inside when it would overrun the deadline)."""
        with self._lock:
            if self._stop.is_set() or (self.requests is not None and self._issued >= self.requests):
                return None
            plan = plan_request(self._rng)
            via_ingest = self._rng.random() < self.ingest_share
            think = self._rng.expovariate(1 / self.think_s) if self.think_s > 0 else 0.0
            if self._deadline is not None:
                now = time.monotonic()
                if now >= self._deadline:
                    return None
                if now + plan.duration_s / self.speed > self._deadline:
                    return None, False, think
            self._issued += 1
            return plan, via_ingest, think

    def _work(self) -> None:
        while (claim := self._claim()) is not None:
            plan, via_ingest, think = claim
            if plan is not None:
                outcome = self._report(plan) if via_ingest else self._serve(plan)
                with self._lock:
                    self.report.outcomes[outcome] += 1
                    if via_ingest:
                        self.report.ingest += 1
                    else:
                        self.report.in_process += 1
            wait = think / self.speed
            if self._deadline is not None:
                wait = min(wait, max(0.0, self._deadline - time.monotonic()))
            if self._stop.wait(wait):
                return

    def _pause(self, seconds: float) -> None:
        if self._stop.is_set() or (seconds > 0 and self._stop.wait(seconds / self.speed)):
            raise live.ClientDisconnected

    def _serve(self, plan: RequestPlan) -> str:
        feeder = self._in_process
        assert feeder is not None
        return feeder.serve(plan, self._pause)

    def _report(self, plan: RequestPlan) -> str:
        with self.pool.hold(plan):
            started = time.monotonic()
            if self._stop.wait(plan.duration_s / self.speed):
                plan = plan.cut((time.monotonic() - started) * self.speed)
        with self._lock:
            seq = self._seq
            self._seq += 1
        sender = self._sender
        assert sender is not None
        sender.put(ingest_record(plan, time.time_ns() // 1_000_000, seq))
        return plan.outcome
