"""Fixtures for the API: tokens by scope, clients that carry them, the mount prefix."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from ferrox_stats import access, tokens
from tests.conftest import grant

PREFIX = "/control/telemetry"


class TokenClient(Client):
    """A test client that sends ``Authorization: Bearer <secret>`` on every request."""

    def __init__(self, secret: str, **defaults: Any) -> None:
        super().__init__(HTTP_AUTHORIZATION=f"Bearer {secret}", **defaults)


@pytest.fixture
def read_client(db: None) -> TokenClient:
    _, secret = tokens.issue("poller")
    return TokenClient(secret)


@pytest.fixture
def ingest_secret(db: None) -> str:
    _, secret = tokens.issue("engine-gpu-1", read=False, ingest=True, replica="gpu-1")
    return secret


@pytest.fixture
def ingest_client(ingest_secret: str) -> TokenClient:
    return TokenClient(ingest_secret)


@pytest.fixture
def staff_client(db: None, django_user_model: Any) -> Client:
    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    grant(user, access.DASHBOARD, access.ARCHIVE)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client
