"""What the simulated engine answers: OpenAI-shaped bodies, stream chunks and SSE framing.

Everything here is a pure function of the request's description and ``created`` (stdlib
only), so the same request always gets the same text, tokens, vectors and id.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Iterable
from typing import Any

from .engine_requests import CHAT, Embeddings, Generation

WORDS = (
    "lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit",
    "sed", "do", "eiusmod", "tempor", "incididunt", "ut", "labore", "et",
)  # fmt: skip
DIMENSIONS = 8
DONE = b"data: [DONE]\n\n"
OWNER = "ferrox-sim"


def token(index: int) -> str:
    """The text of completion token ``index``: a word and a space."""
    return WORDS[index % len(WORDS)] + " "


def sse(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``payload`` as compact JSON."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def model_list(models: Iterable[str]) -> dict[str, Any]:
    """The ``GET /v1/models`` body."""
    data = [{"id": m, "object": "model", "created": 0, "owned_by": OWNER} for m in models]
    return {"object": "list", "data": data}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """A ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion(gen: Generation, created: int) -> dict[str, Any]:
    """The whole (non-streamed) ``chat.completion`` or ``text_completion`` body."""
    text = "".join(token(i) for i in range(gen.tokens))
    if gen.kind == CHAT:
        answer: dict[str, Any] = {"message": {"role": "assistant", "content": text}}
        kind = "chat.completion"
    else:
        answer, kind = {"text": text}, "text_completion"
    choice = {"index": 0, **answer, "logprobs": None, "finish_reason": gen.finish_reason}
    return {
        "id": gen.response_id,
        "object": kind,
        "created": created,
        "model": gen.model,
        "choices": [choice],
        "usage": usage(gen.prompt_tokens, gen.tokens),
    }


def role_chunk(gen: Generation, created: int) -> dict[str, Any]:
    """The chat stream's first chunk, sent before any token: the assistant role."""
    return _chunk(gen, created, "", None, role=True)


def token_chunk(gen: Generation, created: int, index: int) -> dict[str, Any]:
    """The chunk carrying token ``index``."""
    return _chunk(gen, created, token(index), None)


def finish_chunk(gen: Generation, created: int) -> dict[str, Any]:
    """The chunk after the last token, with no text and the finish reason."""
    return _chunk(gen, created, None, gen.finish_reason)


def usage_chunk(gen: Generation, created: int) -> dict[str, Any]:
    """The chunk sent last when ``stream_options.include_usage`` asked for it."""
    chunk = _chunk(gen, created, None, None)
    return {**chunk, "choices": [], "usage": usage(gen.prompt_tokens, gen.tokens)}


def embeddings(job: Embeddings) -> dict[str, Any]:
    """The ``/v1/embeddings`` body, vectors as float lists or base64 little-endian float32."""
    data = []
    for index, item in enumerate(job.inputs):
        vector = embedding(item)
        encoded: list[float] | str = (
            base64.b64encode(struct.pack(f"<{DIMENSIONS}f", *vector)).decode()
            if job.base64
            else vector
        )
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = {"prompt_tokens": job.prompt_tokens, "total_tokens": job.prompt_tokens}
    return {"object": "list", "data": data, "model": job.model, "usage": tokens}


def embedding(item: str | list[int]) -> list[float]:
    """``DIMENSIONS`` values in [-1, 1) drawn from the input's hash.

    Each is a multiple of 2**-15, exact in float32, so base64 and float answers agree.
    """
    digest = hashlib.sha256(json.dumps(item).encode()).digest()
    pairs = struct.unpack(f"<{DIMENSIONS}H", digest[: 2 * DIMENSIONS])
    return [pair / 32768 - 1 for pair in pairs]


def _chunk(
    gen: Generation, created: int, text: str | None, finish: str | None, *, role: bool = False
) -> dict[str, Any]:
    # ``text`` None: the chunk carries no text (the finish and usage chunks).
    choice: dict[str, Any] = {"index": 0}
    if gen.kind == CHAT:
        kind = "chat.completion.chunk"
        choice["delta"] = {"role": "assistant"} if role else {}
        if text is not None:
            choice["delta"]["content"] = text
    else:
        kind = "text_completion"
        choice["text"] = text or ""
    choice.update(logprobs=None, finish_reason=finish)
    return {
        "id": gen.response_id,
        "object": kind,
        "created": created,
        "model": gen.model,
        "choices": [choice],
    }
