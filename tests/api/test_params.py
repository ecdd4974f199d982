"""Query parameters: an unknown one is a 400 that names it and lists the accepted ones."""

from __future__ import annotations

from typing import Any

import pytest

from ferrox_stats.api.filters import HistoryFilter
from tests.api.conftest import PREFIX, TokenClient
from tests.factories import archive, make_record

pytestmark = pytest.mark.django_db

FILTERS = sorted(HistoryFilter.base_filters)
ACCEPTED = {
    "/v1/history": sorted([*FILTERS, "cursor", "order", "limit", "format"]),
    "/v1/history/export": sorted([*FILTERS, "format"]),
    "/v1/requests": ["format", "instance", "limit", "since"],
    "/admin/stats": ["format", "instance", "limit", "since"],
}


@pytest.mark.parametrize("path", list(ACCEPTED))
def test_a_misspelt_parameter_is_a_400_naming_it_and_the_accepted_ones(
    read_client: TokenClient, path: str
) -> None:
    archive([make_record(request_id="r-500", status=500)])
    query = {"sttus": "500", "format": "csv" if "export" in path else "json"}
    response = read_client.get(f"{PREFIX}{path}", query)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["status"] == 400
    assert list(error["fields"]) == ["query"]
    assert error["message"] == (
        f"query: Unknown query parameter 'sttus'; this endpoint accepts: "
        f"{', '.join(ACCEPTED[path])}."
    )


def test_every_unknown_name_is_listed_and_odd_ones_are_not_echoed(
    read_client: TokenClient,
) -> None:
    response = read_client.get(
        f"{PREFIX}/v1/history", {"sttus": "1", "modle": "x", "sk-proj-abcdefghijkl": "1"}
    )
    message = response.json()["error"]["message"]
    assert message.startswith(
        "query: Unknown query parameters 'modle', (a name that is not a plain identifier), "
        "'sttus'; this endpoint accepts: "
    )
    assert "sk-proj" not in message


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/v1/history", {"status": "500", "order": "oldest", "limit": "5", "cursor": ""}),
        ("/v1/history", {"since": "0", "format": "json"}),
        ("/v1/history/export", {"status": "500", "format": "jsonl"}),
        ("/v1/requests", {"since": "0", "limit": "5", "instance": "x", "format": "json"}),
        ("/admin/stats", {"since": "0", "limit": "5", "instance": "x"}),
        ("/v1/stats", {}),
    ],
)
def test_accepted_parameters_still_answer(
    read_client: TokenClient, path: str, query: dict[str, Any]
) -> None:
    archive([make_record(request_id="r-500", status=500), make_record(request_id="r-200")])
    response = read_client.get(f"{PREFIX}{path}", query)
    assert response.status_code == 200, response.content
    if path == "/v1/history" and "status" in query:
        assert [e["request_id"] for e in response.json()["entries"]] == ["r-500"]
