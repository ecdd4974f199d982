"""``api.wire``: the ring polls written from kept row JSON, byte for byte as DRF writes them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrox_stats import documents, live
from ferrox_stats.api.base import FerroxJSONRenderer
from ferrox_stats.api.wire import RingDocument, RingPageRenderer, RowJSON, splice
from ferrox_stats.core.requests import Record, Stats
from ferrox_stats.core.ring import Page
from tests.api.conftest import PREFIX, TokenClient

# What a caller of the in-process API could put in a record: lone surrogates (shown as
# U+FFFD), the JavaScript line separators DRF escapes, NUL, any Unicode; ints beyond 64
# bits; NaN and infinities, which strict JSON refuses.
texts = st.none() | st.lists(
    st.characters() | st.sampled_from(["\ud800", "\udfff", "\u2028", "\u2029", "\x00", "é"]),
    max_size=8,
).map("".join)
ints = st.none() | st.integers() | st.integers(-(2**80), 2**80)
floats = st.none() | st.floats() | st.integers(0, 10**6)
FIELD_VALUES = {
    "request_id": texts,
    "at_ms": ints,
    "route": texts,
    "model": texts,
    "status": ints,
    "stream": st.none() | st.booleans(),
    "prompt_tokens": ints,
    "completion_tokens": ints,
    "cached_tokens": ints,
    "ttft_ms": floats,
    "duration_ms": floats,
    "queue_ms": floats,
    "decode_ms": floats,
    "finish_reason": texts,
    "aborted": texts,
    "error": texts,
    "client": texts,
    "via_api_key": texts,
    "replica": texts,
}
records = st.fixed_dictionaries(FIELD_VALUES).map(lambda fields: Record(**fields))


def outcome(render: Callable[[], bytes]) -> tuple[str, Any]:
    """The bytes written, or the kind of error raised instead (strict JSON refuses NaN)."""
    try:
        return ("bytes", render())
    except (ValueError, TypeError, UnicodeError) as exc:
        return ("raised", type(exc))


def drf(document: dict[str, Any], media_type: str = "application/json") -> bytes:
    """What the views wrote before: the whole document through DRF's JSON renderer."""
    return FerroxJSONRenderer().render(document, media_type, {})


def ours(stats: Stats, page: Page[Record], build: Any = documents.ring_page) -> bytes:
    return RingPageRenderer().render(RingDocument(stats, page, build), "application/json", {})


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(records, max_size=6), cursor=st.integers(0, 7), limit=st.integers(1, 8))
def test_a_page_is_the_bytes_drf_writes_for_the_same_document_first_and_when_kept(
    rows: list[Record], cursor: int, limit: int
) -> None:
    stats = Stats(capacity=4, max_page=8)
    for row in rows:
        stats.record(row)
    page = stats.since(cursor, limit)
    expected = outcome(lambda: drf(documents.ring_page(page)))
    assert outcome(lambda: ours(stats, page)) == expected
    assert outcome(lambda: ours(stats, page)) == expected  # from the kept rows


def test_a_row_is_encoded_once_and_served_from_then_on() -> None:
    stats = Stats(capacity=8)
    for i in range(3):
        stats.record(Record(request_id=f"r{i}", model="m"))
    kept = RowJSON()
    calls: list[Any] = []

    def encode(value: Any) -> bytes:
        calls.append(value["seq"])
        return json.dumps(value).encode()

    first = kept.encoded(stats, stats.since(0, 2), encode, "k")
    again = kept.encoded(stats, stats.since(0, 3), encode, "k")
    assert calls == [0, 1, 2]
    assert again[:2] == first
    assert [json.loads(row)["request_id"] for row in again] == ["r0", "r1", "r2"]


def test_rows_kept_for_one_ring_or_encoder_are_never_served_for_another() -> None:
    # Same instance id and seq, different records: a test's rebuilt recorder, say.
    old, new = Stats(instance="i"), Stats(instance="i")
    old.record(Record(model="old"))
    new.record(Record(model="new"))
    kept = RowJSON()

    def encode(value: Any) -> bytes:
        return json.dumps(value).encode()

    def model(stats: Stats, key: str) -> str:
        (row,) = kept.encoded(stats, stats.since(0, 1), encode, key)
        return str(json.loads(row)["model"])

    assert model(old, "k") == "old"
    assert model(new, "k") == "new"
    assert model(new, "spaced") == "new"
    assert model(old, "k") == "old"


