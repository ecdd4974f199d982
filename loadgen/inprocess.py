"""The in-process feeder: plans served through this process's tracker, in real (scaled) time.

``play`` drives one tracker exactly as serving code would (start, tokens as they are
decoded, finish, or the exception that ends it), so the recorder sees what it would see
from a real engine; ``InProcessFeeder`` adds the pool blocks and occasional pool report.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ferrox_stats import live

from .plan import (
    ABORTED,
    ENGINE_ERRORS,
    ERROR,
    OK,
    REFUSED,
    EngineError,
    EngineTimeout,
    RequestPlan,
)
from .pool import Pool


def play(plan: RequestPlan, recorder: live.Recorder, pause: Callable[[float], None]) -> str:
    """Serve ``plan`` through ``recorder``'s tracker; returns how it really ended.

    ``pause(seconds)`` stands in for serving time; raising ``ClientDisconnected`` from it
    (the run is stopping) ends the request as a client abort, as it would be.
    """
    tracker = recorder.track(
        route=plan.route,
        model=plan.model,
        stream=plan.stream,
        request_id=plan.request_id,
        client=plan.client,
        via_api_key=plan.via_api_key,
    )
    try:
        with tracker as t:
            if plan.outcome == REFUSED:
                pause(plan.tail_s)
                t.finish(status=plan.status)
                return REFUSED
            pause(plan.queue_s)
            t.started()
            t.tokens(prompt=plan.prompt_tokens or 0)
            t.cached_tokens = plan.cached_tokens
            t.status = plan.status
            pause(plan.prefill_s)
            produced = 0
            if plan.completion_tokens:
                # A non-streaming response still has a first token; only the totals wait.
                if plan.stream:
                    t.tokens(completion=1)
                else:
                    t.first_token()
                produced = 1
            chunk = max(1, round(plan.decode_tps / 10))  # about ten deltas a second
            while produced < plan.completion_tokens:
                n = min(chunk, plan.completion_tokens - produced)
                pause(n / plan.decode_tps)
                if plan.stream:
                    t.tokens(completion=n)
                produced += n
            pause(plan.tail_s)
            if plan.outcome == ABORTED:
                raise live.ClientDisconnected
            if plan.error is not None:
                raise ENGINE_ERRORS[plan.error][0]
            t.finish(
                status=plan.status,
                finish_reason=plan.finish_reason,
                prompt_tokens=plan.prompt_tokens,
                completion_tokens=plan.completion_tokens,
            )
            return OK
    except live.ClientDisconnected:
        return ABORTED
    except (EngineError, EngineTimeout):
        return ERROR


class InProcessFeeder:
    """Serves plans through ``recorder`` from any number of threads, holding pool blocks."""

    def __init__(self, recorder: live.Recorder, pool: Pool) -> None:
        self.recorder = recorder
        self.pool = pool
        self._lock = threading.Lock()
        self._served = 0

    def serve(self, plan: RequestPlan, pause: Callable[[float], None]) -> str:
        """Play ``plan`` (see ``play``); returns how it really ended."""
        with self.pool.hold(plan):
            outcome = play(plan, self.recorder, pause)
            with self._lock:
                self._served += 1
                report_gauges = self._served % 5 == 0  # an occasional pool report
            if report_gauges:
                self.recorder.observe_gauges(**self.pool.gauges())
        return outcome
