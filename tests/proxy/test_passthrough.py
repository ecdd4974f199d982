"""The pass-through with the official openai SDK against the simulated engine: answers
identical to calling the engine directly, and records that carry the right figures."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest

from ferrox_stats import live, tokens
from ferrox_stats.archive.writer import ArchiveWriter
from ferrox_stats.models import FinishedRequest
from loadgen.engine import SimulatedEngine
from tests.api.conftest import PREFIX, TokenClient
from tests.asgi_server import serve
from tests.proxy.conftest import UPSTREAM_KEY, Plane, no_pause, set_proxy, upstreams

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = [{"role": "user", "content": "say something short and sweet"}]
PROMPT_TOKENS = 5  # the engine counts words


def async_sdk(base: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base, api_key=key, max_retries=0)


def direct(plane: Plane) -> openai.OpenAI:
    """The engine's twin, called without the pass-through."""
    return plane.sdk(direct=True)


def through(plane: Plane) -> openai.OpenAI:
    return plane.sdk()


def no_id(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without its ``id``: the pass-through's answers carry their request's."""
    return {key: value for key, value in answer.items() if key != "id"}


def no_ids(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [no_id(chunk) for chunk in chunks]


# -- whole answers --------------------------------------------------------------


def test_chat_answer_is_the_engines_and_is_recorded(plane: Plane) -> None:
    ask: dict[str, Any] = {
        "model": "sim-small",
        "messages": MESSAGES,
        "extra_body": {"sim": {"tokens": 7, "ttft_ms": 120, "tokens_per_s": 50}},
    }
    answer = through(plane).chat.completions.create(**ask)
    recorded = plane.only_entry()
    assert no_id(answer.model_dump()) == no_id(
        direct(plane).chat.completions.create(**ask).model_dump()
    )
    assert answer.choices[0].message.content
    assert recorded["route"] == "/v1/chat/completions"
    assert recorded["model"] == "sim-small"
    assert recorded["status"] == 200
    assert recorded["stream"] is False
    assert (recorded["prompt_tokens"], recorded["completion_tokens"]) == (PROMPT_TOKENS, 7)
    assert recorded["finish_reason"] == "stop"
    # The engine took 120 ms + 7 tokens at 50/s; no first token is seen in a whole answer.
    assert recorded["duration_ms"] == pytest.approx(120 + 7 * 20)
    assert recorded["ttft_ms"] is None and recorded["decode_ms"] is None
    assert recorded["via_api_key"] == "team-a"
    assert recorded["client"] == "127.0.0.1"
    assert recorded["aborted"] is None and recorded["error"] is None
    assert plane.inflight() == 0


def test_request_id_is_returned_as_header_and_answer_id_and_recorded(plane: Plane) -> None:
    raw = through(plane).chat.completions.with_raw_response.create(
        model="sim-small", messages=MESSAGES
    )
    request_id = raw.headers["x-request-id"]
    assert request_id.startswith("chatcmpl-")
    assert raw.parse().id == request_id
    assert plane.only_entry()["request_id"] == request_id


def test_completions_answer_is_the_engines_and_is_recorded(plane: Plane) -> None:
    ask: dict[str, Any] = {"model": "sim-large", "prompt": "once upon a time", "max_tokens": 3}
    answer = through(plane).completions.create(**ask)
    assert no_id(answer.model_dump()) == no_id(direct(plane).completions.create(**ask).model_dump())
    recorded = plane.only_entry()
    assert (recorded["route"], recorded["model"]) == ("/v1/completions", "sim-large")
    assert (recorded["prompt_tokens"], recorded["completion_tokens"]) == (4, 3)
    assert recorded["finish_reason"] == "length"


def test_embeddings_are_the_engines_and_are_recorded(plane: Plane) -> None:
    ask: dict[str, Any] = {"model": "sim-small", "input": ["one two", "three"]}
    answer = through(plane).embeddings.create(**ask)
    assert answer.model_dump() == direct(plane).embeddings.create(**ask).model_dump()
    assert len(answer.data) == 2
    recorded = plane.only_entry()
    assert recorded["route"] == "/v1/embeddings"
    assert (recorded["prompt_tokens"], recorded["completion_tokens"]) == (3, 0)
    assert recorded["stream"] is False


def test_bodies_are_byte_identical(plane: Plane) -> None:
    body = {"model": "sim-small", "messages": MESSAGES, "max_tokens": 4}
    headers = {"Authorization": f"Bearer {plane.secret}"}
    relayed = httpx.post(f"{plane.base}/chat/completions", json=body, headers=headers)
    straight = httpx.post(
        f"{plane.twin_url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {UPSTREAM_KEY}"},
    )
    assert relayed.status_code == straight.status_code == 200
    # Byte for byte but the id, which is the request's own.
    ours, theirs = relayed.headers["x-request-id"], straight.json()["id"]
    assert relayed.json()["id"] == ours
    assert relayed.content.replace(ours.encode(), theirs.encode()) == straight.content
    assert relayed.headers["content-type"] == straight.headers["content-type"]


def test_upstream_gets_its_own_key_never_the_callers(plane: Plane) -> None:
    through(plane).chat.completions.create(model="sim-small", messages=MESSAGES)
    (seen,) = plane.engine.requests
    assert seen.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert plane.secret not in str(seen.headers)
    assert seen.headers["x-request-id"] == plane.only_entry()["request_id"]


# -- streams ------------------------------------------------------------------------


STREAM_ASK: dict[str, Any] = {
    "model": "sim-small",
    "messages": MESSAGES,
    "stream": True,
    "extra_body": {"sim": {"tokens": 6, "ttft_ms": 80, "tokens_per_s": 100}},
}


def _chunks(stream: Any) -> list[dict[str, Any]]:
    return [chunk.model_dump() for chunk in stream]


def test_stream_is_the_engines_and_is_recorded_exactly(plane: Plane) -> None:
    relayed = _chunks(through(plane).chat.completions.create(**STREAM_ASK))
    recorded = plane.only_entry()
    assert no_ids(relayed) == no_ids(_chunks(direct(plane).chat.completions.create(**STREAM_ASK)))
    assert {chunk["id"] for chunk in relayed} == {recorded["request_id"]}
    # Role chunk, six tokens, the finish chunk; no usage chunk: the client did not ask.
    assert len(relayed) == 8
    assert all(chunk["usage"] is None for chunk in relayed)
    assert recorded["stream"] is True
    assert (recorded["prompt_tokens"], recorded["completion_tokens"]) == (PROMPT_TOKENS, 6)
    assert recorded["finish_reason"] == "stop"
    # Lockstep time: TTFT is the engine's 80 ms; decode is 5 gaps of 10 ms.
    assert recorded["ttft_ms"] == pytest.approx(80)
    assert recorded["decode_ms"] == pytest.approx(50)
    assert recorded["duration_ms"] == pytest.approx(130)
    assert recorded["decode_tps"] == pytest.approx(100)
    assert plane.inflight() == 0


def test_pass_through_asks_the_upstream_for_usage(plane: Plane) -> None:
    list(through(plane).chat.completions.create(**STREAM_ASK))
    (seen,) = plane.engine.requests
    assert seen.body["stream_options"] == {"include_usage": True}


def test_usage_chunk_reaches_a_client_that_asked(plane: Plane) -> None:
    ask = {**STREAM_ASK, "stream_options": {"include_usage": True}}
    relayed = _chunks(through(plane).chat.completions.create(**ask))
    assert no_ids(relayed) == no_ids(_chunks(direct(plane).chat.completions.create(**ask)))
    assert relayed[-1]["choices"] == []
    assert relayed[-1]["usage"]["completion_tokens"] == 6
    assert plane.only_entry()["completion_tokens"] == 6


def test_stream_bytes_are_identical(plane: Plane) -> None:
    body = {"model": "sim-small", "messages": MESSAGES, "stream": True, "max_tokens": 3}

    def read(url: str, key: str) -> tuple[bytes, str | None]:
        with httpx.stream(
            "POST", url, json=body, headers={"Authorization": f"Bearer {key}"}
        ) as answer:
            assert answer.headers["content-type"].startswith("text/event-stream")
            return answer.read(), answer.headers.get("x-request-id")

    relayed, ours = read(f"{plane.base}/chat/completions", plane.secret)
    straight, _ = read(f"{plane.twin_url}/v1/chat/completions", UPSTREAM_KEY)
    # Byte for byte but the id, in every event: the request's own.
    theirs = json.loads(straight.split(b"\n")[0].removeprefix(b"data: "))["id"]
    assert ours is not None and ours.encode() in relayed and theirs.encode() not in relayed
    assert relayed.replace(ours.encode(), theirs.encode()) == straight


def test_completions_stream_is_the_engines(plane: Plane) -> None:
    ask: dict[str, Any] = {"model": "sim-small", "prompt": "a b", "stream": True, "max_tokens": 4}
    relayed = _chunks(through(plane).completions.create(**ask))
    assert no_ids(relayed) == no_ids(_chunks(direct(plane).completions.create(**ask)))
    recorded = plane.only_entry()
    assert (recorded["completion_tokens"], recorded["finish_reason"]) == (4, "length")
    assert recorded["route"] == "/v1/completions"


def test_async_client_streams_and_whole_answers(plane: Plane) -> None:
    async def run() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
        async with async_sdk(plane.base, plane.secret) as client:
            stream = await client.chat.completions.create(**STREAM_ASK)
            chunks = [chunk.model_dump() async for chunk in stream]
            whole = await client.completions.create(model="sim-small", prompt="x", max_tokens=2)
            vectors = await client.embeddings.create(model="sim-large", input="a b c")
            return chunks, whole.model_dump(), vectors.model_dump()

    chunks, whole, vectors = asyncio.run(run())
    straight = direct(plane)
    assert no_ids(chunks) == no_ids(_chunks(straight.chat.completions.create(**STREAM_ASK)))
    ask: dict[str, Any] = {"model": "sim-small", "prompt": "x", "max_tokens": 2}
    assert no_id(whole) == no_id(straight.completions.create(**ask).model_dump())
    assert vectors == straight.embeddings.create(model="sim-large", input="a b c").model_dump()
    streamed, answered, embedded = plane.entries()
    assert (streamed["stream"], streamed["completion_tokens"]) == (True, 6)
    assert (answered["stream"], answered["completion_tokens"]) == (False, 2)
    assert (embedded["route"], embedded["prompt_tokens"]) == ("/v1/embeddings", 3)


def test_models_list_is_the_engines(plane: Plane) -> None:
    listed = [model.id for model in through(plane).models.list()]
    assert listed == [model.id for model in direct(plane).models.list()]
    assert listed == ["sim-small", "sim-large"]
    assert plane.records() == []  # not inference: not recorded


def test_hundred_concurrent_streams_are_each_recorded_once(plane: Plane) -> None:
    async def one(client: openai.AsyncOpenAI, n: int) -> int:
        stream = await client.chat.completions.create(
            model="sim-small",
            messages=[{"role": "user", "content": f"stream {n}"}],
            stream=True,
            max_tokens=5,
        )
        return len([c async for c in stream if c.choices and c.choices[0].delta.content])

    async def run() -> list[int]:
        async with async_sdk(plane.base, plane.secret) as client:
            return await asyncio.gather(*(one(client, n) for n in range(100)))

    plane.engine.pause = no_pause
    # Archived too, behind the request path: each one once.
    writer = ArchiveWriter(instance="proxy-test", autostart=False)
    live.get_recorder().sink = writer
    assert asyncio.run(run()) == [5] * 100
    entries = plane.entries()
    assert len(entries) == 100
    assert len({e["request_id"] for e in entries}) == 100
    assert {(e["status"], e["completion_tokens"], e["aborted"]) for e in entries} == {
        (200, 5, None)
    }
    assert plane.inflight() == 0
    assert writer.drain(10.0)
    archived = FinishedRequest.objects.values_list("request_id", "completion_tokens")
    assert sorted(archived) == sorted((e["request_id"], 5) for e in entries)


def test_a_producer_squatting_the_servers_identity_loses_no_pass_through_record(
    plane: Plane,
) -> None:
    # What an ingest token can learn (the instance from /v1/stats, seqs and request ids
    # from the ring), replayed before the archiver writes, with the server's replica.
    plane.engine.pause = no_pause
    recorder = live.get_recorder()
    writer = ArchiveWriter(instance=recorder.instance, autostart=False)
    recorder.sink = writer
    for _ in range(8):
        through(plane).chat.completions.create(model="sim-small", messages=MESSAGES)
    rows = recorder.stats.since(0, 256).rows
    assert len(rows) == 8
    _, secret = tokens.issue("squatter", read=False, ingest=True, replica=recorder.replica)
    squat = {
        "instance": recorder.instance,
        "records": [{"request_id": r.request_id, "at_ms": r.at_ms, "seq": s} for s, r in rows],
    }
    answer = TokenClient(secret).post(
        f"{PREFIX}/v1/ingest", data=json.dumps(squat), content_type="application/json"
    )
    assert answer.json()["accepted"] == 8
    assert writer.drain(10.0)
    assert writer.health().duplicates == 0
    own = FinishedRequest.objects.filter(ingested=False, instance=recorder.instance)
    assert sorted(own.values_list("seq", "request_id")) == sorted(
        (s, r.request_id) for s, r in rows
    )


def test_routes_by_model_to_the_upstream_that_serves_it(plane: Plane, settings: Any) -> None:
    other = SimulatedEngine(models=("other-model",), api_key=UPSTREAM_KEY)
    with serve(other) as other_url:
        routes = upstreams(sim=plane.engine_url, other=other_url)
        routes["sim"]["MODELS"] = ["sim-small", "sim-large"]
        set_proxy(settings, PROXY_UPSTREAMS=routes)
        client = through(plane)
        client.chat.completions.create(model="other-model", messages=MESSAGES)
        client.chat.completions.create(model="sim-small", messages=MESSAGES)
        listed = sorted(model.id for model in client.models.list())
    assert [seen.body["model"] for seen in other.requests if seen.body] == ["other-model"]
    assert [seen.body["model"] for seen in plane.engine.requests if seen.body] == ["sim-small"]
    assert listed == ["other-model", "sim-large", "sim-small"]


def test_connections_to_the_upstream_are_pooled(plane: Plane, settings: Any) -> None:
    peers: list[tuple[str, int]] = []
    engine = SimulatedEngine(api_key=UPSTREAM_KEY, pause=no_pause)

    async def watched(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            peers.append(scope["client"])

        async def late_end(message: Any) -> None:
            # The body's end comes a moment after "[DONE]", as over a real network: the
            # openai client hangs up on "[DONE]", and the pass-through must still have
            # read the upstream body to its end for the connection to stay pooled.
            if message["type"] == "http.response.body" and not message.get("more_body"):
                await send({**message, "more_body": True})
                await asyncio.sleep(0.05)
                message = {"type": "http.response.body", "body": b""}
            await send(message)

        await engine(scope, receive, late_end)

    with serve(watched) as url:
        set_proxy(settings, PROXY_UPSTREAMS=upstreams(watched=url))
        client = through(plane)
        for _ in range(5):
            client.chat.completions.create(model="sim-small", messages=MESSAGES)
            list(client.chat.completions.create(model="sim-small", messages=MESSAGES, stream=True))
    assert len(peers) == 10
    # Two connections, kept alive, for all ten: the next request may go while a stream's
    # connection still reads its end, which puts it back in the pool for a later one.
    # A connection dropped with each stream would make six.
    assert len(set(peers)) <= 2


def test_an_engine_answering_a_stream_request_whole_is_relayed_whole(
    plane: Plane, settings: Any
) -> None:
    body = (
        b'{"id": "x", "object": "chat.completion", "model": "sim-small", "choices": [{"index": 0,'
        b' "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],'
        b' "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}}'
    )

    async def ignores_stream(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    with serve(ignores_stream) as url:
        set_proxy(settings, PROXY_UPSTREAMS=upstreams(plain=url))
        answer = httpx.post(
            f"{plane.base}/chat/completions",
            json={"model": "sim-small", "messages": MESSAGES, "stream": True},
            headers={"Authorization": f"Bearer {plane.secret}"},
        )
    ours = answer.headers["x-request-id"].encode()
    assert answer.content == body.replace(b'"id": "x"', b'"id": "' + ours + b'"')
    recorded = plane.only_entry()
    assert (recorded["stream"], recorded["completion_tokens"], recorded["error"]) == (True, 1, None)


def test_bodies_and_keys_are_never_recorded_or_logged(
    plane: Plane, caplog: pytest.LogCaptureFixture
) -> None:
    canary = "CANARY-prompt-7f3a9"
    caplog.set_level("DEBUG")
    client = through(plane)
    answer = client.chat.completions.create(
        model="sim-small", messages=[{"role": "user", "content": canary}]
    )
    generated = answer.choices[0].message.content
    list(client.completions.create(model="sim-small", prompt=canary, stream=True, max_tokens=2))
    with pytest.raises(openai.InternalServerError):
        client.embeddings.create(model="sim-small", input=canary, extra_body={"sim": {"fail": 500}})
    recorded = str(plane.entries())
    answered = plane.engine.requests  # the engine did get them: they were relayed
    assert all(canary in str(seen.body) for seen in answered)
    assert generated
    for secret in (canary, generated, plane.secret, UPSTREAM_KEY):
        assert secret not in recorded
        assert secret not in caplog.text
