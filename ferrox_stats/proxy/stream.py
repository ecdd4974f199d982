"""A streamed answer relayed event by event, and the request's end when it stops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import aiohttp

from ..tracker import Tracker
from .accounting import StreamReader
from .clients import UPSTREAM_ERRORS
from .errors import UPSTREAM_BROKEN, UPSTREAM_TIMEOUT, sse_error_event

_T = TypeVar("_T")

# Closing an upstream answer from outside the loop, or reading its end while the client
# may leave, needs a task; keep a reference to each until it is done (the loop holds
# tasks only weakly).
_closing: set[asyncio.Task[Any]] = set()


def _in_background(work: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
    task = asyncio.ensure_future(work)
    _closing.add(task)
    task.add_done_callback(_closing.discard)
    return task


# After "[DONE]", how long the upstream may take to end its body, and how much it may
# send meanwhile, before its connection is dropped instead of going back to the pool.
_AFTER_DONE_S = 5.0
_AFTER_DONE_BYTES = 64 * 1024


async def _rest_of_body(
    answer: aiohttp.ClientResponse, chunks: AsyncIterator[bytes], reader: StreamReader
) -> bytes:
    """Read the upstream body to its end once "[DONE]" has passed, then close it.

    It runs on a task of its own, started before the client is handed "[DONE]": a
    client may hang up the moment it sees "[DONE]" (the official openai client's
    synchronous stream does), and a read cancelled with the relay would close the
    upstream connection instead of returning it to the pool. What arrives is still
    relayed to a client that stays.
    """
    out = b""
    try:
        async with asyncio.timeout(_AFTER_DONE_S):
            async for data in chunks:
                out += reader.feed(data)
                if len(out) > _AFTER_DONE_BYTES:
                    answer.close()  # read no further: the connection cannot be reused
                    break
    except UPSTREAM_ERRORS:  # TimeoutError included
        answer.close()
    finally:
        # Back to the pool if the body was read to its end, else closed.
        answer.release()
    return out


class RelayStream:
    """The content of a ``StreamingHttpResponse``: the upstream's SSE bytes, passed on
    as each event completes, read by a ``StreamReader`` on the way.

    The request ends when the relay does: properly (usage from the stream; recorded as
    the upstream's "[DONE]" passes, before the client has it), with an upstream
    failure (told to the client as an error event), or by the client leaving
    (``aborted: client_disconnect``, with the tokens it was sent). Leaving closes
    the upstream answer, which cancels the request on the engine.
    """

    def __init__(
        self, tracker: Tracker, answer: aiohttp.ClientResponse, reader: StreamReader
    ) -> None:
        self._tracker = tracker
        self._answer = answer
        self._reader = reader
        self._loop = asyncio.get_running_loop()
        self._rest: asyncio.Task[bytes] | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._relay()

    async def _relay(self) -> AsyncIterator[bytes]:
        tracker, reader = self._tracker, self._reader
        failure: BaseException | None = None
        try:
            try:
                # What the connection has buffered, each time: events that arrived
                # together go on together (one write to the client, not one each).
                chunks = self._answer.content.iter_any()
                async for data in chunks:
                    out = reader.feed(data)
                    if reader.done:
                        # Recorded before the client is handed "[DONE]": a client that
                        # has its whole answer finds its request in the ring (as with a
                        # whole JSON answer), not after the upstream hangs up.
                        tracker.close()
                        self._rest = _in_background(_rest_of_body(self._answer, chunks, reader))
                        if out:
                            yield out
                        if rest := await asyncio.shield(self._rest):
                            yield rest
                        return
                    if out:
                        yield out
                if rest := reader.flush():
                    yield rest
                if not reader.done and tracker.error is None:
                    tracker.error = UPSTREAM_BROKEN
            except TimeoutError:  # silent past PROXY_READ_TIMEOUT_S
                tracker.error = UPSTREAM_TIMEOUT
                yield sse_error_event("The upstream stopped sending in time.", UPSTREAM_TIMEOUT)
            except UPSTREAM_ERRORS:
                tracker.error = UPSTREAM_BROKEN
                yield sse_error_event("The upstream broke off the stream.", UPSTREAM_BROKEN)
        except BaseException as exc:  # the client left (cancelled, closed) or a bug
            failure = exc
            raise
        finally:
            # The request ends first: closing the upstream may be interrupted.
            tracker.close(failure)
            if self._rest is None:  # else the rest's own task ends the answer
                # Released: back to the pool after a whole body, closed otherwise
                # (which cancels the request on the engine).
                self._answer.release()

    def close(self) -> None:
        """Django calls this when it is done with the response, from a worker thread.

        It matters when the client left before the first byte: the relay then never
        started, and only this ends the request and the upstream answer.
        """
        try:
            self._loop.call_soon_threadsafe(self._abandon)
        except RuntimeError:  # the loop is closed: nothing else can touch them now
            self._tracker.close(asyncio.CancelledError())

    def _abandon(self) -> None:
        self._tracker.close(asyncio.CancelledError())  # a no-op if the relay ended it
        if self._rest is None:
            self._answer.close()
