"""The pass-through feeder: OpenAI calls sent over HTTP to an OpenAI-compatible endpoint.

``plan_call`` draws one call (pure, seeded): chat, completions or embeddings, streamed or
not, sometimes failed on purpose by the engine behind (``"sim": {"fail": 500}``) or left
by its client mid-stream. ``OpenAIClient`` sends calls with httpx to this machine only,
and says how each ended. The calls carry the simulated engine's ``"sim"`` field
(``loadgen.engine``): they are meant for a pass-through in front of that engine.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from .ingest_client import check_local_url
from .plan import ABORTED, CHAT, COMPLETIONS, ERROR, OK, REFUSED

EMBEDDINGS = "/v1/embeddings"
ROUTES: tuple[tuple[str, float], ...] = ((CHAT, 70), (COMPLETIONS, 20), (EMBEDDINGS, 10))
STREAM_SHARE = 0.6  # of chat and completions calls
FAIL_SHARE = 0.03  # the engine answers FAIL_STATUS at once
FAIL_STATUS = 500
LEAVE_SHARE = 0.1  # of streams: the client leaves after some of the tokens
CAPPED_SHARE = 0.2  # of generations: max_tokens CAP, so some end by "length"
CAP = 64
MAX_TOKENS = 400  # asked of the engine: at its ~40 tokens/s, ten seconds at most
# Prompts are words: the simulated engine counts one prompt token per word.
WORDS = (
    "the", "model", "answers", "a", "question", "about", "serving", "tokens", "with",
    "latency", "and", "throughput", "under", "load", "please", "summarise", "this",
)  # fmt: skip
# Answers that no retry will change: the run stops rather than repeat them.
FATAL_STATUSES = frozenset({401, 403, 501})


@dataclass(frozen=True)
class Call:
    """One OpenAI call, decided in advance: what it asks and whether its client leaves."""

    route: str  # CHAT, COMPLETIONS or EMBEDDINGS
    model: str
    stream: bool
    prompt: str
    tokens: int  # what the engine is asked to generate ("sim": {"tokens": n})
    max_tokens: int | None
    fail: int | None  # the status the engine is asked to fail with
    leave_after: int | None  # streamed tokens after which the client leaves

    def body(self) -> dict[str, Any]:
        """The JSON body to POST to the route."""
        fail = {} if self.fail is None else {"fail": self.fail}
        if self.route == EMBEDDINGS:
            return {"model": self.model, "input": self.prompt, **({"sim": fail} if fail else {})}
        sim = {"tokens": self.tokens, **fail}
        body: dict[str, Any] = {"model": self.model, "stream": self.stream, "sim": sim}
        if self.route == CHAT:
            body["messages"] = [{"role": "user", "content": self.prompt}]
        else:
            body["prompt"] = self.prompt
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body


def plan_call(rng: random.Random, models: Sequence[str]) -> Call:
    """Draw one call to one of ``models``; the same rng state draws the same call."""
    route = rng.choices([r for r, _ in ROUTES], weights=[w for _, w in ROUTES])[0]
    model = rng.choice(models)
    words = min(2000, max(3, round(rng.lognormvariate(3.7, 0.8))))
    prompt = " ".join(rng.choice(WORDS) for _ in range(words))
    fail = FAIL_STATUS if rng.random() < FAIL_SHARE else None
    if route == EMBEDDINGS:
        return Call(route, model, False, prompt, 0, None, fail, None)
    stream = rng.random() < STREAM_SHARE
    tokens = min(MAX_TOKENS, max(1, round(rng.lognormvariate(3.9, 0.8))))
    max_tokens = CAP if rng.random() < CAPPED_SHARE else None
    produced = min(tokens, max_tokens or tokens)
    leave_after = None
    if stream and fail is None and produced > 1 and rng.random() < LEAVE_SHARE:
        leave_after = rng.randint(1, produced - 1)
    return Call(route, model, stream, prompt, tokens, max_tokens, fail, leave_after)


@dataclass(frozen=True)
class CallResult:
    """How a call ended (one of ``plan.OUTCOMES``) and what it brought back."""

    outcome: str
    tokens: int = 0  # completion tokens received
    unreachable: bool = False  # no connection to the endpoint at all


class PassThroughRefused(Exception):
    """The endpoint refused for a reason that repeating the call will not fix."""


class OpenAIClient:
    """Sends calls to an OpenAI base URL (``…/v1``) with a bearer token, via httpx.

    One client for all the run's threads: httpx's connection pool is thread-safe.
    ``models`` are what calls ask for; ``discover()`` reads them from ``GET /models``.
    """

    def __init__(
        self,
        base_url: str,
        secret: str,
        models: Sequence[str] = (),
        *,
        timeout_s: float = 60.0,
    ) -> None:
        self.base_url = check_local_url(base_url).rstrip("/")
        self.models = tuple(models)
        self.timeout_s = timeout_s
        self._http = httpx.Client(
            headers={"Authorization": f"Bearer {secret}"},
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            # Localhost only: no environment proxy may sit in between.
            trust_env=False,
        )

    def close(self) -> None:
        self._http.close()

    def discover(self) -> tuple[str, ...]:
        """The models the endpoint lists, kept for the calls; raises ``PassThroughRefused``
        (or ``httpx.HTTPError`` when it cannot be reached)."""
        url = f"{self.base_url}/models"
        answer = self._http.get(url)
        if answer.status_code != 200:
            raise PassThroughRefused(_refusal(f"GET {url}", answer.status_code, answer.content))
        try:
            data = json.loads(answer.content)["data"]
            models = sorted({m["id"] for m in data if isinstance(m.get("id"), str)})
        except (ValueError, KeyError, TypeError, AttributeError):
            raise PassThroughRefused(f"GET {url} did not answer an OpenAI model list") from None
        if not models:
            raise PassThroughRefused(f"GET {url} lists no model")
        self.models = tuple(models)
        return self.models

    def send(
        self, call: Call, leave: Callable[[], bool], timeout_s: float | None = None
    ) -> CallResult:
        """Send ``call`` and wait for its end; a stream is left early when ``leave()``
        comes true. ``timeout_s`` bounds each wait for the endpoint (a run's deadline).
        Raises ``PassThroughRefused`` on 401, 403 and 501."""
        url = self.base_url + call.route.removeprefix("/v1")
        read_s = self.timeout_s if timeout_s is None else max(0.05, min(timeout_s, self.timeout_s))
        try:
            with self._http.stream(
                "POST", url, json=call.body(), timeout=httpx.Timeout(read_s, connect=5.0)
            ) as answer:
                if answer.status_code != 200:
                    return _failed(url, answer.status_code, answer.read())
                if call.stream:
                    return _read_stream(answer, call, leave)
                return _whole(answer.read(), call)
        except httpx.ConnectError:
            return CallResult(ERROR, unreachable=True)
        except httpx.TimeoutException:
            # Cut at the run's deadline: the client left. Otherwise the endpoint went silent.
            return CallResult(ABORTED if leave() else ERROR)
        except httpx.TransportError:
            return CallResult(ERROR)


def _failed(url: str, status: int, body: bytes) -> CallResult:
    if status in FATAL_STATUSES:
        raise PassThroughRefused(_refusal(f"POST {url}", status, body))
    return CallResult(REFUSED if status < 500 else ERROR)


def _refusal(what: str, status: int, body: bytes) -> str:
    """What an error answer said, for the run's fatal line (OpenAI error objects only)."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = None
    said = f": {message}" if isinstance(message, str) else ""
    return f"{what} answered {status}{said}"


def _whole(body: bytes, call: Call) -> CallResult:
    try:
        usage = json.loads(body).get("usage") or {}
        produced = usage.get("completion_tokens", 0) if call.route != EMBEDDINGS else 0
    except (ValueError, AttributeError):
        return CallResult(ERROR)
    return CallResult(OK, produced if isinstance(produced, int) else 0)


def _read_stream(answer: httpx.Response, call: Call, leave: Callable[[], bool]) -> CallResult:
    """Read server-sent events to ``[DONE]``, counting content chunks as tokens."""
    tokens = 0
    for line in answer.iter_lines():
        if leave() or (call.leave_after is not None and tokens >= call.leave_after):
            # Leaving the block closes the connection mid-stream, as a client that goes away.
            return CallResult(ABORTED, tokens)
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return CallResult(OK, tokens)
        try:
            chunk = json.loads(payload)
        except ValueError:
            continue
        if not isinstance(chunk, dict) or "error" in chunk:
            return CallResult(ERROR, tokens)
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content") or choice.get("text"):
                tokens += 1
    return CallResult(ERROR, tokens)  # the stream broke off before its [DONE]
