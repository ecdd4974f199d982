"""The traffic model: what one plausible inference request asks, how it is served, how it ends.

``plan_request`` is a pure function of a seeded ``random.Random``: several models,
streaming and not, lognormal prompt and completion sizes, TTFT that grows with the
uncached prompt, per-model decode speed, client aborts, engine errors, refusals.
Stdlib only, no clock: playing a plan in time is the feeders' business.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

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
