"""The pass-through while the token database is unreachable or stalled: keys checked
before are served, others refused fast with an OpenAI-shaped 503 and ``Retry-After``
(the database is stood in for; tests/test_outage.py cuts a real one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ferrox_stats import tokens
from ferrox_stats.models import ApiToken
from tests.faults import TokenDatabase
from tests.proxy.conftest import Plane
from tests.proxy.test_requests import CHAT, _error, _post

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_checked_key_is_served_through_an_outage(plane: Plane, token_db: TokenDatabase) -> None:
    assert _post(plane, CHAT).status_code == 200
    token_db.down = True
    plane.clock.advance(60)  # far past TOKEN_CACHE_S
    assert [_post(plane, CHAT).status_code for _ in range(5)] == [200] * 5


def test_an_unchecked_key_gets_a_fast_openai_shaped_503(
    plane: Plane, token_db: TokenDatabase
) -> None:
    _, secret = tokens.issue("newcomer", read=False, infer=True)
    token_db.down = True
    answer = _post(plane, CHAT, key=secret)
    assert answer.status_code == 503
    assert int(answer.headers["Retry-After"]) >= 1
    assert _error(answer)["code"] == "database_unavailable"
    assert secret not in answer.text
    assert plane.engine.requests == []


class Stalled(TokenDatabase):
    """A lookup that hangs until released, as on a connection to a server that went silent."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def __call__(self, digest: str) -> ApiToken | None:
        self.lookups += 1
        self.release.wait(30)
        return None


@pytest.fixture
def stalled(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stalled]:
    stalled = Stalled()
    tokens.outage.reset()
    try:
        yield stalled
    finally:
        stalled.release.set()
        tokens.outage.reset()


def test_a_stalled_lookup_does_not_hold_the_request(
    plane: Plane, stalled: Stalled, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _post(plane, CHAT).status_code == 200
    monkeypatch.setattr(tokens, "_lookup", stalled)
    monkeypatch.setattr(tokens, "LOOKUP_TIMEOUT_S", 0.2)
    plane.clock.advance(60)
    _, newcomer = tokens.issue("newcomer", read=False, infer=True)
    started = time.monotonic()
    assert _post(plane, CHAT).status_code == 200  # the last good answer
    assert _post(plane, CHAT, key=newcomer).status_code == 503
    assert time.monotonic() - started < 5  # not the 30 s the lookup would hang
    assert stalled.lookups == 1  # the breaker opened: the second key was not looked up
