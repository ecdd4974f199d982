"""What the log says when the pass-through answers 5xx: an upstream's failure is a
WARNING on ``ferrox_stats.proxy`` naming the upstream, never Django's "Internal Server
Error" (``django.request`` at ERROR), which stays for our own failures."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import openai
import pytest

from ferrox_stats.proxy import relay
from tests.asgi_server import wait_for
from tests.proxy.conftest import Plane, set_proxy, upstreams

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = [{"role": "user", "content": "hello there"}]


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    """Every record at WARNING or above, from any thread (uvicorn serves in its own)."""
    return [
        (r.name, r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING
    ]


def warned(message: str) -> list[tuple[str, int, str]]:
    return [("ferrox_stats.proxy", logging.WARNING, message)]


@pytest.mark.parametrize("status", [500, 503])
@pytest.mark.parametrize("stream", [False, True])
def test_a_relayed_upstream_5xx_is_a_warning_naming_the_upstream(
    plane: Plane, caplog: pytest.LogCaptureFixture, status: int, stream: bool
) -> None:
    client, sim = plane.sdk(), {"sim": {"fail": status}}
    with pytest.raises(openai.APIStatusError) as raised:
        if stream:
            list(
                client.chat.completions.create(
                    model="sim-small", messages=MESSAGES, stream=True, extra_body=sim
                )
            )
        else:
            client.chat.completions.create(model="sim-small", messages=MESSAGES, extra_body=sim)
    assert raised.value.status_code == status
    assert logged(caplog) == warned(f"upstream 'sim' answered {status} -> {status} to the client")


def test_an_unreachable_upstream_is_a_warning(
    plane: Plane, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    set_proxy(settings, PROXY_UPSTREAMS=upstreams(gone="http://127.0.0.1:9"))
    with pytest.raises(openai.APIStatusError):
        plane.sdk().chat.completions.create(model="sim-small", messages=MESSAGES)
    with pytest.raises(openai.APIStatusError):
        plane.sdk().models.list()
    assert logged(caplog) == 2 * warned(
        "upstream 'gone' could not be reached (ClientConnectorError) -> 502 to the client"
    )


def test_an_upstream_silent_past_the_timeout_is_a_warning(
    plane: Plane, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    set_proxy(settings, PROXY_READ_TIMEOUT_S=0.2)
    with pytest.raises(openai.APIStatusError):
        plane.sdk().chat.completions.create(
            model="sim-small", messages=MESSAGES, extra_body={"sim": {"stall_after": 0}}
        )
    assert logged(caplog) == warned(
        "upstream 'sim' did not answer in time (SocketTimeoutError) -> 504 to the client"
    )


def test_an_upstream_refusing_our_credentials_is_a_warning(
    plane: Plane, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    routes = upstreams(sim=plane.engine_url)
    routes["sim"]["API_KEY"] = "sk-wrong-upstream-key"
    set_proxy(settings, PROXY_UPSTREAMS=routes)
    with pytest.raises(openai.APIStatusError):
        plane.sdk().chat.completions.create(model="sim-small", messages=MESSAGES)
    assert logged(caplog) == warned(
        "upstream 'sim' refused our credentials (401) -> 502 to the client"
    )


def test_our_own_failure_is_still_djangos_error(
    plane: Plane, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("a bug in the pass-through")

    monkeypatch.setattr(relay, "_upstream_body", broken)
    answer = httpx.post(
        f"{plane.base}/chat/completions",
        json={"model": "sim-small", "messages": MESSAGES},
        headers={"Authorization": f"Bearer {plane.secret}"},
    )
    assert answer.status_code == 500
    assert wait_for(lambda: plane.inflight() == 0)
    [(name, level, message)] = logged(caplog)
    assert (name, level, message) == (
        "django.request",
        logging.ERROR,
        "Internal Server Error: /v1/chat/completions",
    )
