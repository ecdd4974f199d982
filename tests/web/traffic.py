"""Plausible serving traffic, played through the in-process tracker on a fake clock.

Requests overlap as they would on a real engine (queue, prefill, a stream of tokens,
some aborts and errors), so the dashboard has realistic counters, rates and
percentiles without a test waiting on a real clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ferrox_stats import live
from tests.conftest import FakeClock

MODELS = ("llama-3.1-8b-instruct", "llama-3.1-70b-instruct", "qwen2.5-32b-instruct")
ROUTES = ("/v1/chat/completions", "/v1/chat/completions", "/v1/completions")
CLIENTS = ("10.0.0.7", "10.0.0.12", "10.0.3.40", "search-batch")
STEP_S = 0.1


@dataclass
class Flight:
    tracker: live.Tracker
    arrived: float
    queue_s: float
    ttft_s: float
    itl_s: float
    prompt: int
    completion: int
    fate: str  # "ok", "abort" or "error"
    emitted: int = 0
    next_token_at: float = field(default=0.0)


@dataclass
class Traffic:
    """Requests arriving at ``rate`` per second; ``play(seconds)`` advances the clock."""

    recorder: live.Recorder
    clock: FakeClock
    rate: float = 8.0
    seed: int = 7
    flights: list[Flight] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.n = 0

    def play(self, seconds: float) -> None:
        end = self.clock.monotonic() + seconds
        while self.clock.monotonic() < end - 1e-9:
            self._arrive()
            now = self.clock.monotonic()
            for flight in list(self.flights):
                self._advance(flight, now)
            used = sum(f.prompt + f.emitted for f in self.flights)
            queued = sum(1 for f in self.flights if now - f.arrived < f.queue_s)
            self.recorder.observe_gauges(
                pool_used=min(used, 60_000), pool_total=65_536, queue_depth=queued
            )
            # Uneven steps, so latencies do not all land on multiples of one step.
            self.clock.advance(min(STEP_S * self.rng.uniform(0.5, 1.5), end - now))

    def _arrive(self) -> None:
        rng = self.rng
        arrivals = int(self.rate * STEP_S + rng.random())
        for _ in range(arrivals):
            self.n += 1
            model = rng.choice(MODELS)
            big = model.startswith("llama-3.1-70b")
            tracker = self.recorder.track(
                route=rng.choice(ROUTES),
                model=model,
                stream=True,
                request_id=f"chatcmpl-{self.seed:02d}{self.n:06d}",
                client=rng.choice(CLIENTS),
                via_api_key=rng.choice(("team-search", "team-agents", None)),
            )
            tracker.begin()
            roll = rng.random()
            self.flights.append(
                Flight(
                    tracker,
                    self.clock.monotonic(),
                    queue_s=rng.uniform(0.0, 0.08),
                    ttft_s=rng.uniform(0.25, 0.9) if big else rng.uniform(0.08, 0.35),
                    itl_s=rng.uniform(0.035, 0.06) if big else rng.uniform(0.012, 0.025),
                    prompt=rng.randint(120, 3000),
                    completion=rng.randint(16, 420),
                    fate="abort" if roll < 0.04 else "error" if roll < 0.06 else "ok",
                )
            )

    def _advance(self, f: Flight, now: float) -> None:
        t = f.tracker
        age = now - f.arrived
        if age >= f.queue_s:
            t.started()
        if f.fate == "error" and age >= f.queue_s:
            self.flights.remove(f)
            t.finish(status=503, error="EngineOverloaded", prompt_tokens=f.prompt)
            return
        if age < f.ttft_s:
            return
        if f.emitted == 0:
            t.tokens(prompt=f.prompt, completion=1)
            f.emitted = 1
            f.next_token_at = now + f.itl_s
        while f.emitted < f.completion and f.next_token_at <= now:
            burst = min(f.completion - f.emitted, max(1, round(STEP_S / f.itl_s)))
            t.tokens(completion=burst)
            f.emitted += burst
            f.next_token_at += f.itl_s * burst
        if f.fate == "abort" and f.emitted >= f.completion // 3:
            self.flights.remove(f)
            t.abort("client_disconnect")
            t.finish(status=200)
        elif f.emitted >= f.completion:
            self.flights.remove(f)
            t.finish(status=200, finish_reason="length" if f.completion > 400 else "stop")
