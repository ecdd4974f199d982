"""Reading upstream answers as they pass (``ferrox_stats.proxy.accounting``)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrox_stats import live
from ferrox_stats.proxy.accounting import StreamReader, own_id, take_body
from ferrox_stats.tracker import Tracker
from tests.conftest import FakeClock


def _event(payload: Any, end: bytes = b"\n\n") -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return b"data: " + text.encode() + end


def _chunk(content: str | None = None, finish: str | None = None) -> dict[str, Any]:
    delta = {} if content is None else {"content": content}
    return {
        "model": "served-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


ROLE = _event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
TOKENS = [_event(_chunk(word)) for word in ("a ", "b ", "c ")]
FINISH = _event(_chunk(finish="stop"))
USAGE = _event(
    {
        "choices": [],
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    }
)
DONE = b"data: [DONE]\n\n"
STREAM = ROLE + b"".join(TOKENS) + FINISH + USAGE + DONE


def _tracker() -> Tracker:
    return live.reset(FakeClock()).track(route="/v1/chat/completions").begin()


def _relay(pieces: list[bytes], forward_usage: bool) -> tuple[bytes, Tracker, StreamReader]:
    tracker = _tracker()
    reader = StreamReader(tracker, forward_usage=forward_usage)
    out = b"".join(reader.feed(piece) for piece in pieces) + reader.flush()
    return out, tracker, reader


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_of_the_bytes_relays_the_same_events(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    pieces = [STREAM[a:b] for a, b in itertools.pairwise(bounds)]
    out, tracker, reader = _relay(pieces, forward_usage=False)
    assert out == STREAM.replace(USAGE, b"")  # the usage chunk nobody asked for stays here
    assert reader.done
    assert (tracker.prompt_tokens, tracker.completion_tokens, tracker.cached_tokens) == (9, 3, 4)
    assert (tracker.finish_reason, tracker.model) == ("stop", "served-model")
    live.reset()


@given(
    st.lists(st.sampled_from([b"\n", b"\r", b"a", b"data: x"]), max_size=40),
    st.integers(min_value=0, max_value=8),
)
def test_an_event_ends_at_the_first_blank_line_of_either_kind(
    parts: list[bytes], start: int
) -> None:
    """``_next_end`` looks no further than the first "\\n\\n" (it is called once per
    event on buffers of many events) and still finds what a search for both
    markers finds: the earliest end, and its width."""
    buffer = b"".join(parts)
    ends = [(at, len(m)) for m in (b"\n\n", b"\r\n\r\n") if (at := buffer.find(m, start)) >= 0]
    assert StreamReader._next_end(buffer, start) == (min(ends) if ends else (-1, 0))


def test_a_client_that_asked_for_usage_gets_it() -> None:
    out, _, _ = _relay([STREAM], forward_usage=True)
    assert out == STREAM


def test_every_content_chunk_is_a_token_as_it_arrives() -> None:
    clock = FakeClock()
    tracker = live.reset(clock).track().begin()
    reader = StreamReader(tracker, forward_usage=True)
    reader.feed(ROLE)
    clock.advance(0.25)
    reader.feed(TOKENS[0])
    clock.advance(0.5)
    reader.feed(TOKENS[1] + TOKENS[2][:10])  # half an event waits for its end
    clock.advance(0.5)
    reader.feed(TOKENS[2][10:] + FINISH + DONE)
    tracker.finish(status=200)
    (record,) = [r for _, r in live.get_recorder().stats.since(0, 10).rows]
    assert record.ttft_ms == 250.0
    assert record.decode_ms == 1000.0
    assert record.completion_tokens == 3  # counted from the chunks: no usage came
    live.reset()


def test_crlf_events_multiline_data_and_comments_pass_untouched() -> None:
    stream = (
        b": keep-alive\n\n"
        + _event(_chunk("x"), end=b"\r\n\r\n")
        + b'data: {"choices": [{"index": 0,\ndata: "text": "y"}]}\n\n'
        + b"data: not json\n\n"
        + DONE
    )
    out, tracker, reader = _relay([stream], forward_usage=False)
    assert out == stream
    assert reader.done
    assert tracker.completion_tokens is None
    assert tracker._completion_seen == 2


def test_an_error_event_marks_the_request() -> None:
    _, tracker, _ = _relay([_event({"error": {"message": "engine died"}})], forward_usage=True)
    assert tracker.error == "upstream_stream_error"


def test_a_stream_without_done_is_not_done() -> None:
    _, _, reader = _relay([ROLE, TOKENS[0]], forward_usage=True)
    assert not reader.done


def test_tool_calls_and_reasoning_count_as_tokens() -> None:
    tool = {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}]}
    thought = {"choices": [{"delta": {"reasoning_content": "hmm"}}]}
    _, tracker, _ = _relay([_event(tool), _event(thought)], forward_usage=True)
    assert tracker._completion_seen == 2


def test_whole_answers() -> None:
    tracker = _tracker()
    body = {
        "model": "m-1",
        "choices": [{"message": {"content": "hi"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    take_body(tracker, json.dumps(body).encode())
    assert (tracker.model, tracker.finish_reason) == ("m-1", "length")
    assert (tracker.prompt_tokens, tracker.completion_tokens) == (3, 2)
    embedded = _tracker()
    take_body(embedded, b'{"usage": {"prompt_tokens": 4, "total_tokens": 4}}', embeddings=True)
    assert (embedded.prompt_tokens, embedded.completion_tokens) == (4, 0)
    odd = _tracker()
    for junk in (b"", b"[1]", b"{bad", b'{"usage": "none", "choices": [7]}'):
        take_body(odd, junk)
    assert (odd.prompt_tokens, odd.finish_reason) == (None, None)
    live.reset()


@pytest.mark.parametrize(
    ("data", "answer_id", "expected"),
    [
        # The answer's id, however spaced; a tool call's id is left alone.
        (
            b'{"id": "up-1", "x": {"id": "call_1"}}',
            "up-1",
            b'{"id": "ours", "x": {"id": "call_1"}}',
        ),
        (b'data: {"id":"up-1","choices":[]}\n\n', "up-1", b'data: {"id":"ours","choices":[]}\n\n'),
        # No id to replace: unchanged.
        (b'{"object": "list"}', None, b'{"object": "list"}'),
        (b'{"id": 7}', 7, b'{"id": 7}'),
        (b"data: [DONE]\n\n", "up-1", b"data: [DONE]\n\n"),
    ],
)
def test_own_id_replaces_only_the_answers_id(
    data: bytes, answer_id: object, expected: bytes
) -> None:
    assert own_id(data, answer_id, "ours") == expected


@pytest.mark.parametrize(
    "data",
    [
        b'{"id":"up-1","object":"chat.completion.chunk"}',  # what engines write
        b'{"id" : "up-1","object":"chat.completion.chunk"}',  # any spacing
        # An earlier "id" that is not the key: the regex's first match, not the compact one.
        b'{"choices":[{"delta":{"content":"id"}}],"id": "up-1","x":{"id":"up-1"}}',
        b'{"object":"chunk"}',  # no id
    ],
)
def test_the_ids_fast_replace_swaps_what_the_regex_would(data: bytes) -> None:
    swapped = own_id(data, "up-1", "chatcmpl-ours")
    document = json.loads(swapped)
    assert document.get("id") in (None, "chatcmpl-ours")
    assert swapped.count(b"chatcmpl-ours") == (1 if b"up-1" in data else 0)
    assert swapped.replace(b"chatcmpl-ours", b"up-1") == data


# Chunks as engines write them: compact JSON or Python's default spacing, any text.
_texts = st.text(st.characters(codec="utf-8"), max_size=8) | st.sampled_from(
    ['"usage"', 'say ": "content":""', '\\"index": 0', '"model":"m"', "\n", ""]
)
_deltas = st.one_of(
    st.builds(lambda text: {"content": text}, _texts),
    st.just({"role": "assistant", "content": ""}),
    st.just({"content": None}),
    st.just({}),
    st.builds(lambda text: {"reasoning_content": text}, _texts),
    st.just({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
)
_choices = st.builds(
    lambda delta, finish, text: (
        {"index": 0, "finish_reason": finish, "delta": delta}
        if text is None
        else {"index": 0, "finish_reason": finish, "text": text}
    ),
    _deltas,
    st.none() | st.just("stop"),
    st.none() | _texts,
)
_chunks = st.builds(
    lambda model, choices, usage: {
        "id": "up-1",
        "model": model,
        "choices": choices,
        **({"usage": {"completion_tokens": 7}} if usage else {}),
    },
    st.sampled_from(["m", "m-2", "mé"]),
    st.lists(_choices, max_size=2),
    st.booleans(),
)


class ParsingEveryEvent(StreamReader):
    def _plain_tokens(self, event: bytes) -> int | None:
        return None


@settings(deadline=None)  # a loaded machine must not fail it
@given(st.lists(_chunks, max_size=12), st.booleans())
def test_plain_chunks_read_without_parsing_count_as_parsed_ones(
    chunks: list[dict[str, Any]], compact: bool
) -> None:
    """The byte-level reading of plain content chunks gives what parsing each would."""
    stream = _stream(chunks, compact)
    assert _read(StreamReader, [stream]) == _read(ParsingEveryEvent, [stream])


def _stream(chunks: list[dict[str, Any]], compact: bool) -> bytes:
    separators = (",", ":") if compact else (", ", ": ")
    events = [b"data: " + json.dumps(c, separators=separators).encode() + b"\n\n" for c in chunks]
    return b"".join(events) + DONE


def _read(reader_class: type[StreamReader], pieces: list[bytes]) -> tuple[Any, ...]:
    """What ``reader_class`` relays of ``pieces`` and what it tells the tracker."""
    tracker = _tracker()
    tracker.request_id = "chatcmpl-ours"
    reader = reader_class(tracker, forward_usage=True)
    out = b"".join(reader.feed(piece) for piece in pieces) + reader.flush()
    live.reset()
    return out, tracker._completion_seen, tracker.model, tracker.finish_reason, tracker.error


# A stream as engines write it: content chunks alike but for their text (quotes,
# backslashes, escapes and empty texts included), now and then another kind of chunk.
_alike = st.builds(
    lambda text, model: {
        "id": "up-1",
        "model": model,
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    },
    _texts | st.sampled_from(["a", "b c", "é", "\\", '"', "\\n", "x\\"]),
    st.sampled_from(["m", "m", "m", "m-2"]),
)


@settings(deadline=None)
@given(st.lists(_alike | _chunks, max_size=30), st.booleans(), st.integers(1, 400))
def test_chunks_alike_but_for_their_text_count_as_parsed_ones(
    chunks: list[dict[str, Any]], compact: bool, piece: int
) -> None:
    """The reader's shortcut for chunks cut like the last plain one (``_template``)
    gives what parsing each would, however the bytes arrive."""
    stream = _stream(chunks, compact)
    pieces = [stream[i : i + piece] for i in range(0, len(stream), piece)]
    assert _read(StreamReader, pieces) == _read(ParsingEveryEvent, pieces)


def test_a_chunk_that_only_looks_alike_is_parsed() -> None:
    """An upstream's bytes that begin and end like the last plain chunk but whose
    middle is JSON, not text: the shortcut must not take them for one token."""
    tracker = _tracker()
    tracker.request_id = "chatcmpl-ours"
    reader = StreamReader(tracker, forward_usage=True)
    first = _event(_chunk("hi"), b"")
    before, after = first.split(b"hi")
    forged = before + b'"},"other":{"text":"' + after  # content "", then another object
    choice = json.loads(forged[6:])["choices"][0]
    assert (choice["delta"], choice["other"]) == ({"content": ""}, {"text": ""})
    # The first chunk is parsed, the second read plain (it sets the shortcut's ends).
    reader.feed(2 * (first + b"\n\n") + forged + b"\n\n" + before + b"there" + after + b"\n\n")
    assert tracker._completion_seen == 3  # "hi" twice and "there"; the forged chunk has none
    live.reset()