def test_the_kept_rows_stay_bounded_to_the_newest() -> None:
    stats = Stats(capacity=64, max_page=8)
    kept = RowJSON(keep=10)
    for i in range(64):
        stats.record(Record(request_id=str(i)))
        kept.encoded(stats, stats.since(i, 1), lambda v: json.dumps(v).encode(), "k")
        assert len(kept) <= 20
    encoded: list[int] = []
    kept.encoded(stats, stats.since(54, 8), lambda v: encoded.append(v["seq"]) or b"", "k")
    assert encoded == []  # the tail was kept


@pytest.mark.parametrize(
    "document",
    [
        {"entries": []},
        {"entries": [], "b": 1},
        {"a": "\u2028", "entries": [], "b": [1.5, None]},
        {"a": 1, "entries": []},
    ],
)
@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_splice_writes_what_encoding_the_whole_document_writes(
    document: dict[str, Any], separators: tuple[str, str]
) -> None:
    rows = [{"x": 1}, {"y": "é"}]

    def encode(value: Any) -> bytes:
        return json.dumps(value, separators=separators, ensure_ascii=False).encode()

    whole = encode({**document, "entries": rows})
    assert splice(document, [encode(row) for row in rows], encode, separators) == whole


def poll_pair(client: TokenClient, path: str, **headers: str) -> Any:
    return client.get(f"{PREFIX}{path}", {"since": "1", "limit": "3"}, headers=headers)


def record_some(recorder: live.Recorder) -> None:
    for i in range(5):
        with recorder.track(model="m\u2028", request_id=f"r{i}", client="\ud800") as t:
            t.finish(status=200, completion_tokens=5)


@pytest.mark.parametrize("accept", ["application/json", "application/json; indent=2", "*/*"])
def test_v1_requests_answers_the_bytes_and_headers_drf_wrote(
    read_client: TokenClient, recorder: live.Recorder, accept: str
) -> None:
    record_some(recorder)
    response = poll_pair(read_client, "/v1/requests", Accept=accept)
    page = recorder.stats.since(1, 3)
    media_type = accept if "indent" in accept else "application/json"
    assert response.content == drf(documents.ring_page(page), media_type)
    # The headers of an endpoint whose rendering is DRF's own.
    stats = read_client.get(f"{PREFIX}/v1/stats", headers={"Accept": accept})
    assert response.headers.keys() == stats.headers.keys()
    for name in response.headers.keys() - {"Content-Length"}:
        assert response.headers[name] == stats.headers[name]


def test_admin_stats_answers_the_bytes_drf_wrote(
    read_client: TokenClient, recorder: live.Recorder
) -> None:
    record_some(recorder)
    response = poll_pair(read_client, "/admin/stats")
    expected = documents.admin_stats(recorder.stats.since(1, 3), recorder.snapshot())
    assert response.status_code == 200
    assert response.content == drf(expected)


def test_an_unacceptable_accept_is_still_refused(
    read_client: TokenClient, recorder: live.Recorder
) -> None:
    record_some(recorder)
    response = poll_pair(read_client, "/v1/requests", Accept="text/html")
    assert response.status_code == 406


@pytest.mark.parametrize(
    "record",
    [
        Record(prompt_tokens=10**5000),  # beyond what int→str converts: both raise
        Record(ttft_ms=float("nan")),  # strict JSON: both raise
        Record(model="\ud800", completion_tokens=3, decode_ms=2.0),
    ],
)
def test_a_row_json_cannot_spell_fails_or_shows_as_drf_would(record: Record) -> None:
    stats = Stats()
    stats.record(record)
    page = stats.since(0, 1)
    assert outcome(lambda: ours(stats, page)) == outcome(lambda: drf(documents.ring_page(page)))
