"""The in-process feeder: one request tracked from arrival to its terminal report.

A ``Tracker`` comes from ``Recorder.track()`` (or ``live.track()``); it reads time only
through its recorder's clock. An exception inside ends the request with an error;
cancellation, ``GeneratorExit`` (the client went away mid-stream) or
``ClientDisconnected`` end it as aborted by ``client_disconnect``; in-flight never leaks.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING

from .core.requests import Record
from .core.serving import CLIENT_DISCONNECT, EXPLICIT

if TYPE_CHECKING:
    from .live import Recorder


class ClientDisconnected(Exception):
    """Raise inside a tracked request when the client went away."""


# Exceptions that mean the client stopped listening, not that serving failed.
DISCONNECT_EXCEPTIONS: tuple[type[BaseException], ...] = (
    asyncio.CancelledError,
    GeneratorExit,
    ClientDisconnected,
)


def _ms(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start) * 1000.0


class Tracker:
    """One request from arrival to its terminal report. Use it once.

    Attributes a feeder learns along the way (``model``, ``status``, ``request_id``,
    ``finish_reason`` …) may be set directly; ``finish()`` arguments override them.
    """

    __slots__ = (
        "_aborted",
        "_arrived",
        "_completion_seen",
        "_ended",
        "_first_token_at",
        "_last_token_at",
        "_prompt_seen",
        "_recorder",
        "_started",
        "cached_tokens",
        "client",
        "completion_tokens",
        "error",
        "finish_reason",
        "model",
        "prompt_tokens",
        "request_id",
        "route",
        "seq",
        "status",
        "stream",
        "via_api_key",
    )

    def __init__(
        self,
        recorder: Recorder,
        route: str | None,
        model: str | None,
        stream: bool | None,
        request_id: str | None,
        client: str | None,
        via_api_key: str | None,
    ) -> None:
        self._recorder = recorder
        self.route = route
        self.model = model
        self.stream = stream
        self.request_id = request_id
        self.client = client
        self.via_api_key = via_api_key
        self.status: int | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.seq: int | None = None
        self._arrived: float | None = None
        self._started: float | None = None
        self._first_token_at: float | None = None
        self._last_token_at: float | None = None
        self._prompt_seen = 0
        self._completion_seen = 0
        self._aborted: str | None = None
        self._ended = False

    # -- lifecycle -------------------------------------------------------------

    def begin(self) -> Tracker:
        """The request arrived: it is in flight from now."""
        if self._arrived is not None:
            raise RuntimeError("this tracker has already begun")
        self._arrived = self._recorder.clock.monotonic()
        self._recorder.serving.begin(self)
        return self

    def started(self) -> None:
        """Queueing is over and serving began (``queue_ms`` ends here)."""
        if self._started is None:
            self._started = self._recorder.clock.monotonic()

    def first_token(self) -> None:
        """The first token was produced (``ttft_ms`` ends here), if not already stamped."""
        if self._first_token_at is None:
            now = self._recorder.clock.monotonic()
            self._first_token_at = now
            self._last_token_at = now

    def tokens(self, completion: int = 0, prompt: int = 0) -> None:
        """Token deltas observed now; the first completion token stamps TTFT."""
        recorder = self._recorder
        now = recorder.clock.monotonic()
        if completion:
            if self._first_token_at is None:
                self._first_token_at = now
            self._last_token_at = now
            self._completion_seen += completion
        self._prompt_seen += prompt
        recorder.serving.observe_tokens(now, prompt, completion)

    def abort(self, reason: str = EXPLICIT) -> None:
        """Count an abort now; the request still ends when the tracker exits or finishes."""
        if self._recorder.serving.abort(self, reason):
            self._aborted = reason

    def finish(
        self,
        *,
        status: int | None = None,
        finish_reason: str | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        cached_tokens: int | None = None,
        error: str | None = None,
        model: str | None = None,
        request_id: str | None = None,
    ) -> int | None:
        """The terminal report: record the request and take it out of flight.

        Token totals given here that exceed the deltas already observed are counted
        now (a feeder that only knows totals reports them once, at the end).
        Returns the ring seq, or ``None`` if the request had already ended.
        """
        if status is not None:
            self.status = status
        if finish_reason is not None:
            self.finish_reason = finish_reason
        if prompt_tokens is not None:
            self.prompt_tokens = prompt_tokens
        if completion_tokens is not None:
            self.completion_tokens = completion_tokens
        if cached_tokens is not None:
            self.cached_tokens = cached_tokens
        if error is not None:
            self.error = error
        if model is not None:
            self.model = model
        if request_id is not None:
            self.request_id = request_id
        return self._end()

    # -- context managers ----------------------------------------------------------

    def __enter__(self) -> Tracker:
        return self.begin()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(exc)

    async def __aenter__(self) -> Tracker:
        return self.begin()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(exc)

    def close(self, exc: BaseException | None = None) -> None:
        """End the request as leaving its ``with`` block would, by ``exc`` if given.

        For a feeder that hands a begun request to code that outlives the block (a
        streamed response); a second end is a no-op.
        """
        if self._ended:
            return
        if exc is not None:
            if isinstance(exc, DISCONNECT_EXCEPTIONS):
                self.abort(CLIENT_DISCONNECT)
            elif self.error is None:
                # The class name only: an exception's message may quote content.
                self.error = type(exc).__name__
                if self.status is None:
                    self.status = 500
        self._end()

    def _end(self) -> int | None:
        if self._ended:
            return None
        if self._arrived is None:
            raise RuntimeError("finish() before begin(): enter the tracker first")
        self._ended = True
        recorder = self._recorder
        clock = recorder.clock
        try:
            now = clock.monotonic()
            # Totals known only at the end still count, once.
            prompt_extra = max(0, (self.prompt_tokens or 0) - self._prompt_seen)
            completion_extra = max(0, (self.completion_tokens or 0) - self._completion_seen)
            if prompt_extra or completion_extra:
                recorder.serving.observe_tokens(now, prompt_extra, completion_extra)
            completion = (
                self.completion_tokens
                if self.completion_tokens is not None
                else (self._completion_seen or None)
            )
            prompt = (
                self.prompt_tokens
                if self.prompt_tokens is not None
                else (self._prompt_seen or None)
            )
            first = self._first_token_at
            last = self._last_token_at
            if completion_extra and first is not None:
                last = now
            arrived = self._arrived
            record = Record(
                self.request_id,
                clock.wall_ms(),
                self.route,
                self.model,
                self.status,
                self.stream,
                prompt,
                completion,
                self.cached_tokens,
                _ms(arrived, first),
                (now - arrived) * 1000.0,
                _ms(arrived, self._started),
                _ms(first, last),
                self.finish_reason,
                self._aborted,
                self.error,
                self.client,
                self.via_api_key,
                recorder.replica,
            )
            self.seq = recorder.finished(record)
        finally:
            # However recording went, the request leaves flight.
            recorder.serving.finish(self, self.error is not None)
        return self.seq
