"""A load generator run: worker threads that claim plans and play them through the feeders.

Each worker claims the next request, plays it in-process, reports it over ingest or
sends it as an OpenAI call through a pass-through, then thinks; the run stops by itself
at a request count or a deadline, or at ``stop()``. It sleeps on purpose: the sleeps
stand in for serving time (``speed`` divides them). A pass-through call takes what the
engine behind takes, whatever the speed.
"""

from __future__ import annotations

import copy
import random
import threading
import time
from collections.abc import Callable

from ferrox_stats import live

from .ingest_client import IngestClient, Sender, ingest_record
from .inprocess import InProcessFeeder
from .openai_client import Call, CallResult, OpenAIClient, PassThroughRefused, plan_call
from .plan import REFUSED, RequestPlan, plan_request
from .pool import Pool
from .report import Report

IN_PROCESS, INGEST, PASS_THROUGH = "in-process", "ingest", "pass-through"


class LoadGenerator:
    """Plays planned requests from ``concurrency`` threads until a bound, then stops.

    ``requests`` bounds the count; ``duration_s`` (wall seconds) the time: no request
    starts that would end after it, and a pass-through call still going is left. Of the
    requests, ``ingest_share`` are reported to ``ingest`` and ``openai_share`` sent to
    ``openai``; the rest are played through ``recorder`` (this process's by default).
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
        openai_share: float = 0.0,
        openai: OpenAIClient | None = None,
        recorder: live.Recorder | None = None,
        think_s: float = 0.5,
        batch_interval_s: float = 0.75,
        batch_max: int = 100,
    ) -> None:
        if requests is None and duration_s is None:
            raise ValueError("a run needs a bound: requests or duration_s")
        if ingest_share > 0 and ingest is None:
            raise ValueError("ingest_share > 0 needs an ingest client")
        if openai_share > 0 and (openai is None or not openai.models):
            raise ValueError("openai_share > 0 needs an OpenAI client that knows its models")
        if ingest_share + openai_share > 1:
            raise ValueError("ingest_share and openai_share add up to more than 1")
        self.requests = requests
        self.duration_s = duration_s
        self.concurrency = concurrency
        self.speed = speed
        self.ingest_share = ingest_share
        self.ingest = ingest
        self.openai_share = openai_share
        self.openai = openai
        self.recorder = recorder
        self.think_s = think_s
        self.batch_interval_s = batch_interval_s
        self.batch_max = batch_max
        self.pool = Pool()
        self.report = Report(pass_through=0 if openai_share > 0 else None)
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
        if self.recorder is None and self.ingest_share + self.openai_share < 1:
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

    def _claim(self) -> tuple[RequestPlan | Call | None, str, float] | None:
        """The next request to play and its feeder (``None`` inside when it would overrun
        the deadline)."""
        with self._lock:
            if self._stop.is_set() or (self.requests is not None and self._issued >= self.requests):
                return None
            # Every request draws a plan first: runs without the pass-through draw the
            # same requests from a seed as before it existed.
            plan = plan_request(self._rng)
            feeder = self._feeder(self._rng.random())
            work: RequestPlan | Call = plan
            if feeder == PASS_THROUGH:
                assert self.openai is not None
                work = plan_call(self._rng, self.openai.models)
            think = self._rng.expovariate(1 / self.think_s) if self.think_s > 0 else 0.0
            if self._deadline is not None:
                now = time.monotonic()
                if now >= self._deadline:
                    return None
                # A call's length is the engine's to decide: it is cut at the deadline instead.
                if feeder != PASS_THROUGH and now + plan.duration_s / self.speed > self._deadline:
                    return None, feeder, think
            self._issued += 1
            return work, feeder, think

    def _feeder(self, draw: float) -> str:
        if draw < self.ingest_share:
            return INGEST
        # Shares that add up to 1 leave no in-process feeder, whatever the float rounding.
        if draw < self.ingest_share + self.openai_share or self._in_process is None:
            return PASS_THROUGH if self.openai_share > 0 else INGEST
        return IN_PROCESS

    def _work(self) -> None:
        while (claim := self._claim()) is not None:
            work, feeder, think = claim
            if isinstance(work, Call):
                self._call(work)
            elif work is not None:
                outcome = self._report(work) if feeder == INGEST else self._serve(work)
                with self._lock:
                    self.report.outcomes[outcome] += 1
                    if feeder == INGEST:
                        self.report.ingest += 1
                    else:
                        self.report.in_process += 1
            wait = think / self.speed
            if self._deadline is not None:
                wait = min(wait, max(0.0, self._deadline - time.monotonic()))
            if self._stop.wait(wait):
                return

    def _leaving(self) -> bool:
        """Whether a call in flight should end now: the run stopped or reached its deadline."""
        deadline = self._deadline
        return self._stop.is_set() or (deadline is not None and time.monotonic() >= deadline)

    def _call(self, call: Call) -> None:
        client = self.openai
        assert client is not None
        timeout_s = None if self._deadline is None else self._deadline - time.monotonic()
        try:
            result = client.send(call, self._leaving, timeout_s)
        except PassThroughRefused as exc:
            with self._lock:
                self.report.fatal = str(exc)
            self.stop()
            result = CallResult(REFUSED)
        with self._lock:
            report = self.report
            report.outcomes[result.outcome] += 1
            report.pass_through = (report.pass_through or 0) + 1
            report.streamed += int(call.stream)
            report.tokens += result.tokens
            report.unreachable += int(result.unreachable)

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
