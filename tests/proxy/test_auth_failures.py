"""The pass-through throttles failed keys per client address, as OpenAI answers a rate
limit: 429 ``rate_limit_exceeded`` with ``Retry-After``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import openai
import pytest

from ferrox_stats import auth_failures, tokens
from tests.proxy.conftest import Plane, set_proxy

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "sim-small", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def tight(plane: Plane, settings: Any) -> Plane:
    set_proxy(settings, AUTH_FAILURE_RATE="3/minute")
    return plane


def post(plane: Plane, key: str, source: str = "127.0.0.1") -> httpx.Response:
    # Any 127/8 address reaches the server on 127.0.0.1, and it sees that source.
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source)) as client:
        return client.post(
            f"{plane.base}/chat/completions",
            json=CHAT,
            headers={"Authorization": f"Bearer {key}"},
        )


def test_failed_keys_past_the_budget_get_429_with_retry_after(tight: Plane) -> None:
    plane = tight
    assert [post(plane, "fxs_guess").status_code for _ in range(3)] == [401] * 3
    answer = post(plane, "fxs_guess")
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "20"
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    # The SDK sees its RateLimitError (retries off, so it does not wait here).
    with pytest.raises(openai.RateLimitError):
        plane.sdk().chat.completions.create(**CHAT)  # type: ignore[call-overload]
    # Another address is not affected.
    assert post(plane, "fxs_guess", "127.0.0.2").status_code == 401
    assert plane.engine.requests == [] and plane.records() == []
    # Time passes on the recorder's clock: the right key gets through, and from then on
    # passes while the address is blocked; a guess is refused again.
    plane.clock.advance(20)
    assert post(plane, plane.secret).status_code == 200
    assert [post(plane, "fxs_guess").status_code for _ in range(2)] == [401, 429]
    tokens.recent.forget(tokens.hash_secret(plane.secret))  # checked again, not cached
    assert post(plane, plane.secret).status_code == 200


def test_successful_keys_do_not_count(tight: Plane) -> None:
    plane = tight
    for _ in range(5):
        tokens.recent.forget(tokens.hash_secret(plane.secret))  # each one a real check
        assert post(plane, plane.secret).status_code == 200
    assert [post(plane, "sk-not-ours").status_code for _ in range(4)] == [401] * 3 + [429]


def test_no_key_is_not_a_failed_key(tight: Plane) -> None:
    plane = tight
    answers = [httpx.post(f"{plane.base}/chat/completions", json=CHAT) for _ in range(5)]
    assert [a.status_code for a in answers] == [401] * 5
    assert {a.json()["error"]["code"] for a in answers} == {"missing_api_key"}


def test_a_burst_with_a_new_key_is_one_attempt(tight: Plane, monkeypatch: Any) -> None:
    # Ten concurrent requests with a key this process never checked, on a budget of 3.
    # The check is held until all ten have arrived: they share it, so none is refused
    # (charged one by one, seven were 429s).
    plane = tight
    tokens.recent.forget(tokens.hash_secret(plane.secret))
    arrived, release = threading.Semaphore(0), threading.Event()
    address_of, check = auth_failures.client_address, tokens.check

    def counted(request: Any) -> str:
        arrived.release()
        return address_of(request)

    def held(secret: str) -> Any:
        release.wait(timeout=10)
        return check(secret)

    monkeypatch.setattr(auth_failures, "client_address", counted)
    monkeypatch.setattr(tokens, "check", held)
    headers = {"Authorization": f"Bearer {plane.secret}"}

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=plane.base) as client:
            answers = asyncio.gather(
                *(client.post("/chat/completions", json=CHAT, headers=headers) for _ in range(10))
            )
            await asyncio.to_thread(lambda: [arrived.acquire(timeout=10) for _ in range(10)])
            release.set()
            return [answer.status_code for answer in await answers]

    assert asyncio.run(burst()) == [200] * 10
