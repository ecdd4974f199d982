"""A streamed answer relayed event by event, and the request's end when it stops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import httpx

from ..tracker import Tracker
from .accounting import StreamReader
from .errors import UPSTREAM_BROKEN, UPSTREAM_TIMEOUT, sse_error_event

# Closing an upstream answer from outside the loop needs a task; keep a reference to
# each until it is done (the loop holds tasks only weakly).
_closing: set[asyncio.Task[None]] = set()


def _in_background(closing: Coroutine[Any, Any, None]) -> None:
    task = asyncio.ensure_future(closing)
    _closing.add(task)
    task.add_done_callback(_closing.discard)


class RelayStream:
    """The content of a ``StreamingHttpResponse``: the upstream's SSE bytes, passed on
    as each event completes, read by a ``StreamReader`` on the way.

    The request ends when the relay does: properly (usage from the stream; recorded as
    the upstream's "[DONE]" passes, before the client has it), with an upstream
    failure (told to the client as an error event), or by the client leaving
    (``aborted: client_disconnect``, with the tokens it was sent). Leaving closes
    the upstream answer, which cancels the request on the engine.
    """

    def __init__(self, tracker: Tracker, answer: httpx.Response, reader: StreamReader) -> None:
        self._tracker = tracker
        self._answer = answer
        self._reader = reader
        self._loop = asyncio.get_running_loop()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._relay()

    async def _relay(self) -> AsyncIterator[bytes]:
        tracker, reader = self._tracker, self._reader
        failure: BaseException | None = None
        try:
            try:
                async for data in self._answer.aiter_raw():
                    out = reader.feed(data)
                    if reader.done:
                        # Recorded before the client is handed "[DONE]": a client that
                        # has its whole answer finds its request in the ring (as with a
                        # whole JSON answer), not after the upstream hangs up.
                        tracker.close()
                    if out:
                        yield out
                if rest := reader.flush():
                    yield rest
                if not reader.done and tracker.error is None:
                    tracker.error = UPSTREAM_BROKEN
            except httpx.TimeoutException:
                tracker.error = UPSTREAM_TIMEOUT
                yield sse_error_event("The upstream stopped sending in time.", UPSTREAM_TIMEOUT)
            except httpx.TransportError:
                tracker.error = UPSTREAM_BROKEN
                yield sse_error_event("The upstream broke off the stream.", UPSTREAM_BROKEN)
        except BaseException as exc:  # the client left (cancelled, closed) or a bug
            failure = exc
            raise
        finally:
            # The request ends first: closing the upstream may be interrupted.
            tracker.close(failure)
            await self._answer.aclose()

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
        if not self._answer.is_closed:
            _in_background(self._answer.aclose())
