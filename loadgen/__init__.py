"""Plausible inference traffic for demos and soak runs, played through the real feeders.

``plan_request`` draws one request from the traffic model; ``LoadGenerator`` plays plans
from worker threads, each one through this process's in-process tracker, reported to an
ingest endpoint over HTTP in batches, or sent as an OpenAI call to a pass-through, and
stops by itself at a request count or a deadline.

| module | answers |
|---|---|
| ``plan`` | what one request asks, how it is served and how it ends (pure, seeded) |
| ``pool`` | how many KV-cache blocks the requests in flight hold |
| ``inprocess`` | how a plan is served through this process's tracker |
| ``ingest_client`` | how a plan is reported to an ingest endpoint: records, batches, retries |
| ``openai_client`` | how a call is sent to an OpenAI-compatible pass-through |
| ``engine`` | how a simulated OpenAI-compatible engine answers (a test and demo tool) |
| ``report`` | what a run did, and its summary line |
| ``run`` | the run: worker threads, its bounds, stopping it |
"""

from __future__ import annotations

from .ingest_client import IngestClient, IngestRefused, check_local_url, ingest_record
from .inprocess import InProcessFeeder, play
from .plan import (
    ABORT,
    ABORTED,
    API_KEYS,
    BAD_REQUEST,
    CHAT,
    COMPLETIONS,
    ENGINE_ERROR,
    ENGINE_ERRORS,
    ERROR,
    MODELS,
    OK,
    OUTCOMES,
    RATE_LIMITED,
    REFUSED,
    EngineError,
    EngineTimeout,
    ModelProfile,
    RequestPlan,
    plan_request,
)
from .pool import Pool
from .report import Report
from .run import LoadGenerator

__all__ = [
    "ABORT",
    "ABORTED",
    "API_KEYS",
    "BAD_REQUEST",
    "CHAT",
    "COMPLETIONS",
    "ENGINE_ERROR",
    "ENGINE_ERRORS",
    "ERROR",
    "MODELS",
    "OK",
    "OUTCOMES",
    "RATE_LIMITED",
    "REFUSED",
    "EngineError",
    "EngineTimeout",
    "InProcessFeeder",
    "IngestClient",
    "IngestRefused",
    "LoadGenerator",
    "ModelProfile",
    "Pool",
    "Report",
    "RequestPlan",
    "check_local_url",
    "ingest_record",
    "plan_request",
    "play",
]
