"""What an upstream's answer says about the request: tokens, first token, finish reason.

The answer passes on as the upstream sent it, byte for byte, but for two changes: a
usage chunk the pass-through asked for and the client did not is held back, and the
answer's ``id`` becomes the request's own (what ``X-Request-Id`` says and the request
is recorded under). An SDK shows that ``id`` as ``completion.id``; a caller searching
the archive for it finds its request. Engines' ids are not unique enough to be keys
(some reuse a few hundred, the simulated engine repeats one per body).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..tracker import Tracker
from .errors import UPSTREAM_STREAM_ERROR

# SSE events end with a blank line; engines write \n, the spec also allows \r\n
# (StreamReader._next_end).
# What a text between a plain chunk's two ends must not hold (StreamReader._template).
_NOT_BARE_TEXT = re.compile(rb'["\\\r\n]')
# Keys that make a chunk more than content: it is parsed (StreamReader._plain_tokens).
_NOT_PLAIN = (b'"usage"', b'"error"', b'"reasoning', b'"tool_calls"', b"\r")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _unchanged(data: bytes) -> bytes:
    return data


def id_swap(answer_id: Any, request_id: str | None) -> Callable[[bytes], bytes]:
    """What turns ``data`` (a JSON answer or one SSE event) into the same bytes with
    the answer's ``"id": answer_id`` replaced by ``request_id``; built once per answer.
    Data without that id (or no id to replace) passes unchanged."""
    if not isinstance(answer_id, str) or not answer_id or not request_id:
        return _unchanged
    if answer_id == request_id:
        return _unchanged
    theirs = json.dumps(answer_id).encode()
    found = re.compile(rb'("id"\s*:\s*)' + re.escape(theirs))
    ours = json.dumps(request_id).encode()

    # Engines write ``"id":"…"`` without a space: a plain replace then, the regex
    # (any spacing) otherwise.
    compact, compact_ours = b'"id":' + theirs, b'"id":' + ours

    def swap(data: bytes) -> bytes:
        if theirs not in data:  # a substring test first: most events pay no regex
            return data
        # The same first match as the regex: the first "id" is the compact one.
        if (at := data.find(compact)) >= 0 and at == data.find(b'"id"'):
            return data[:at] + compact_ours + data[at + len(compact) :]
        return found.sub(lambda match: match.group(1) + ours, data, count=1)

    return swap


def own_id(data: bytes, answer_id: Any, request_id: str | None) -> bytes:
    """``data`` with the answer's id replaced by the request's (see ``id_swap``)."""
    return id_swap(answer_id, request_id)(data)


def take_usage(tracker: Tracker, usage: Any) -> None:
    """Exact token counts from an OpenAI ``usage`` object, when it is one."""
    if not isinstance(usage, dict):
        return
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    if prompt is not None:
        tracker.prompt_tokens = prompt
    if completion is not None:
        tracker.completion_tokens = completion
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and (cached := _int(details.get("cached_tokens"))) is not None:
        tracker.cached_tokens = cached


def take_body(tracker: Tracker, body: bytes, *, embeddings: bool = False) -> bytes:
    """Read a whole (non-streamed) answer: served model, finish reason, usage.

    Returns the body to send on: with the request's id as its ``id``.
    """
    try:
        document = json.loads(body)
    except ValueError:
        return body
    if not isinstance(document, dict):
        return body
    if isinstance(model := document.get("model"), str):
        tracker.model = model
    choices = document.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
        if isinstance(reason, str):
            tracker.finish_reason = reason
    take_usage(tracker, document.get("usage"))
    if embeddings and tracker.prompt_tokens is not None:
        tracker.completion_tokens = 0  # an embedding generates nothing
    return own_id(body, document.get("id"), tracker.request_id)


def _has_content(choice: dict[str, Any]) -> bool:
    delta = choice.get("delta")
    if isinstance(delta, dict):  # chat: text, reasoning or a tool call is a token
        return bool(
            delta.get("content")
            or delta.get("reasoning_content")
            or delta.get("reasoning")
            or delta.get("tool_calls")
        )
    return bool(choice.get("text"))  # completions


class StreamReader:
    """Splits an upstream's SSE bytes into events and reads each as it passes.

    ``feed`` returns the complete events to send on now (the incomplete tail waits for
    its end, so nothing is held longer than one event). Each content chunk counts one
    completion token (the first stamps TTFT, the last ends decode); the usage chunk, if
    the upstream sends one, makes the totals exact when the stream ends.
    """

    __slots__ = ("_model", "_pending", "_swap", "_template", "_tracker", "done", "forward_usage")

    def __init__(self, tracker: Tracker, *, forward_usage: bool) -> None:
        self._tracker = tracker
        self._pending = b""
        # Gives each event the request's id in place of the upstream's, once the first
        # chunk has named it (every chunk carries the same one).
        self._swap: Callable[[bytes], bytes] | None = None
        # The last parsed chunk's model as JSON, to tell a plain content chunk that
        # names the same model without parsing it (``_plain_tokens``).
        self._model = b""
        # The last plain chunk that carried text, cut around its text: (what comes
        # before it, what comes after). Engines write every content chunk of a stream
        # alike but for the text, so most are read by comparing their two ends.
        self._template: tuple[bytes, bytes] | None = None
        # False when the pass-through added include_usage: the client never asked.
        self.forward_usage = forward_usage
        # Whether the upstream ended its stream properly ("data: [DONE]").
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buffer = self._pending + data if self._pending else data
        out: list[bytes] = []
        start = 0
        # Tokens of the plain chunks read so far, counted once per run of them: they
        # arrived together, so one ``tokens()`` (one clock read) stamps them all.
        produced = 0
        while True:
            end, width = self._next_end(buffer, start)
            if end < 0:
                break
            event = buffer[start : end + width]
            body = buffer[start:end]
            if (plain := self._plain_tokens(body)) is not None:
                produced += plain
                out.append(self._swap(event) if self._swap else event)
            else:
                if produced:  # counted before what a parsed event may say (usage, an end)
                    self._tracker.tokens(completion=produced)
                    produced = 0
                if self._read(body):
                    out.append(self._swap(event) if self._swap else event)
            start = end + width
        if produced:
            self._tracker.tokens(completion=produced)
        self._pending = buffer[start:]
        if start == len(buffer) and len(out) == 1:
            return out[0]
        return b"".join(out)

    def flush(self) -> bytes:
        """What is left when the upstream stops: an event without its blank line."""
        rest, self._pending = self._pending, b""
        if rest.strip():
            self._read(rest)
        return self._swap(rest) if self._swap else rest

    def _plain_tokens(self, event: bytes) -> int | None:
        """The tokens in ``event`` if it is a plain chunk, read without parsing it: one
        ``data:`` line, one choice, the model of the chunk before, nothing but content
        (no finish reason, usage, error, reasoning or tool call). ``None`` for any other
        event, which is parsed.

        The markers are keys followed by ``:`` or ``": "`` (compact JSON, or Python's
        default), as the event writes them; written any other way, nothing matches and
        the event is parsed. Inside a JSON string every quote is escaped, so a token's
        text cannot fake a key.
        """
        if (template := self._template) is not None:
            before, after = template
            if (
                event.startswith(before)
                and event.endswith(after)
                and len(event) >= len(before) + len(after)
            ):
                middle = event[len(before) : len(event) - len(after)]
                # The same chunk but for a text without quotes, backslashes or line
                # ends (so it cannot close the string early or change the lines).
                if _NOT_BARE_TEXT.search(middle) is None:
                    return 1 if middle else 0
        if self._swap is None or not event.startswith(b"data:") or b"\n" in event:
            return None
        colon = b": " if b'": ' in event else b":"
        if (
            event.count(b'"index"' + colon) != 1
            or b'"choices"' + colon + b"[{" not in event
            or event.count(b'"finish_reason"') != event.count(b'"finish_reason"' + colon + b"null")
        ):
            return None
        models = event.count(b'"model"')
        if models > 1 or (
            models and (not self._model or b'"model"' + colon + self._model not in event)
        ):
            return None
        for other in _NOT_PLAIN:
            if other in event:
                return None
        content, text = event.count(b'"content"'), event.count(b'"text"')  # chat, completions
        if content + text == 0:
            return 0
        if content + text > 1:
            return None
        key = (b'"content"' if content else b'"text"') + colon
        if key + b'""' in event or key + b"null" in event:
            return 0
        opened = event.find(key + b'"')
        if opened < 0:
            return None
        opened += len(key) + 1
        closed = event.find(b'"', opened)
        if closed > opened and b"\\" not in event[opened:closed]:
            self._template = (event[:opened], event[closed:])
        return 1

    @staticmethod
    def _next_end(buffer: bytes, start: int) -> tuple[int, int]:
        """Where the first event from ``start`` ends, and the width of its blank line;
        ``(-1, 0)`` if none does. Only as far as the first ``\n\n``: a buffer holding
        many events (they arrive together) is not scanned to its end once per event."""
        at = buffer.find(b"\n\n", start)
        # A "\r\n\r\n" (which holds no "\n\n") ends the event if it comes first.
        crlf = buffer.find(b"\r\n\r\n", start, len(buffer) if at < 0 else at + 3)
        if crlf >= 0:
            return crlf, 4
        return (at, 2) if at >= 0 else (-1, 0)

    def _read(self, event: bytes) -> bool:
        """Account for one event; whether it goes on to the client."""
        if (produced := self._plain_tokens(event)) is not None:
            if produced:
                self._tracker.tokens(completion=produced)
            return True
        data = [
            line[5:].removeprefix(b" ") for line in event.splitlines() if line.startswith(b"data:")
        ]
        if not data:
            return True
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        if payload == b"[DONE]":
            self.done = True
            return True
        try:
            chunk = json.loads(payload)
        except ValueError:
            return True
        if not isinstance(chunk, dict):
            return True
        tracker = self._tracker
        if "error" in chunk:
            tracker.error = UPSTREAM_STREAM_ERROR
            return True
        # A parsed chunk may change what plain ones must look like (the model).
        self._template = None
        if self._swap is None:
            self._swap = id_swap(chunk.get("id"), tracker.request_id)
        if isinstance(model := chunk.get("model"), str):
            tracker.model = model
            self._model = json.dumps(model).encode()
        choices = chunk.get("choices")
        if isinstance(choices, list):
            produced = 0
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                if _has_content(choice):
                    produced += 1
                if isinstance(reason := choice.get("finish_reason"), str):
                    tracker.finish_reason = reason
            if produced:
                tracker.tokens(completion=produced)
        usage = chunk.get("usage")
        if usage is not None:
            take_usage(tracker, usage)
            # The usage-only chunk the client did not ask for is held back.
            if choices == [] and not self.forward_usage:
                return False
        return True
