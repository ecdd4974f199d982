"""The simulated engine (``loadgen.engine``), in process and behind uvicorn."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import struct
from collections.abc import Iterator, MutableMapping
from typing import Any

import httpx
import openai
import pytest
import uvicorn

from loadgen.engine import SimulatedDrop, SimulatedEngine, main
from tests.asgi_server import serve, wait_for

WALL = 1_767_225_600.75
FULL_TEXT = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit "
    "sed do eiusmod tempor incididunt ut labore et "
)
TOKENS = [word + " " for word in FULL_TEXT.split()]
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
EMBEDDINGS = "/v1/embeddings"
CHAT_BODY: dict[str, Any] = {
    "model": "sim-small",
    "messages": [{"role": "user", "content": "say something nice"}],
}
PROMPT_BODY: dict[str, Any] = {"model": "sim-large", "prompt": "once upon a time"}


def text_part(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


class Pauses:
    """A fake ``pause``: records each wait and never sleeps."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def pauses() -> Pauses:
    return Pauses()


def make_engine(pauses: Pauses, **kwargs: Any) -> SimulatedEngine:
    return SimulatedEngine(pause=pauses, wall_clock=lambda: WALL, **kwargs)


def request(
    engine: SimulatedEngine,
    method: str,
    path: str,
    body: Any = None,
    *,
    content: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """One request to ``engine`` in process; a stream arrives whole."""

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=engine)
        async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
            return await client.request(method, path, json=body, content=content, headers=headers)

    return asyncio.run(go())


