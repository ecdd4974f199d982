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

from .core.serving import CLIENT_DISCONNECT, EXPLICIT

if TYPE_CHECKING:
    from .live import Recorder

# What a finished request counts in the serving counters (``Recorder.end``'s ``counts``).
COUNTS_NOTHING = 0  # aborting, not in flight, or a bare record (``Recorder.finished``)
COUNTS_COMPLETED = 1
COUNTS_ERROR = 2  # a completion that carried an error: aborts["error"] too
COUNTS_INGESTED = 3  # served by another process: counted as ``ServingStats.count_finished`` does


class ClientDisconnected(Exception):
    """Raise inside a tracked request when the client went away."""


# Exceptions that mean the client stopped listening, not that serving failed.
DISCONNECT_EXCEPTIONS: tuple[type[BaseException], ...] = (
    asyncio.CancelledError,
    GeneratorExit,
    ClientDisconnected,
)


class Tracker:
    """One request from arrival to its terminal report. Use it once.

    Attributes a feeder learns along the way (``model``, ``status``, ``request_id``,
    ``finish_reason`` …) may be set directly; ``finish()`` arguments override them.
    """

    # Slots, every one stored by the constructor: on CPython 3.11 and 3.12 a slotted
    # tracker storing all twenty-two costs 9-16 % less per request than a dict-backed
    # one storing seven over class-level defaults, because the stores a request makes
    # later (first token, finish) are slot writes too (docs/benchmarks.md, "The hot
    # path: where a tracked request's time goes"). A tracker takes no attribute but
    # these.
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
        recorder = self._recorder
        self._arrived = recorder.clock.monotonic()
        # In flight: its own key, unique and begun once (checked above), so one dict
        # store (atomic in CPython) and no lock.
        recorder._inflight[self] = False
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
        recorder.observe_tokens(now, prompt, completion)

    def abort(self, reason: str = EXPLICIT) -> None:
        """Count an abort now; the request still ends when the tracker exits or finishes."""
        if self._recorder._serving.abort(self, reason):
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

    __enter__ = begin

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._ended:  # the usual exit: finish() already ended it
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
        now = clock.monotonic()
        # Totals known only at the end still count, once.
        prompt_seen = self._prompt_seen
        completion_seen = self._completion_seen
        prompt = self.prompt_tokens
        completion = self.completion_tokens
        prompt_extra = prompt - prompt_seen if prompt is not None and prompt > prompt_seen else 0
        completion_extra = (
            completion - completion_seen
            if completion is not None and completion > completion_seen
            else 0
        )
        if completion is None:
            completion = completion_seen or None
        if prompt is None:
            prompt = prompt_seen or None
        first = self._first_token_at
        last = now if completion_extra and first is not None else self._last_token_at
        arrived = self._arrived
        started = self._started
        try:
            # The record as a row (``core.requests.as_record``): an exact tuple of
            # ``Record``'s fields, in order, which the collector untracks.
            record = (
                self.request_id,
                clock.wall_ms(),
                self.route,
                self.model,
                self.status,
                self.stream,
                prompt,
                completion,
                self.cached_tokens,
                None if first is None else (first - arrived) * 1000.0,
                (now - arrived) * 1000.0,
                None if started is None else (started - arrived) * 1000.0,
                None if first is None or last is None else (last - first) * 1000.0,
                self.finish_reason,
                self._aborted,
                self.error,
                self.client,
                self.via_api_key,
                recorder.replica,
            )
        except BaseException:
            # However recording went, the request leaves flight.
            recorder._serving.finish(self, self.error is not None)
            raise
        # ``ServingStats.leave``, inlined for the usual case.
        aborting = recorder._inflight.pop(self, None)
        if aborting is None:
            aborting = recorder._serving.leave(self)
        # An aborting request counts nothing more; any other is a completion (and an
        # error, if it carried one), counted when the recorder folds the report.
        counts = (
            COUNTS_NOTHING
            if aborting is None or aborting
            else COUNTS_ERROR
            if self.error is not None
            else COUNTS_COMPLETED
        )
        # ``Recorder.end``, inlined: the seq, one report queued, the sink.
        self.seq = seq = next(recorder._seqs)
        pending = recorder._pending
        pending.append((now, prompt_extra, completion_extra, counts, seq, record))
        if len(pending) >= recorder._fold_at:
            recorder._fold_on_request(len(pending))
        if recorder.sink is not None:
            recorder._submit(seq, record)
        return seq
