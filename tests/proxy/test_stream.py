"""The relay of a streamed answer (``ferrox_stats.proxy.stream``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from ferrox_stats import live
from ferrox_stats.proxy.accounting import StreamReader
from ferrox_stats.proxy.stream import RelayStream
from tests.conftest import FakeClock


class Upstream:
    """An upstream answer's body, not yet read, as aiohttp's ``StreamReader`` hands it
    out: what the connection has buffered, each time."""

    def __init__(self, *parts: bytes) -> None:
        self.parts = parts

    async def iter_any(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            yield part


class Answer:
    """What the relay uses of an ``aiohttp.ClientResponse``: its ``content``,
    ``release()`` (its connection back to the pool if the body was read to its end)
    and ``close()`` (the connection dropped: the engine sees the request cancelled)."""

    def __init__(self, content: Upstream) -> None:
        self.content = content
        self.released = self.closed = False

    def release(self) -> None:
        self.released = True

    def close(self) -> None:
        self.closed = True


def _answer(*parts: bytes) -> Any:
    return Answer(Upstream(*parts))


def test_a_stream_django_never_started_still_ends_its_request() -> None:
    """The client left before the first byte: Django never iterates the content, and
    calls ``close()`` from a worker thread. That alone must end the request."""
    recorder = live.reset(FakeClock())

    async def scenario() -> bool:
        tracker = recorder.track(route="/v1/chat/completions", stream=True).begin()
        answer = _answer(b"data: [DONE]\n\n")
        relay = RelayStream(tracker, answer, StreamReader(tracker, forward_usage=True))
        closer = threading.Thread(target=relay.close)
        closer.start()
        closer.join()
        for _ in range(5):  # the loop runs what close() handed it
            await asyncio.sleep(0)
        return answer.closed

    assert asyncio.run(scenario())
    (record,) = [r for _, r in recorder.stats.since(0, 10).rows]
    assert record.aborted == "client_disconnect"
    assert recorder.serving.active == 0
    live.reset()


def test_a_finished_stream_is_not_ended_twice_by_close() -> None:
    recorder = live.reset(FakeClock())

    async def scenario() -> list[bytes]:
        tracker = recorder.track(stream=True).begin()
        tracker.status = 200
        answer = _answer(b"data: [DONE]\n\n")
        relay = RelayStream(tracker, answer, StreamReader(tracker, forward_usage=True))
        sent = [part async for part in relay]
        relay.close()
        await asyncio.sleep(0)
        return sent

    assert asyncio.run(scenario()) == [b"data: [DONE]\n\n"]
    (record,) = [r for _, r in recorder.stats.since(0, 10).rows]
    assert (record.aborted, record.error, record.status) == (None, None, 200)
    live.reset()


def test_the_request_is_recorded_before_the_client_has_done() -> None:
    """A client that has read "[DONE]" finds its request in the ring, however long the
    upstream takes to hang up after it (here: the relay is never resumed past it)."""
    recorder = live.reset(FakeClock())
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1}}\n\n'
    content = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'

    async def scenario() -> tuple[list[bytes], int]:
        tracker = recorder.track(stream=True).begin()
        tracker.status = 200
        answer = _answer(content, usage + b"data: [DONE]\n\n", b": the upstream lingers\n\n")
        relay = RelayStream(tracker, answer, StreamReader(tracker, forward_usage=False))
        parts = relay.__aiter__()
        sent = [await anext(parts), await anext(parts)]
        recorded = len(recorder.stats.since(0, 10).rows)
        await parts.aclose()  # the client is done: the relay is not resumed
        return sent, recorded

    sent, recorded = asyncio.run(scenario())
    assert sent == [content, b"data: [DONE]\n\n"]  # the usage chunk kept from the client
    assert recorded == 1
    (record,) = [r for _, r in recorder.stats.since(0, 10).rows]
    assert (record.status, record.aborted, record.completion_tokens) == (200, None, 1)
    assert recorder.serving.active == 0
    live.reset()


class Watched(Upstream):
    """An upstream body that says whether it was read to its end; its end comes only
    when the test lets it (an engine's last write, a moment after "[DONE]")."""

    def __init__(self, *parts: bytes) -> None:
        super().__init__(*parts)
        self.end = asyncio.Event()
        self.read_to_end = False

    async def iter_any(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            yield part
        await self.end.wait()
        self.read_to_end = True


def test_a_client_leaving_on_done_does_not_cut_the_upstream_body() -> None:
    """The openai client hangs up as it sees "[DONE]". The upstream body's end is read
    anyway (read to its end, its connection goes back to the pool; cut, it is dropped)."""
    recorder = live.reset(FakeClock())

    async def scenario() -> tuple[list[bytes], Watched, Answer]:
        tracker = recorder.track(stream=True).begin()
        tracker.status = 200
        body = Watched(b"data: [DONE]\n\n")
        answer = Answer(body)
        relay = RelayStream(tracker, answer, StreamReader(tracker, forward_usage=True))
        parts = relay.__aiter__()
        sent = [await anext(parts)]
        await parts.aclose()  # the client left, the body's end not yet sent
        assert not (answer.released or answer.closed)
        body.end.set()
        for _ in range(5):  # the loop runs the read of the end
            await asyncio.sleep(0)
        return sent, body, answer

    sent, body, answer = asyncio.run(scenario())
    assert sent == [b"data: [DONE]\n\n"]
    assert body.read_to_end and answer.released and not answer.closed  # back to the pool
    (record,) = [r for _, r in recorder.stats.since(0, 10).rows]
    assert (record.aborted, record.status) == (None, 200)
    live.reset()