def events(response: httpx.Response) -> list[Any]:
    """The server-sent events of a response: JSON payloads, then the ``[DONE]`` marker."""
    assert response.headers["content-type"] == "text/event-stream"
    blocks = response.text.split("\n\n")
    assert blocks[-1] == ""
    assert all(block.startswith("data: ") for block in blocks[:-1])
    return [
        block[6:] if block == "data: [DONE]" else json.loads(block[6:]) for block in blocks[:-1]
    ]


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The OpenAI error object a response carries, checked for its shape."""
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["error"]
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    return dict(body["error"])


# --- Listing and whole answers ------------------------------------------------------------


def test_models_lists_the_served_models(pauses: Pauses) -> None:
    engine = make_engine(pauses, models=["a", "b", "c"])
    response = request(engine, "GET", "/v1/models")
    assert response.status_code == 200
    assert response.json() == {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "ferrox-sim"}
            for name in ("a", "b", "c")
        ],
    }


def test_chat_completion_whole(pauses: Pauses) -> None:
    engine = make_engine(pauses, ttft_s=0.15, tokens_per_s=40)
    response = request(engine, "POST", CHAT, CHAT_BODY)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{24}", body.pop("id"))
    assert body == {
        "object": "chat.completion",
        "created": 1_767_225_600,
        "model": "sim-small",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": FULL_TEXT},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 16, "total_tokens": 19},
    }
    assert pauses.calls == [0.15 + 16 / 40]
    assert (engine.completed, engine.disconnected, engine.active) == (1, 0, 0)


def test_text_completion_whole(pauses: Pauses) -> None:
    engine = make_engine(pauses, ttft_s=0.5)
    body = {"model": "sim-large", "prompt": ["two words", "and three more"], "max_tokens": 3}
    response = request(engine, "POST", COMPLETIONS, body).json()
    assert re.fullmatch(r"cmpl-[0-9a-f]{24}", response.pop("id"))
    assert response == {
        "object": "text_completion",
        "created": 1_767_225_600,
        "model": "sim-large",
        "choices": [
            {"index": 0, "text": "lorem ipsum dolor ", "logprobs": None, "finish_reason": "length"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    assert pauses.calls == [0.5]


@pytest.mark.parametrize(
    ("messages", "prompt_tokens"),
    [
        ([{"role": "user", "content": "one"}], 1),
        ([{"role": "user", "content": ""}], 1),
        ([{"role": "system", "content": "be  brief"}, {"role": "user", "content": "hi\tyou"}], 4),
        ([{"role": "user", "content": [text_part("a b"), text_part("c")]}], 3),
        ([{"role": "assistant", "content": None}, {"role": "user", "content": "go on"}], 2),
    ],
)  # fmt: skip
def test_prompt_tokens_count_the_words(
    pauses: Pauses, messages: list[dict[str, Any]], prompt_tokens: int
) -> None:
    body = {"model": "sim-small", "messages": messages}
    usage = request(make_engine(pauses), "POST", CHAT, body).json()["usage"]
    assert usage["prompt_tokens"] == prompt_tokens


@pytest.mark.parametrize(
    ("extra", "tokens", "finish_reason"),
    [
        ({}, 16, "stop"),
        ({"max_tokens": 5}, 5, "length"),
        ({"max_completion_tokens": 3}, 3, "length"),
        ({"max_tokens": 16}, 16, "stop"),
        ({"max_tokens": 100}, 16, "stop"),
        ({"sim": {"tokens": 40}}, 40, "stop"),
        ({"sim": {"tokens": 4}, "max_tokens": 2}, 2, "length"),
        ({"sim": {"tokens": 0}}, 0, "stop"),
    ],
)
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_token_count_and_finish_reason(
    pauses: Pauses, path: str, extra: dict[str, Any], tokens: int, finish_reason: str
) -> None:
    body = {**(CHAT_BODY if path == CHAT else PROMPT_BODY), **extra}
    answer = request(make_engine(pauses), "POST", path, body).json()
    choice = answer["choices"][0]
    text = choice["message"]["content"] if path == CHAT else choice["text"]
    assert text == (FULL_TEXT * 3)[: len(text)]
    assert len(text.split()) == answer["usage"]["completion_tokens"] == tokens
    assert choice["finish_reason"] == finish_reason


# --- Streams ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stream_options", "usage_chunk"),
    [(None, False), ({"include_usage": False}, False), ({"include_usage": True}, True)],
)
def test_chat_stream(
    pauses: Pauses, stream_options: dict[str, bool] | None, usage_chunk: bool
) -> None:
    engine = make_engine(pauses, ttft_s=0.2, tokens_per_s=8)
    body = {**CHAT_BODY, "stream": True, "max_tokens": 4}
    if stream_options is not None:
        body["stream_options"] = stream_options
    chunks = events(request(engine, "POST", CHAT, body))
    assert chunks.pop() == "[DONE]"
    usage = chunks.pop() if usage_chunk else None
    head = {"object": "chat.completion.chunk", "created": 1_767_225_600, "model": "sim-small"}
    ids = {chunk.pop("id") for chunk in [*chunks, *([usage] if usage else [])]}
    assert len(ids) == 1
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{24}", ids.pop())
    deltas = [{"role": "assistant", "content": ""}] + [
        {"content": word + " "} for word in ("lorem", "ipsum", "dolor", "sit")
    ]
    assert chunks == [
        {**head, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]}
        for d in deltas
    ] + [
        {
            **head,
            "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}],
        }
    ]
    if usage_chunk:
        tokens = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
        assert usage == {**head, "choices": [], "usage": tokens}
    assert pauses.calls == [0.2, 1 / 8, 1 / 8, 1 / 8]
    assert (engine.completed, engine.disconnected, engine.active) == (1, 0, 0)


@pytest.mark.parametrize("include_usage", [False, True])
def test_text_completion_stream(pauses: Pauses, include_usage: bool) -> None:
    engine = make_engine(pauses, tokens_per_s=10)
    options = {"include_usage": include_usage}
    body = {**PROMPT_BODY, "stream": True, "stream_options": options, "sim": {"tokens": 2}}
    chunks = events(request(engine, "POST", COMPLETIONS, body))
    assert chunks.pop() == "[DONE]"
    head = {"object": "text_completion", "created": 1_767_225_600, "model": "sim-large"}
    if include_usage:
        usage = chunks.pop()
        assert usage.pop("id") == chunks[0]["id"]
        tokens = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
        assert usage == {**head, "choices": [], "usage": tokens}
    assert {chunk.pop("id") for chunk in chunks} == {response_id(body, COMPLETIONS)}
    assert chunks == [
        {**head, "choices": [{"index": 0, "text": t, "logprobs": None, "finish_reason": f}]}
        for t, f in [("lorem ", None), ("ipsum ", None), ("", "stop")]
    ]
    assert pauses.calls == [1 / 10]


def test_each_event_is_its_own_body_message(pauses: Pauses) -> None:
    exchange = Exchange({**CHAT_BODY, "stream": True, "sim": {"tokens": 3}})
    asyncio.run(exchange.run(make_engine(pauses)))
    start, *parts = exchange.sent
    assert start["type"] == "http.response.start"
    assert [part["type"] for part in parts] == ["http.response.body"] * 6
    assert [part["more_body"] for part in parts] == [True] * 5 + [False]
    assert all(re.fullmatch(rb"data: [^\n]+\n\n", part["body"]) for part in parts)


@pytest.mark.parametrize("stream", [False, True])
def test_no_time_means_no_pause(pauses: Pauses, stream: bool) -> None:
    engine = make_engine(pauses)
    assert request(engine, "POST", CHAT, {**CHAT_BODY, "stream": stream}).status_code == 200
    assert request(engine, "POST", EMBEDDINGS, {"model": "sim-small", "input": "x"}).is_success
    assert pauses.calls == []


@pytest.mark.parametrize(
    ("stream", "calls"), [(False, [0.25 + 3 / 4]), (True, [0.25, 1 / 4, 1 / 4])]
)
def test_sim_overrides_the_timing(pauses: Pauses, stream: bool, calls: list[float]) -> None:
    engine = make_engine(pauses, ttft_s=9.0, tokens_per_s=1000)
    sim = {"ttft_ms": 250, "tokens_per_s": 4, "tokens": 3}
    assert request(engine, "POST", CHAT, {**CHAT_BODY, "stream": stream, "sim": sim}).is_success
    assert pauses.calls == calls


# --- Ids and clocks -----------------------------------------------------------------------


def response_id(body: dict[str, Any], path: str) -> str:
    """The id the engine gives ``body`` when answered whole."""
    plain = {key: value for key, value in body.items() if key not in ("stream", "stream_options")}
    return str(request(make_engine(Pauses()), "POST", path, plain).json()["id"])


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_ids_ignore_how_the_answer_is_streamed(pauses: Pauses, path: str) -> None:
    body = CHAT_BODY if path == CHAT else PROMPT_BODY
    engine = make_engine(pauses)
    whole = request(engine, "POST", path, body).json()["id"]
    streamed = events(request(engine, "POST", path, {**body, "stream": True}))[0]["id"]
    options = {"stream": True, "stream_options": {"include_usage": True}}
    proxied = events(request(engine, "POST", path, {**body, **options}))[0]["id"]
    assert whole == streamed == proxied == response_id(body, path)
    other = request(engine, "POST", path, {**body, "max_tokens": 2}).json()["id"]
    assert other != whole


def test_created_reads_the_wall_clock(pauses: Pauses) -> None:
    times = iter([100.9, 205.2])
    engine = SimulatedEngine(pause=pauses, wall_clock=lambda: next(times))
    assert request(engine, "POST", CHAT, CHAT_BODY).json()["created"] == 100
    assert request(engine, "POST", COMPLETIONS, PROMPT_BODY).json()["created"] == 205


# --- Embeddings ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "count", "prompt_tokens"),
    [("hello world", 1, 2), (["a b", "c"], 2, 3), ([5, 6, 7], 1, 3), ([[1, 2], [3]], 2, 3)],
)
def test_embeddings(pauses: Pauses, given: Any, count: int, prompt_tokens: int) -> None:
    engine = make_engine(pauses, ttft_s=0.05, tokens_per_s=10)
    floats = request(engine, "POST", EMBEDDINGS, {"model": "sim-large", "input": given})
    body = {"model": "sim-large", "input": given, "encoding_format": "base64"}
    packed = request(engine, "POST", EMBEDDINGS, body).json()
    answer = floats.json()
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    assert answer["object"] == "list"
    assert answer["model"] == "sim-large"
    assert answer["usage"] == packed["usage"] == usage
    assert [item["index"] for item in answer["data"]] == list(range(count))
    assert {item["object"] for item in answer["data"]} == {"embedding"}
    for plain, encoded in zip(answer["data"], packed["data"], strict=True):
        vector = plain["embedding"]
        assert len(vector) == 8
        assert all(-1 <= value < 1 for value in vector)
        decoded = struct.unpack("<8f", base64.b64decode(encoded["embedding"]))
        assert list(decoded) == vector
    assert pauses.calls == [0.05, 0.05]


def test_embeddings_are_deterministic(pauses: Pauses) -> None:
    def vectors(given: Any) -> list[list[float]]:
        body = {"model": "sim-small", "input": given}
        data = request(make_engine(pauses), "POST", EMBEDDINGS, body).json()["data"]
        return [item["embedding"] for item in data]

    first, second = vectors(["same", "other"])
    assert vectors("same") == [first]
    assert first != second


# --- Errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "param", "code"),
    [
        ("POST", CHAT, b"{not json", 400, None, None),
        ("POST", CHAT, b"[1, 2]", 400, None, None),
        ("POST", CHAT, b"", 400, None, None),
        ("POST", CHAT, {"messages": CHAT_BODY["messages"]}, 400, "model", None),
        ("POST", CHAT, {"model": "sim-small"}, 400, "messages", None),
        ("POST", CHAT, {"model": "sim-small", "messages": []}, 400, "messages", None),
        ("POST", CHAT, {"model": "sim-small", "messages": [{"content": 7}]}, 400, "messages", None),
        ("POST", CHAT, {"model": "sim-small", "messages": ["hi"]}, 400, "messages", None),
        ("POST", CHAT, {**CHAT_BODY, "max_tokens": 0}, 400, "max_tokens", None),
        ("POST", CHAT, {**CHAT_BODY, "stream": "yes"}, 400, "stream", None),
        ("POST", CHAT, {**CHAT_BODY, "stream_options": 1}, 400, "stream_options", None),
        ("POST", CHAT, {**CHAT_BODY, "sim": []}, 400, "sim", None),
        ("POST", CHAT, {**CHAT_BODY, "sim": {"tokens": -1}}, 400, "sim.tokens", None),
        ("POST", CHAT, {**CHAT_BODY, "sim": {"fail": 200}}, 400, "sim.fail", None),
        ("POST", CHAT, {**CHAT_BODY, "sim": {"fail": 600}}, 400, "sim.fail", None),
        ("POST", CHAT, {**CHAT_BODY, "sim": {"tokens_per_s": 0}}, 400, "sim.tokens_per_s", None),
        ("POST", CHAT, {**CHAT_BODY, "sim": {"ttft_ms": "9"}}, 400, "sim.ttft_ms", None),
        ("POST", CHAT, {**CHAT_BODY, "model": "gpt-9"}, 404, "model", "model_not_found"),
        ("POST", COMPLETIONS, {"model": "sim-small"}, 400, "prompt", None),
        ("POST", COMPLETIONS, {"model": "sim-small", "prompt": [1]}, 400, "prompt", None),
        ("POST", COMPLETIONS, {**PROMPT_BODY, "model": "x"}, 404, "model", "model_not_found"),
        ("POST", EMBEDDINGS, {"model": "sim-small", "input": []}, 400, "input", None),
        ("POST", EMBEDDINGS, {"model": "sim-small", "input": [[]]}, 400, "input", None),
        ("POST", EMBEDDINGS, {"model": "sim-small", "input": 3}, 400, "input", None),
        (
            "POST",
            EMBEDDINGS,
            {"model": "sim-small", "input": "x", "encoding_format": "int8"},
            400,
            "encoding_format",
            None,
        ),
        ("POST", EMBEDDINGS, {"model": "x", "input": "x"}, 404, "model", "model_not_found"),
        ("GET", "/v1/nowhere", None, 404, None, "not_found"),
        ("POST", "/v1/models/sim-small", {}, 404, None, "not_found"),
        ("GET", CHAT, None, 405, None, "method_not_allowed"),
        ("POST", "/v1/models", {}, 405, None, "method_not_allowed"),
        ("DELETE", EMBEDDINGS, None, 405, None, "method_not_allowed"),
    ],
)
def test_errors_are_openai_error_objects(
    pauses: Pauses,
    method: str,
    path: str,
    body: bytes | dict[str, Any] | None,
    status: int,
    param: str | None,
    code: str | None,
) -> None:
    engine = make_engine(pauses, ttft_s=1.0)
    if isinstance(body, bytes):
        response = request(engine, method, path, content=body)
    else:
        response = request(engine, method, path, body)
    assert response.status_code == status
    error = error_of(response)
    assert error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code)
    assert pauses.calls == []
    if status == 405:
        assert response.headers["allow"] in ("GET", "POST")


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (None, 401),
        ("Bearer wrong", 401),
        ("bearer s3cret", 401),
        ("s3cret", 401),
        ("Bearer s3cret", 200),
    ],
)
@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/models"), ("POST", CHAT)])
def test_api_key(
    pauses: Pauses, authorization: str | None, status: int, method: str, path: str
) -> None:
    engine = make_engine(pauses, api_key="s3cret")
    headers = {} if authorization is None else {"Authorization": authorization}
    response = request(engine, method, path, CHAT_BODY, headers=headers)
    assert response.status_code == status
    if status == 401:
        assert error_of(response)["code"] == "invalid_api_key"


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "invalid_request_error"), (429, "invalid_request_error"), (500, "server_error"),
     (503, "server_error")],
)  # fmt: skip
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS, EMBEDDINGS])
def test_fail_answers_that_status_at_once(
    pauses: Pauses, status: int, kind: str, path: str
) -> None:
    engine = make_engine(pauses, ttft_s=2.0)
    body = {"model": "sim-small", "sim": {"fail": status}, "stream": True}
    response = request(engine, "POST", path, body)
    assert response.status_code == status
    error = {"message": "simulated failure", "type": kind, "param": None, "code": None}
    assert error_of(response) == error
    assert pauses.calls == []


# --- What the engine saw, and its lifetime ------------------------------------------------


def test_requests_are_recorded(pauses: Pauses) -> None:
    engine = make_engine(pauses)
    request(engine, "POST", CHAT, CHAT_BODY, headers={"X-Trace-Id": "abc"})
    request(engine, "POST", COMPLETIONS, content=b"{oops")
    request(engine, "GET", "/v1/models")
    chat, broken, models = engine.requests
    assert (chat.method, chat.path, chat.body) == ("POST", CHAT, CHAT_BODY)
    assert chat.headers["x-trace-id"] == "abc"
    assert chat.headers["content-type"] == "application/json"
    assert all(name == name.lower() for name in chat.headers)
    assert (broken.method, broken.path, broken.body) == ("POST", COMPLETIONS, None)
    assert (models.method, models.path, models.body) == ("GET", "/v1/models", None)
    assert (engine.completed, engine.disconnected, engine.active) == (3, 0, 0)


def test_lifespan_starts_and_stops(pauses: Pauses) -> None:
    inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return inbox.pop(0)

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(make_engine(pauses)({"type": "lifespan"}, receive, send))
    assert sent == [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ttft_s": -1.0},
        {"tokens_per_s": 0.0},
        {"tokens_per_s": -3.0},
        {"models": []},
        {"max_stall_s": -0.1},
    ],
)
def test_engine_refuses_nonsense_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SimulatedEngine(**kwargs)


# --- Disconnects, stalls and drops, in process --------------------------------------------


class Exchange:
    """A hand-driven ASGI exchange: the request body, then a disconnect once ``leave`` is set.

    ``leave_after`` sets ``leave`` when that many response body messages have been sent.
    """

    def __init__(self, body: dict[str, Any] | None, leave_after: int | None = None) -> None:
        # No body: the client leaves before sending it.
        self.body = None if body is None else json.dumps(body).encode()
        self.leave_after = leave_after
        self.leave = asyncio.Event()
        self.sent: list[MutableMapping[str, Any]] = []
        self.received = 0

    async def receive(self) -> dict[str, Any]:
        self.received += 1
        if self.received == 1 and self.body is not None:
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(message)
        bodies = sum(1 for m in self.sent if m["type"] == "http.response.body")
        if bodies == self.leave_after:
            self.leave.set()

    async def run(self, engine: SimulatedEngine, path: str = CHAT) -> None:
        scope = {"type": "http", "method": "POST", "path": path, "headers": []}
        await engine(scope, self.receive, self.send)

    def texts(self) -> list[str]:
        """The text of each token chunk sent (not the role chunk's empty one)."""
        chunks = [
            json.loads(m["body"].removeprefix(b"data: "))
            for m in self.sent
            if m["type"] == "http.response.body" and m["body"].startswith(b"data: {")
        ]
        deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
        return [delta["content"] for delta in deltas if "role" not in delta and "content" in delta]


def test_a_client_leaving_mid_stream_cancels_the_generation(pauses: Pauses) -> None:
    # Stalled after two tokens, the engine only goes on if the client stays.
    body = {**CHAT_BODY, "stream": True, "sim": {"stall_after": 2}}
    exchange = Exchange(body, leave_after=3)
    engine = make_engine(pauses, max_stall_s=60.0)
    asyncio.run(asyncio.wait_for(exchange.run(engine), timeout=10))
    assert exchange.texts() == ["lorem ", "ipsum "]
    assert exchange.sent[-1]["more_body"] is True
    assert (engine.completed, engine.disconnected, engine.active) == (0, 1, 0)


def test_a_client_leaving_before_its_body_is_counted_once(pauses: Pauses) -> None:
    exchange = Exchange(None)
    exchange.leave.set()
    engine = make_engine(pauses)
    asyncio.run(exchange.run(engine))
    assert exchange.sent == []
    assert engine.requests == []
    assert (engine.completed, engine.disconnected, engine.active) == (0, 1, 0)


@pytest.mark.parametrize(("stall_after", "sent"), [(2, 2), (16, 16), (99, 16)])
def test_a_stall_ends_the_stream_after_max_stall_s(
    pauses: Pauses, stall_after: int, sent: int
) -> None:
    # Past the last token, the stall comes before the finish chunk.
    exchange = Exchange({**CHAT_BODY, "stream": True, "sim": {"stall_after": stall_after}})
    engine = make_engine(pauses, max_stall_s=0.01)
    asyncio.run(asyncio.wait_for(exchange.run(engine), timeout=10))
    assert exchange.texts() == TOKENS[:sent]
    assert exchange.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert (engine.completed, engine.disconnected, engine.active) == (1, 0, 0)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, {**CHAT_BODY, "stream": True, "sim": {"stall_after": 0}}),
        (CHAT, {**CHAT_BODY, "sim": {"stall_after": 3}}),
        (EMBEDDINGS, {"model": "sim-small", "input": "x", "sim": {"stall_after": 0}}),
    ],
)
def test_a_stall_before_the_response_starts(
    pauses: Pauses, path: str, body: dict[str, Any]
) -> None:
    engine = make_engine(pauses, max_stall_s=0.01)
    response = request(engine, "POST", path, body)
    assert response.status_code == 504
    assert error_of(response)["code"] == "stall_timeout"


