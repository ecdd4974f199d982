"""The id a caller is given is the id its request is recorded and archived under.

OpenAI SDKs show the answer's ``id`` (``chatcmpl-…``) as ``completion.id`` and the
``X-Request-Id`` header as ``_request_id``; searching the archive by either must find
the request, streamed or not, and never lose one to an engine that reuses its ids.
"""

from __future__ import annotations

import httpx
import pytest

from ferrox_stats import live
from ferrox_stats.archive.writer import ArchiveWriter
from ferrox_stats.models import FinishedRequest
from tests.proxy.conftest import Plane

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = [{"role": "user", "content": "which id is mine"}]


@pytest.fixture
def writer(plane: Plane) -> ArchiveWriter:
    """The recorder archives into the test database (drained by the test)."""
    writer = ArchiveWriter(instance="request-ids", autostart=False)
    live.get_recorder().sink = writer
    return writer


def archived_ids(writer: ArchiveWriter) -> list[str | None]:
    assert writer.drain(10.0)
    return list(FinishedRequest.objects.values_list("request_id", flat=True))


def test_a_whole_answer_is_found_by_the_id_the_sdk_shows(
    plane: Plane, writer: ArchiveWriter
) -> None:
    completion = plane.sdk().chat.completions.create(model="sim-small", messages=MESSAGES)

    assert completion.id.startswith("chatcmpl-")
    assert completion._request_id == completion.id
    assert plane.only_entry()["request_id"] == completion.id
    assert archived_ids(writer) == [completion.id]


def test_a_stream_is_found_by_the_id_the_sdk_shows(plane: Plane, writer: ArchiveWriter) -> None:
    stream = plane.sdk().chat.completions.create(
        model="sim-small", messages=MESSAGES, stream=True, max_tokens=3
    )
    chunk_ids = {chunk.id for chunk in stream}

    (answer_id,) = chunk_ids
    assert answer_id.startswith("chatcmpl-")
    assert plane.only_entry()["request_id"] == answer_id
    assert archived_ids(writer) == [answer_id]


def test_completions_are_found_by_their_cmpl_id(plane: Plane, writer: ArchiveWriter) -> None:
    completion = plane.sdk().completions.create(model="sim-small", prompt="hi", max_tokens=2)

    assert completion.id.startswith("cmpl-")
    assert archived_ids(writer) == [completion.id]


def test_an_answer_without_an_id_is_found_by_its_header(plane: Plane) -> None:
    # A refused model: the pass-through's own error body carries no id.
    answer = httpx.post(
        f"{plane.base}/chat/completions",
        json={"model": "no-such-model", "messages": MESSAGES},
        headers={"Authorization": f"Bearer {plane.secret}"},
    )

    assert answer.status_code == 404
    assert plane.only_entry()["request_id"] == answer.headers["x-request-id"]


def test_an_engine_that_repeats_its_ids_loses_no_record(
    plane: Plane, writer: ArchiveWriter
) -> None:
    # The simulated engine answers one body with one id, as some engines reuse ids.
    ids = [
        plane.sdk().chat.completions.create(model="sim-small", messages=MESSAGES).id
        for _ in range(3)
    ]

    assert len(set(ids)) == 3
    assert sorted(archived_ids(writer)) == sorted(ids)
    assert writer.health().duplicates == 0
