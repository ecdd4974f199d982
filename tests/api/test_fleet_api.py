"""``GET v1/fleet``: who may read it, what it answers, how it is described, and a 503."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import OperationalError
from django.db.backends.utils import CursorWrapper
from django.test import Client

from ferrox_stats import live, tokens
from ferrox_stats.api.serializers import FleetSerializer
from tests.api.conftest import PREFIX, TokenClient
from tests.conftest import FakeClock
from tests.faults import TokenDatabase
from tests.states import archive_counts, save, state_doc

pytestmark = pytest.mark.django_db

URL = f"{PREFIX}/v1/fleet"


@pytest.fixture
def heartbeats(recorder: live.Recorder, clock: FakeClock) -> None:
    """Two live instances, one lost, at the recorder's clock."""
    now = clock.wall_ms()
    save(state_doc("gpu-1/1/a", at_ms=now - 500, completed=4, archive=archive_counts(accepted=4)))
    save(state_doc("gpu-2/2/b", at_ms=now - 1500, completed=6))
    save(
        state_doc("gpu-3/3/c", at_ms=now - 300_000, completed=9, archive=archive_counts(pending=9))
    )


def fields(serializer: Any) -> set[str]:
    return set(serializer().fields)


def test_a_read_token_gets_the_fleet(read_client: TokenClient, heartbeats: None) -> None:
    response = read_client.get(URL)
    assert response.status_code == 200
    document = response.json()
    assert set(document) == fields(FleetSerializer)
    assert document["totals"]["instances"] == 2
    assert document["totals"]["completed"] == 10
    assert [e["state"] for e in document["instances"]] == ["live", "live", "lost"]
    assert document["lost"] == [
        {"instance": "gpu-3/3/c", "last_seen_ms": document["at_ms"] - 300_000, "not_archived": 9}
    ]


def test_instance_narrows_the_totals(read_client: TokenClient, heartbeats: None) -> None:
    document = read_client.get(URL, {"instance": "gpu-3/3/c"}).json()
    assert (document["instance"], document["totals"]["completed"]) == ("gpu-3/3/c", 9)


@pytest.mark.parametrize("instance", ["gpu-9/9/z", "a\x00b"])
def test_an_unknown_instance_is_a_404(
    read_client: TokenClient, heartbeats: None, instance: str
) -> None:
    response = read_client.get(URL, {"instance": instance})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_an_unknown_parameter_is_a_400(read_client: TokenClient, heartbeats: None) -> None:
    response = read_client.get(URL, {"instnace": "gpu-1/1/a"})
    assert response.status_code == 400
    assert "instnace" in response.json()["error"]["message"]


def test_closed_by_default(heartbeats: None, ingest_client: TokenClient) -> None:
    assert Client().get(URL).status_code == 401
    assert TokenClient("fxs_not-a-real-token").get(URL).status_code == 401
    assert ingest_client.get(URL).status_code == 403  # ingest scope only


def test_a_permitted_staff_session_reads_it(staff_client: Client, heartbeats: None) -> None:
    assert staff_client.get(URL).status_code == 200


def test_public_endpoints_can_open_it(settings: Any, heartbeats: None) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PUBLIC_ENDPOINTS": ["fleet"]}
    assert Client().get(URL).status_code == 200


def test_the_database_unreachable_is_a_503_with_retry_after(
    read_client: TokenClient,
    heartbeats: None,
    token_db: TokenDatabase,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert read_client.get(f"{PREFIX}/v1/stats").status_code == 200  # the token, checked

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection refused")

    # Every query of the request, the ORM's or the fleet's compiled one, fails.
    monkeypatch.setattr(CursorWrapper, "execute", unreachable)
    response = read_client.get(URL)
    assert response.status_code == 503
    assert int(response["Retry-After"]) >= 1
    assert response.json()["error"]["code"] == "database_unavailable"
    assert token_db.lookups == 1  # the heartbeats failed, not the token check


def test_the_schema_describes_it(read_client: TokenClient) -> None:
    _, secret = tokens.issue("schema-reader")
    schema = json.loads(TokenClient(secret).get(f"{PREFIX}/v1/schema?format=json").content)
    operation = schema["paths"][URL]["get"]
    assert operation["operationId"] == "ferrox_stats_fleet"
    assert {"200", "401", "403", "404", "503"} <= set(operation["responses"])
    [parameter] = operation["parameters"]
    assert parameter["name"] == "instance" and parameter["in"] == "query"
    body = operation["responses"]["200"]["content"]["application/json"]["schema"]
    component = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    assert set(component["properties"]) == fields(FleetSerializer)
    state = schema["components"]["schemas"]["FerroxStatsInstanceState"]
    assert state["enum"] == ["live", "stale", "lost", "stopped"]