@pytest.mark.parametrize("stream", [False, True])
def test_drop_after_breaks_the_response_in_process(pauses: Pauses, stream: bool) -> None:
    engine = make_engine(pauses)
    body = {**CHAT_BODY, "stream": stream, "sim": {"drop_after": 3}}
    with pytest.raises(SimulatedDrop):
        request(engine, "POST", CHAT, body)
    assert (engine.completed, engine.disconnected, engine.active) == (0, 0, 0)


# --- Behind uvicorn -----------------------------------------------------------------------


@pytest.fixture
def served(pauses: Pauses) -> Iterator[tuple[SimulatedEngine, openai.OpenAI]]:
    """An engine (API key ``k``) behind uvicorn, and an openai client for it."""
    engine = make_engine(pauses, ttft_s=0.1, tokens_per_s=20, api_key="k")
    with (
        serve(engine) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client,
    ):
        yield engine, client


def test_openai_sdk_chat(served: tuple[SimulatedEngine, openai.OpenAI]) -> None:
    engine, client = served
    messages: Any = CHAT_BODY["messages"]
    whole = client.chat.completions.create(model="sim-small", messages=messages)
    assert whole.choices[0].message.content == FULL_TEXT
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage is not None
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (3, 16)
    stream = client.chat.completions.create(
        model="sim-small", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert {chunk.id for chunk in chunks} == {whole.id}
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == FULL_TEXT
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert [c.usage is not None for c in chunks] == [False] * 18 + [True]
    assert engine.requests[1].headers["authorization"] == "Bearer k"
    # The engine counts a response once its last send returned: the client may be done
    # reading before that.
    assert wait_for(lambda: (engine.completed, engine.disconnected) == (2, 0))


def test_openai_sdk_completions(served: tuple[SimulatedEngine, openai.OpenAI]) -> None:
    _, client = served
    whole = client.completions.create(model="sim-large", prompt="once upon a time", max_tokens=5)
    assert whole.choices[0].text == "lorem ipsum dolor sit amet "
    assert whole.choices[0].finish_reason == "length"
    stream = client.completions.create(
        model="sim-large", prompt="once upon a time", max_tokens=5, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert {c.id for c in chunks} == {whole.id}


def test_openai_sdk_embeddings_decode_base64(served: tuple[SimulatedEngine, openai.OpenAI]) -> None:
    engine, client = served
    inputs = ["first text", "second text"]
    default = client.embeddings.create(model="sim-small", input=inputs)
    floats = client.embeddings.create(model="sim-small", input=inputs, encoding_format="float")
    assert engine.requests[0].body["encoding_format"] == "base64"
    assert [d.embedding for d in default.data] == [d.embedding for d in floats.data]
    assert [len(d.embedding) for d in default.data] == [8, 8]
    assert default.usage.prompt_tokens == 4


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, openai.BadRequestError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_openai_sdk_sees_fail_statuses(
    served: tuple[SimulatedEngine, openai.OpenAI], status: int, error: type[openai.APIStatusError]
) -> None:
    engine, client = served
    with pytest.raises(error) as raised:
        client.chat.completions.create(
            model="sim-small", messages=CHAT_BODY["messages"], extra_body={"sim": {"fail": status}}
        )
    assert raised.value.status_code == status
    assert raised.value.body == {
        "message": "simulated failure",
        "type": "server_error" if status >= 500 else "invalid_request_error",
        "param": None,
        "code": None,
    }
    assert len(engine.requests) == 1


def test_openai_sdk_refused_without_the_key(served: tuple[SimulatedEngine, openai.OpenAI]) -> None:
    _, client = served
    with pytest.raises(openai.AuthenticationError):
        client.with_options(api_key="nope").models.list()
    assert [m.id for m in client.models.list()] == ["sim-small", "sim-large"]


@pytest.mark.parametrize("stream", [False, True])
def test_drop_after_makes_the_sdk_raise(
    served: tuple[SimulatedEngine, openai.OpenAI], stream: bool
) -> None:
    engine, client = served
    texts: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        answer = client.chat.completions.create(
            model="sim-small",
            messages=CHAT_BODY["messages"],
            stream=stream,
            extra_body={"sim": {"drop_after": 3}},
        )
        if isinstance(answer, openai.Stream):
            texts.extend(chunk.choices[0].delta.content or "" for chunk in answer)
    assert texts == (["", *TOKENS[:3]] if stream else [])
    assert wait_for(lambda: engine.active == 0)
    assert (engine.completed, engine.disconnected) == (0, 0)


def test_a_client_disconnect_cancels_the_upstream_generation() -> None:
    # Real time: a 10-minute answer that only a cancelled generation does not finish.
    engine = SimulatedEngine(tokens_per_s=100)
    with (
        serve(engine) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0) as client,
    ):
        stream = client.chat.completions.create(
            model="sim-small",
            messages=CHAT_BODY["messages"],
            stream=True,
            extra_body={"sim": {"tokens": 60_000}},
        )
        chunks = iter(stream)
        assert [next(chunks).choices[0].delta.content for _ in range(4)] == ["", *TOKENS[:3]]
        stream.close()
        assert wait_for(lambda: engine.disconnected == 1)
        assert wait_for(lambda: engine.active == 0)
    assert (engine.completed, engine.disconnected) == (0, 1)


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_timing_out_on_a_stall_is_a_disconnect(
    served: tuple[SimulatedEngine, openai.OpenAI], stream: bool
) -> None:
    engine, client = served
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(
            model="sim-small",
            messages=CHAT_BODY["messages"],
            stream=stream,
            extra_body={"sim": {"stall_after": 0}},
            timeout=0.2,
        )
    assert wait_for(lambda: engine.disconnected == 1)
    assert (engine.completed, engine.active) == (0, 0)


# --- The command line ---------------------------------------------------------------------


@pytest.fixture
def uvicorn_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    """What ``uvicorn.run`` was called with, instead of serving."""
    runs: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: runs.append((app, kwargs)))
    return runs


