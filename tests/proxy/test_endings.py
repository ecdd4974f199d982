"""How a pass-through request ends when it does not end well: the client leaves, the
upstream fails, stalls or breaks off. Each is recorded once and in-flight returns to 0."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.asgi_server import wait_for
from tests.proxy.conftest import Plane, no_pause, set_proxy, upstreams

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = [{"role": "user", "content": "hello there"}]


def _headers(plane: Plane) -> dict[str, str]:
    return {"Authorization": f"Bearer {plane.secret}"}


def _ended(plane: Plane) -> dict[str, Any]:
    """The one record, once the request has fully ended on the server."""
    assert wait_for(lambda: len(plane.records()) == 1 and plane.inflight() == 0)
    return plane.only_entry()


def test_client_leaving_mid_stream_cancels_upstream_and_is_an_abort(plane: Plane) -> None:
    body = {
        "model": "sim-small",
        "messages": MESSAGES,
        "stream": True,
        "sim": {"tokens": 50, "stall_after": 3},
    }
    contents = 0
    with httpx.stream(
        "POST", f"{plane.base}/chat/completions", json=body, headers=_headers(plane)
    ) as answer:
        for line in answer.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                contents += 1
            if contents == 3:
                break  # leave: the with block closes the connection
    assert wait_for(lambda: plane.engine.disconnected == 1)
    recorded = _ended(plane)
    assert recorded["aborted"] == "client_disconnect"
    assert recorded["completion_tokens"] == 3  # what it had been sent
    assert recorded["status"] == 200
    assert recorded["error"] is None
    assert plane.engine.active == 0


def test_client_leaving_before_an_answer_cancels_upstream(plane: Plane) -> None:
    body = {"model": "sim-small", "messages": MESSAGES, "sim": {"stall_after": 0}}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{plane.base}/chat/completions", json=body, headers=_headers(plane), timeout=0.3
        )
    assert wait_for(lambda: plane.engine.disconnected == 1)
    recorded = _ended(plane)
    assert recorded["aborted"] == "client_disconnect"
    assert recorded["completion_tokens"] is None


@pytest.mark.parametrize("status", [500, 503])
def test_upstream_server_error_is_passed_on_and_recorded(plane: Plane, status: int) -> None:
    with pytest.raises(openai.APIStatusError) as raised:
        plane.sdk().chat.completions.create(
            model="sim-small", messages=MESSAGES, extra_body={"sim": {"fail": status}}
        )
    assert raised.value.status_code == status
    assert (
        raised.value.body
        == {
            "message": "simulated failure",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        or raised.value.body["message"] == "simulated failure"
    )
    recorded = _ended(plane)
    assert (recorded["status"], recorded["error"]) == (status, f"upstream_{status}")


def test_upstream_client_error_is_recorded_by_its_status_alone(plane: Plane) -> None:
    with pytest.raises(openai.BadRequestError):
        plane.sdk().chat.completions.create(
            model="sim-small", messages=MESSAGES, extra_body={"sim": {"fail": 400}}
        )
    recorded = _ended(plane)
    assert (recorded["status"], recorded["error"]) == (400, None)


def test_stream_request_failing_upstream_gets_the_error_not_a_stream(plane: Plane) -> None:
    with pytest.raises(openai.InternalServerError):
        list(
            plane.sdk().chat.completions.create(
                model="sim-small", messages=MESSAGES, stream=True, extra_body={"sim": {"fail": 500}}
            )
        )
    recorded = _ended(plane)
    assert (recorded["status"], recorded["error"], recorded["stream"]) == (
        500,
        "upstream_500",
        True,
    )


def test_upstream_silent_past_the_timeout(plane: Plane, settings: Any) -> None:
    plane.sdk().models.list()  # a client to the upstream exists, with the default timeout
    set_proxy(settings, PROXY_READ_TIMEOUT_S=0.2)  # read at access time all the same
    with pytest.raises(openai.APIStatusError) as raised:
        plane.sdk().chat.completions.create(
            model="sim-small", messages=MESSAGES, extra_body={"sim": {"stall_after": 0}}
        )
    assert raised.value.status_code == 504
    assert raised.value.code == "upstream_timeout"
    recorded = _ended(plane)
    assert (recorded["status"], recorded["error"]) == (504, "upstream_timeout")
    assert recorded["aborted"] is None
    # The pass-through gave up, so the engine saw its client leave.
    assert wait_for(lambda: plane.engine.disconnected == 1)


def test_upstream_stalling_mid_stream_ends_with_an_error_event(plane: Plane, settings: Any) -> None:
    set_proxy(settings, PROXY_READ_TIMEOUT_S=0.2)
    plane.engine.pause = no_pause
    received = []
    with pytest.raises(openai.APIError, match="stopped sending"):
        for chunk in plane.sdk().chat.completions.create(
            model="sim-small",
            messages=MESSAGES,
            stream=True,
            extra_body={"sim": {"tokens": 10, "stall_after": 4}},
        ):
            received.append(chunk)
    recorded = _ended(plane)
    assert (recorded["status"], recorded["error"]) == (200, "upstream_timeout")
    assert recorded["completion_tokens"] == 4
    assert len(received) == 5  # the role chunk and four tokens


def test_upstream_breaking_off_a_stream(plane: Plane) -> None:
    plane.engine.pause = no_pause
    with pytest.raises(openai.APIError):
        list(
            plane.sdk().chat.completions.create(
                model="sim-small",
                messages=MESSAGES,
                stream=True,
                extra_body={"sim": {"tokens": 10, "drop_after": 2}},
            )
        )
    recorded = _ended(plane)
    assert recorded["error"] == "upstream_broken_stream"
    assert recorded["completion_tokens"] == 2


def test_unreachable_upstream(plane: Plane, settings: Any) -> None:
    set_proxy(settings, PROXY_UPSTREAMS=upstreams(gone="http://127.0.0.1:9"))
    with pytest.raises(openai.APIStatusError) as raised:
        plane.sdk().chat.completions.create(model="sim-small", messages=MESSAGES)
    assert (raised.value.status_code, raised.value.code) == (502, "upstream_unreachable")
    recorded = _ended(plane)
    assert (recorded["status"], recorded["error"]) == (502, "upstream_unreachable")


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_refusing_our_credentials_is_not_blamed_on_the_client(
    plane: Plane, settings: Any, stream: bool
) -> None:
    routes = upstreams(sim=plane.engine_url)
    routes["sim"]["API_KEY"] = "sk-wrong-upstream-key"
    set_proxy(settings, PROXY_UPSTREAMS=routes)
    client = plane.sdk()
    with pytest.raises(openai.APIStatusError) as raised:
        if stream:
            list(client.chat.completions.create(model="sim-small", messages=MESSAGES, stream=True))
        else:
            client.chat.completions.create(model="sim-small", messages=MESSAGES)
    assert (raised.value.status_code, raised.value.code) == (502, "upstream_auth_failed")
    assert "sk-wrong-upstream-key" not in str(raised.value.body)
    recorded = _ended(plane)
    assert (recorded["status"], recorded["error"]) == (502, "upstream_401")
    with pytest.raises(openai.APIStatusError) as listed:
        client.models.list()
    assert listed.value.status_code == 502
