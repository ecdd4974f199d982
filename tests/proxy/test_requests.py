"""What the pass-through refuses before any upstream sees it: callers without the
right key, bodies it cannot forward, the wrong server, the wrong method."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from django.test import Client

from ferrox_stats import tokens
from tests.proxy.conftest import Plane, set_proxy

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "sim-small", "messages": [{"role": "user", "content": "hi"}]}


def _post(plane: Plane, body: Any, key: str | None = "plane", **kwargs: Any) -> httpx.Response:
    headers = kwargs.pop("headers", {})
    if key is not None:
        headers["Authorization"] = f"Bearer {plane.secret if key == 'plane' else key}"
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{plane.base}/chat/completions", content=content, headers=headers)


def _error(answer: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


@pytest.mark.parametrize(
    ("key", "status", "code"),
    [
        (None, 401, "missing_api_key"),
        ("fxs_not-a-real-key", 401, "invalid_api_key"),
        ("sk-someone-elses-openai-key", 401, "invalid_api_key"),
    ],
)
def test_callers_without_a_valid_key_are_refused_unrecorded(
    plane: Plane, key: str | None, status: int, code: str
) -> None:
    answer = _post(plane, CHAT, key=key)
    assert answer.status_code == status
    assert _error(answer)["code"] == code
    assert key is None or key not in answer.text  # a key sent is never echoed
    assert plane.records() == [] and plane.engine.requests == []


def test_a_key_without_the_infer_scope_is_forbidden(plane: Plane) -> None:
    _, reader = tokens.issue("poller", read=True)
    answer = _post(plane, CHAT, key=reader)
    assert answer.status_code == 403
    assert _error(answer)["code"] == "insufficient_scope"
    assert plane.engine.requests == []


def test_a_revoked_key_is_refused(plane: Plane) -> None:
    token, secret = tokens.issue("leaver", read=False, infer=True)
    tokens.revoke(token)
    assert _post(plane, CHAT, key=secret).status_code == 401


def test_an_expired_key_is_refused(plane: Plane) -> None:
    # Expiry is read on the recorder's clock, which the plane runs on a fake one.
    now = datetime.fromtimestamp(plane.clock.wall / 1000, tz=UTC)
    _, secret = tokens.issue("temp", read=False, infer=True, expires_at=now)
    answer = _post(plane, CHAT, key=secret)
    assert answer.status_code == 401
    assert _error(answer)["code"] == "invalid_api_key"
    assert plane.engine.requests == []


def test_the_key_of_an_inactive_user_is_refused(plane: Plane, django_user_model: Any) -> None:
    owner = django_user_model.objects.create_user("leaver", is_active=False)
    _, secret = tokens.issue("theirs", read=False, infer=True, owner=owner)
    assert _post(plane, CHAT, key=secret).status_code == 401
    assert plane.engine.requests == []


def test_anonymous_callers_when_no_key_is_required(plane: Plane, settings: Any) -> None:
    set_proxy(settings, PROXY_REQUIRE_KEY=False)
    assert _post(plane, CHAT, key=None).status_code == 200
    assert plane.only_entry()["via_api_key"] is None
    # A key that is sent is still checked.
    assert _post(plane, CHAT, key="fxs_wrong").status_code == 401


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"\xff\xfe", None),
        (b"[" * 100_000 + b"]" * 100_000, None),
        (b'["a list"]', None),
        (b"{}", "model"),
        (b'{"model": 7}', "model"),
        (b'{"model": ""}', "model"),
        (b'{"model": "sim-small", "stream": "yes"}', "stream"),
        (b'{"model": "sim-small", "stream": true, "stream_options": [1]}', "stream_options"),
    ],
)
def test_bodies_that_cannot_be_forwarded_are_400(
    plane: Plane, body: bytes, param: str | None
) -> None:
    answer = _post(plane, body)
    assert answer.status_code == 400
    error = _error(answer)
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert plane.engine.requests == []
    assert plane.only_entry()["status"] == 400  # a keyed caller's request is recorded


def test_an_oversized_body_is_413(plane: Plane, settings: Any) -> None:
    set_proxy(settings, PROXY_MAX_BODY_BYTES=1000)
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 2000}]}
    answer = _post(plane, big)
    assert answer.status_code == 413
    assert _error(answer)["code"] == "request_too_large"
    assert plane.engine.requests == []
    # At the limit exactly, it goes through.
    fits = {**CHAT, "messages": [{"role": "user", "content": ""}]}
    padding = 1000 - len(json.dumps(fits).encode())
    fits["messages"][0]["content"] = "x" * padding
    assert len(json.dumps(fits).encode()) == 1000
    assert _post(plane, fits).status_code == 200


def test_a_model_no_upstream_serves_is_404(plane: Plane, settings: Any) -> None:
    routes = settings.FERROX_STATS["PROXY_UPSTREAMS"]
    routes["sim"]["MODELS"] = ["sim-small"]
    set_proxy(settings, PROXY_UPSTREAMS=routes)
    answer = _post(plane, {**CHAT, "model": "gpt-unknown"})
    assert answer.status_code == 404
    assert (_error(answer)["code"], _error(answer)["param"]) == ("model_not_found", "model")
    recorded = plane.only_entry()
    assert (recorded["status"], recorded["model"]) == (404, "gpt-unknown")


def test_wrong_method(plane: Plane) -> None:
    answer = httpx.get(
        f"{plane.base}/chat/completions", headers={"Authorization": f"Bearer {plane.secret}"}
    )
    assert answer.status_code == 405
    assert _error(answer)["message"].startswith("GET is not allowed")
    assert httpx.post(f"{plane.base}/models").status_code == 405


def test_under_wsgi_it_refuses_and_says_why() -> None:
    answer = Client().post("/v1/chat/completions", CHAT, content_type="application/json")
    assert answer.status_code == 501
    assert answer.json()["error"]["code"] == "asgi_required"