def test_main_serves_the_engine(uvicorn_runs: list[tuple[Any, dict[str, Any]]]) -> None:
    main(["--port", "8123", "--ttft-ms", "150", "--tokens-per-s", "40", "--models", "a, b",
          "--api-key", "KEY", "--host", "::1"])  # fmt: skip
    [(engine, kwargs)] = uvicorn_runs
    assert isinstance(engine, SimulatedEngine)
    assert (engine.ttft_s, engine.tokens_per_s, engine.models) == (0.15, 40.0, ("a", "b"))
    assert engine.api_key == "KEY"
    assert kwargs == {"host": "::1", "port": 8123, "log_level": "warning", "lifespan": "on"}


def test_main_defaults(uvicorn_runs: list[tuple[Any, dict[str, Any]]]) -> None:
    main([])
    [(engine, kwargs)] = uvicorn_runs
    assert (engine.ttft_s, engine.tokens_per_s, engine.api_key) == (0.0, None, None)
    assert engine.models == ("sim-small", "sim-large")
    assert (kwargs["host"], kwargs["port"]) == ("127.0.0.1", 8001)


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--host", "0.0.0.0"], "--host must be one of 127.0.0.1, localhost, ::1"),
        (["--host", "example.com"], "--host must be one of"),
        (["--tokens-per-s", "0"], "--tokens-per-s"),
        (["--ttft-ms", "-5"], "--ttft-ms"),
        (["--models", " , "], "--models names no model"),
    ],
)
def test_main_refuses(
    uvicorn_runs: list[tuple[Any, dict[str, Any]]],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    complaint: str,
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert complaint in capsys.readouterr().err
    assert uvicorn_runs == []
