"""Plausible inference traffic for demos and soak runs, played through the real feeders.

``plan_request`` is the traffic model: a pure function of a seeded ``random.Random``
(several models, streaming and not, lognormal prompt and completion sizes, TTFT that
grows with the uncached prompt, per-model decode speed, client aborts, engine errors,
refusals). ``LoadGenerator`` plays plans from worker threads, each one either through
this process's in-process tracker or reported to an ingest endpoint over HTTP in
batches, and stops by itself at a request count or a deadline.

It sleeps on purpose: the sleeps stand in for serving time (``speed`` divides them).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import math
import os
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from . import live
from .core.serving import CLIENT_DISCONNECT

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
OK, ABORTED, ERROR, REFUSED = "ok", "aborted", "error", "refused"
OUTCOMES = (OK, ABORTED, ERROR, REFUSED)


@dataclass(frozen=True)
class ModelProfile:
    name: str
    weight: float  # share of the traffic
    prefill_ms: float  # median prefill of a 500-token uncached prompt
    decode_tps: float  # median decode speed of one request, tokens/s


MODELS = (
    ModelProfile("llama-3.1-8b-instruct", 40, 70.0, 95.0),
    ModelProfile("qwen2.5-14b-instruct", 25, 120.0, 60.0),
    ModelProfile("mistral-small-24b-instruct", 20, 190.0, 42.0),
    ModelProfile("llama-3.3-70b-instruct", 15, 380.0, 24.0),
)
API_KEYS: tuple[tuple[str | None, float], ...] = (
    ("team-search", 35),
    ("team-chat", 35),
    ("batch-eval", 15),
    (None, 15),
)
# Cumulative outcome thresholds on one uniform draw.
RATE_LIMITED, BAD_REQUEST, ABORT, ENGINE_ERROR = 0.015, 0.005, 0.04, 0.02


class EngineError(Exception):
    """The engine failed mid-request (the tracker records the class name, status 500)."""


class EngineTimeout(Exception):
    """The engine stopped answering."""


ENGINE_ERRORS: dict[str, tuple[type[Exception], int]] = {
    "EngineError": (EngineError, 500),
    "EngineTimeout": (EngineTimeout, 504),
}


@dataclass(frozen=True)
class RequestPlan:
    """One request, decided in advance: what it asks, how it is served, how it ends."""

    request_id: str
    model: str
    route: str
    stream: bool
    client: str
    via_api_key: str | None
    outcome: str  # one of OUTCOMES
    status: int | None  # None: the client left before any response began
    prompt_tokens: int | None  # None: refused before it was tokenized
    cached_tokens: int | None
    completion_tokens: int  # produced before it ended
    queue_s: float
    prefill_s: float
    decode_tps: float
    tail_s: float  # after the last token (or all of a refusal)
    finish_reason: str | None = None
    error: str | None = None  # an ENGINE_ERRORS name

    @property
    def ttft_s(self) -> float | None:
        return self.queue_s + self.prefill_s if self.completion_tokens else None

    @property
    def decode_s(self) -> float:
        return (self.completion_tokens - 1) / self.decode_tps if self.completion_tokens else 0.0

    @property
    def duration_s(self) -> float:
        return self.queue_s + self.prefill_s + self.decode_s + self.tail_s

    def cut(self, at_s: float) -> RequestPlan:
        """The same request, its client gone ``at_s`` seconds after arrival."""
        if at_s >= self.duration_s or self.outcome == REFUSED:
            return self
        queue = min(self.queue_s, at_s)
        prefill = min(self.prefill_s, at_s - queue)
        produced = 0
        if self.completion_tokens and queue + prefill >= self.queue_s + self.prefill_s:
            decoded = at_s - queue - prefill
            produced = min(self.completion_tokens, 1 + int(decoded * self.decode_tps))
        plan = replace(self, queue_s=queue, prefill_s=prefill, completion_tokens=produced)
        return replace(
            plan,
            outcome=ABORTED,
            status=200 if self.stream else None,
            finish_reason=None,
            error=None,
            tail_s=max(0.0, at_s - (plan.duration_s - plan.tail_s)),
        )


def plan_request(rng: random.Random, models: Sequence[ModelProfile] = MODELS) -> RequestPlan:
    """Draw one request from the traffic model; the same rng state draws the same plan."""
    profile = rng.choices(models, weights=[m.weight for m in models])[0]
    route = CHAT if rng.random() < 0.8 else COMPLETIONS
    stream = rng.random() < 0.65
    tps = profile.decode_tps * rng.lognormvariate(0, 0.12)
    prompt = min(16_000, max(8, round(rng.lognormvariate(math.log(350), 0.9))))
    cached = round(prompt * rng.uniform(0.3, 0.9)) if rng.random() < 0.4 else 0
    congested = rng.random() < 0.08
    # Prefill grows with what the prefix cache did not cover.
    prefill = profile.prefill_ms / 1000 * (0.25 + (prompt - cached) / 600)
    max_tokens = 256 if rng.random() < 0.3 else 1024
    wanted = max(1, round(rng.lognormvariate(math.log(160), 0.9)))
    plan = RequestPlan(
        request_id=f"{'chatcmpl' if route == CHAT else 'cmpl'}-{rng.getrandbits(96):024x}",
        model=profile.name,
        route=route,
        stream=stream,
        client=f"10.0.{rng.randrange(4)}.{rng.randint(2, 250)}",
        via_api_key=rng.choices([k for k, _ in API_KEYS], weights=[w for _, w in API_KEYS])[0],
        outcome=OK,
        status=200,
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=min(wanted, max_tokens),
        queue_s=rng.expovariate(1 / 0.6) if congested else rng.expovariate(1 / 0.015),
        prefill_s=prefill * rng.lognormvariate(0, 0.3),
        decode_tps=tps,
        tail_s=rng.uniform(0.001, 0.01),
        finish_reason="length" if wanted >= max_tokens else "stop",
    )
    u = rng.random()
    if u < RATE_LIMITED + BAD_REQUEST:
        return replace(
            plan,
            outcome=REFUSED,
            status=429 if u < RATE_LIMITED else 400,
            prompt_tokens=None,
            cached_tokens=None,
            completion_tokens=0,
            queue_s=0.0,
            prefill_s=0.0,
            tail_s=rng.uniform(0.001, 0.004),
            finish_reason=None,
        )
    u -= RATE_LIMITED + BAD_REQUEST
    if u >= ABORT + ENGINE_ERROR:
        return plan
    produced = rng.randint(0, plan.completion_tokens - 1)
    if u < ABORT:
        return replace(
            plan,
            outcome=ABORTED,
            status=200 if stream else None,  # a stream's headers went out with its start
            completion_tokens=produced,
            prefill_s=plan.prefill_s if produced else plan.prefill_s * rng.random(),
            tail_s=rng.uniform(0, 1 / tps) if produced else 0.0,
            finish_reason=None,
        )
    name = "EngineTimeout" if rng.random() < 0.3 else "EngineError"
    return replace(
        plan,
        outcome=ERROR,
        status=ENGINE_ERRORS[name][1],
        completion_tokens=produced,
        tail_s=rng.uniform(1.0, 4.0) if name == "EngineTimeout" else rng.uniform(0, 0.05),
        finish_reason=None,
        error=name,
    )


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


def play(plan: RequestPlan, recorder: live.Recorder, pause: Callable[[float], None]) -> str:
    """Serve ``plan`` through ``recorder``'s tracker; returns how it really ended.

    ``pause(seconds)`` stands in for serving time; raising ``ClientDisconnected`` from it
    (the run is stopping) ends the request as a client abort, as it would be.
    """
    tracker = recorder.track(
        route=plan.route,
        model=plan.model,
        stream=plan.stream,
        request_id=plan.request_id,
        client=plan.client,
        via_api_key=plan.via_api_key,
    )
    try:
        with tracker as t:
            if plan.outcome == REFUSED:
                pause(plan.tail_s)
                t.finish(status=plan.status)
                return REFUSED
            pause(plan.queue_s)
            t.started()
            t.tokens(prompt=plan.prompt_tokens or 0)
            t.cached_tokens = plan.cached_tokens
            t.status = plan.status
            pause(plan.prefill_s)
            produced = 0
            if plan.completion_tokens:
                # A non-streaming response still has a first token; only the totals wait.
                if plan.stream:
                    t.tokens(completion=1)
                else:
                    t.first_token()
                produced = 1
            chunk = max(1, round(plan.decode_tps / 10))  # about ten deltas a second
            while produced < plan.completion_tokens:
                n = min(chunk, plan.completion_tokens - produced)
                pause(n / plan.decode_tps)
                if plan.stream:
                    t.tokens(completion=n)
                produced += n
            pause(plan.tail_s)
            if plan.outcome == ABORTED:
                raise live.ClientDisconnected
            if plan.error is not None:
                raise ENGINE_ERRORS[plan.error][0]
            t.finish(
                status=plan.status,
                finish_reason=plan.finish_reason,
                prompt_tokens=plan.prompt_tokens,
                completion_tokens=plan.completion_tokens,
            )
            return OK
    except live.ClientDisconnected:
        return ABORTED
    except (EngineError, EngineTimeout):
        return ERROR


class Pool:
    """KV-cache blocks held by requests in flight: what the occasional pool reports say."""

    def __init__(self, blocks: int = 1024, block_tokens: int = 16) -> None:
        self.blocks = blocks
        self.block_tokens = block_tokens
        self._tokens = 0
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, plan: RequestPlan) -> Iterator[None]:
        tokens = (plan.prompt_tokens or 0) + plan.completion_tokens
        with self._lock:
            self._tokens += tokens
        try:
            yield
        finally:
            with self._lock:
                self._tokens -= tokens

    def gauges(self) -> dict[str, int]:
        with self._lock:
            used = min(self.blocks, math.ceil(self._tokens / self.block_tokens))
        return {"pool_used": used, "pool_total": self.blocks}


# -- ingest over HTTP ----------------------------------------------------------------------


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


@dataclass
class Report:
    """What a run did: requests by outcome and feeder, and what ingest answered."""

    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    in_process: int = 0
    ingest: int = 0
    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    unsent: int = 0
    batches: int = 0
    failed_posts: int = 0
    fatal: str | None = None

    @property
    def total(self) -> int:
        return self.in_process + self.ingest

    def line(self) -> str:
        outcomes = ", ".join(f"{name} {self.outcomes[name]}" for name in OUTCOMES)
        return (
            f"{self.total} requests: {outcomes}; in-process {self.in_process}, "
            f"ingest {self.ingest} (accepted {self.accepted}, duplicate {self.duplicate}, "
            f"rejected {self.rejected}, unsent {self.unsent})"
        )


class _Sender:
    """Batches ingest records: one POST per interval or per full batch, retried on failure."""

    def __init__(self, gen: LoadGenerator, client: IngestClient) -> None:
        self._gen = gen
        self._client = client
        self._records: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._dead = False
        self._thread = threading.Thread(target=self._run, name="ferrox-loadgen-ingest", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, record: dict[str, Any]) -> None:
        gen = self._gen
        with self._cond:
            # Bounded: a long outage costs records (counted), not memory.
            if self._dead or len(self._records) >= 100 * gen.batch_max:
                with gen._lock:
                    gen.report.unsent += 1
                return
            self._records.append(record)
            if len(self._records) >= gen.batch_max:
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        gen = self._gen
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._closing or len(self._records) >= gen.batch_max,
                    gen.batch_interval_s,
                )
                closing = self._closing
            # On close everything left gets one attempt; what fails then stays unsent.
            while self._send() and closing:
                pass
            if closing or self._dead:
                with self._cond, gen._lock:
                    gen.report.unsent += len(self._records)
                    self._records.clear()
                return

    def _send(self) -> bool:
        """POST the batch at the head; whether one went through and more may follow."""
        gen = self._gen
        with self._cond:
            batch = [self._records[i] for i in range(min(gen.batch_max, len(self._records)))]
        if not batch:
            return False
        with gen._lock:
            # Gauges ride on some reports only, as an engine's would.
            gauges = gen.pool.gauges() if gen.report.batches % 3 == 0 else None
        try:
            answer = self._client.post(batch, gauges)
        except OSError:
            with gen._lock:
                gen.report.failed_posts += 1
            return False
        except IngestRefused as exc:
            self._dead = True
            with gen._lock:
                gen.report.fatal = str(exc)
            gen.stop()
            return False
        with self._cond:
            for _ in batch:
                self._records.popleft()
        with gen._lock:
            gen.report.batches += 1
            for name in ("accepted", "duplicate", "rejected"):
                setattr(gen.report, name, getattr(gen.report, name) + int(answer.get(name, 0)))
        return True


# -- the generator -------------------------------------------------------------------------


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
        self._served = 0
        self._sender: _Sender | None = None
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
        sender = self._sender = _Sender(self, self.ingest) if self.ingest is not None else None
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
        recorder = self.recorder
        assert recorder is not None
        with self.pool.hold(plan):
            outcome = play(plan, recorder, self._pause)
            with self._lock:
                self._served += 1
                report_gauges = self._served % 5 == 0  # an occasional pool report
            if report_gauges:
                recorder.observe_gauges(**self.pool.gauges())
        return outcome

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
