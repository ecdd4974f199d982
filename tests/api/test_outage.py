"""The API while the token database is unreachable: token callers are answered from
memory, or refused fast with 503 and ``Retry-After`` (the database is stood in for)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.db import OperationalError
from django.db.models import QuerySet
from django.test import Client

from ferrox_stats import live, tokens
from ferrox_stats.breaker import RETRY_S
from tests.api.conftest import PREFIX, TokenClient
from tests.conftest import FakeClock
from tests.faults import TokenDatabase

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/v1/stats", "/admin/stats", "/v1/requests"])
def test_a_checked_token_reads_live_state_through_an_outage(
    recorder: live.Recorder,
    clock: FakeClock,
    token_db: TokenDatabase,
    inline_probes: None,
    path: str,
) -> None:
    _, secret = tokens.issue("poller")
    client = TokenClient(secret)
    assert client.get(PREFIX + path).status_code == 200
    token_db.down = True
    clock.advance(60)  # far past TOKEN_CACHE_S
    assert client.get(PREFIX + path).status_code == 200


def test_an_unknown_token_gets_a_fast_503_with_retry_after(
    recorder: live.Recorder, token_db: TokenDatabase, inline_probes: None
) -> None:
    _, secret = tokens.issue("poller")
    token_db.down = True
    response = TokenClient(secret).get(PREFIX + "/v1/stats")
    assert response.status_code == 503
    assert int(response["Retry-After"]) >= 1
    assert response.json()["error"]["code"] == "database_unavailable"
    assert response.json()["error"]["status"] == 503
    assert token_db.lookups == 1
    assert TokenClient(secret).get(PREFIX + "/v1/stats").status_code == 503
    assert token_db.lookups == 1


def test_the_database_answering_again_admits_new_tokens(
    recorder: live.Recorder, clock: FakeClock, token_db: TokenDatabase, inline_probes: None
) -> None:
    _, secret = tokens.issue("poller")
    token_db.down = True
    assert TokenClient(secret).get(PREFIX + "/v1/stats").status_code == 503
    token_db.down = False
    clock.advance(RETRY_S)
    assert TokenClient(secret).get(PREFIX + "/v1/stats").status_code == 200


def test_a_staff_session_that_cannot_be_read_is_a_503_not_a_500(
    staff_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert staff_client.get(PREFIX + "/v1/stats").status_code == 200

    def unreachable(self: SessionStore) -> dict[str, Any]:
        raise OperationalError("connection refused")

    monkeypatch.setattr(SessionStore, "load", unreachable)
    response = staff_client.get(PREFIX + "/v1/stats")
    assert response.status_code == 503
    assert int(response["Retry-After"]) >= 1
    assert response.json()["error"]["code"] == "database_unavailable"


@pytest.mark.parametrize("path", ["/v1/history", "/v1/history/req_1"])
def test_the_archive_unreachable_is_a_503_not_a_500(
    read_client: TokenClient, token_db: TokenDatabase, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    assert read_client.get(PREFIX + "/v1/stats").status_code == 200  # the token, checked

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection refused")

    monkeypatch.setattr(QuerySet, "__iter__", unreachable)
    response = read_client.get(PREFIX + path)
    assert response.status_code == 503
    assert int(response["Retry-After"]) >= 1
    assert response.json()["error"]["code"] == "database_unavailable"
    assert token_db.lookups == 1  # the archive failed, not the token check


def test_ingest_with_the_archive_unreachable_is_a_503(
    ingest_client: TokenClient, token_db: TokenDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection refused")

    monkeypatch.setattr("ferrox_stats.ingest.write_batch", unreachable)
    body = {"records": [{"request_id": "r-1", "at_ms": 1_767_225_600_000}], "instance": "e"}
    response = ingest_client.post(PREFIX + "/v1/ingest", body, content_type="application/json")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "database_unavailable"
