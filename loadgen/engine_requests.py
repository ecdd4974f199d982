"""What a request to the simulated engine asks for, read from its JSON body (stdlib only).

Each ``parse_*`` function either returns a plain description of the work or raises
``ApiError`` carrying the OpenAI-shaped error the engine answers with instead.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

CHAT = "chat"
COMPLETION = "completion"
DEFAULT_TOKENS = 16
ID_PREFIX = {CHAT: "chatcmpl-", COMPLETION: "cmpl-"}
# A proxy may add these on its way through; the response id must not change because of them.
STREAM_ONLY_KEYS = frozenset({"stream", "stream_options"})


class ApiError(Exception):
    """A refusal, as the OpenAI error object ``payload()`` answered with ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def payload(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}``."""
        error = {"message": self.message, "type": self.type, "param": self.param}
        return {"error": {**error, "code": self.code}}


def simulated_failure(status: int) -> ApiError:
    """The error a ``"sim": {"fail": status}`` request is answered with."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return ApiError(status, "simulated failure", type=kind)


@dataclass(frozen=True)
class Sim:
    """The ``"sim"`` body field: per-request overrides (None: not given) and faults."""

    ttft_s: float | None = None
    tokens_per_s: float | None = None
    tokens: int | None = None
    fail: int | None = None
    stall_after: int | None = None
    drop_after: int | None = None


@dataclass(frozen=True)
class Generation:
    """A chat or text completion to produce: ``tokens`` words ending with ``finish_reason``."""

    kind: str
    model: str
    response_id: str
    prompt_tokens: int
    tokens: int
    finish_reason: str
    stream: bool
    include_usage: bool


@dataclass(frozen=True)
class Embeddings:
    """Embeddings to produce, one per input item (a string or a list of token ids)."""

    model: str
    inputs: list[str | list[int]]
    base64: bool
    prompt_tokens: int


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"The body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The body must be a JSON object.")
    return body


def parse_sim(body: Mapping[str, Any]) -> Sim:
    """The ``"sim"`` field of ``body``; a body without one asks for nothing special."""
    sim = body.get("sim")
    if sim is None:
        return Sim()
    if not isinstance(sim, dict):
        raise ApiError(400, "'sim' must be an object.", param="sim")
    fail = _integer(sim, "fail", minimum=400, within="sim.")
    if fail is not None and fail > 599:
        raise ApiError(400, "'sim.fail' must be an HTTP error status (400-599).", param="sim.fail")
    ttft_ms = _number(sim, "ttft_ms", within="sim.")
    return Sim(
        ttft_s=None if ttft_ms is None else ttft_ms / 1000,
        tokens_per_s=_number(sim, "tokens_per_s", within="sim.", positive=True),
        tokens=_integer(sim, "tokens", minimum=0, within="sim."),
        fail=fail,
        stall_after=_integer(sim, "stall_after", minimum=0, within="sim."),
        drop_after=_integer(sim, "drop_after", minimum=0, within="sim."),
    )


def parse_generation(
    kind: str, body: Mapping[str, Any], models: Collection[str], sim: Sim
) -> Generation:
    """A ``/v1/chat/completions`` (``CHAT``) or ``/v1/completions`` body as a generation."""
    model = parse_model(body, models)
    text = _chat_text(body) if kind == CHAT else _prompt_text(body)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean.", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object.", param="stream_options")
    tokens = DEFAULT_TOKENS if sim.tokens is None else sim.tokens
    limit = _integer(body, "max_completion_tokens", minimum=1)
    if limit is None:
        limit = _integer(body, "max_tokens", minimum=1)
    finish_reason = "stop"
    if limit is not None and limit < tokens:
        tokens, finish_reason = limit, "length"
    return Generation(
        kind=kind,
        model=model,
        response_id=response_id(kind, body),
        prompt_tokens=max(1, len(text.split())),
        tokens=tokens,
        finish_reason=finish_reason,
        stream=stream,
        include_usage=options.get("include_usage") is True,
    )


def parse_embeddings(body: Mapping[str, Any], models: Collection[str]) -> Embeddings:
    """A ``/v1/embeddings`` body: ``input`` a string, strings, token ids or lists of them."""
    model = parse_model(body, models)
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise ApiError(
            400, "'encoding_format' must be 'float' or 'base64'.", param="encoding_format"
        )
    raw: Any = body.get("input")
    inputs: list[str | list[int]]
    if isinstance(raw, str) or _is_token_list(raw):
        inputs = [raw]
    elif isinstance(raw, list) and raw and all(_is_str_or_token_list(i) for i in raw):
        inputs = raw
    else:
        message = "'input' must be a string, a list of strings or a list of token id lists."
        raise ApiError(400, message, param="input")
    counted = sum(len(i.split()) if isinstance(i, str) else len(i) for i in inputs)
    return Embeddings(model, inputs, encoding == "base64", max(1, counted))


def parse_model(body: Mapping[str, Any], models: Collection[str]) -> str:
    """The body's ``model``, one the engine serves."""
    model = body.get("model")
    if not isinstance(model, str):
        raise ApiError(400, "'model' is required and must be a string.", param="model")
    if model not in models:
        message = f"The model '{model}' does not exist."
        raise ApiError(404, message, param="model", code="model_not_found")
    return model


def response_id(kind: str, body: Mapping[str, Any]) -> str:
    """The same id for the same request, streamed or not, sent directly or via a proxy."""
    asked = {key: value for key, value in body.items() if key not in STREAM_ONLY_KEYS}
    canonical = json.dumps(asked, sort_keys=True, separators=(",", ":"))
    return ID_PREFIX[kind] + hashlib.sha256(canonical.encode()).hexdigest()[:24]


def _chat_text(body: Mapping[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list.", param="messages")
    texts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            raise ApiError(400, "Each message must be an object.", param="messages")
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list) and all(_is_text_part(p) for p in content):
            texts.extend(part["text"] for part in content)
        # An assistant turn that only called tools has no content, and so no words.
        elif content is not None:
            problem = "A message's content must be a string or a list of text parts."
            raise ApiError(400, problem, param="messages")
    return " ".join(texts)


def _prompt_text(body: Mapping[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return " ".join(prompt)
    raise ApiError(400, "'prompt' must be a string or a list of strings.", param="prompt")


def _is_text_part(part: object) -> bool:
    return (
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    )


def _is_token(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_token_list(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_token(t) for t in value)


def _is_str_or_token_list(value: object) -> bool:
    return isinstance(value, str) or _is_token_list(value)


def _integer(fields: Mapping[str, Any], key: str, *, minimum: int, within: str = "") -> int | None:
    value = fields.get(key)
    if value is None:
        return None
    if not _is_token(value) or value < minimum:
        name = within + key
        raise ApiError(400, f"'{name}' must be an integer >= {minimum}.", param=name)
    return int(value)


def _number(
    fields: Mapping[str, Any], key: str, *, within: str = "", positive: bool = False
) -> float | None:
    value = fields.get(key)
    if value is None:
        return None
    number = not isinstance(value, bool) and isinstance(value, int | float)
    # JSON as Python reads it admits NaN and Infinity, which no wait can be.
    if not number or not math.isfinite(value) or value < 0 or (positive and value == 0):
        name = within + key
        sign = "positive" if positive else "non-negative"
        raise ApiError(400, f"'{name}' must be a {sign} number.", param=name)
    return float(value)
