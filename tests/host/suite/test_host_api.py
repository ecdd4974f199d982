"""The host's own API keeps the host's global DRF defaults with the app installed."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client, TestCase
from rest_framework.authtoken.models import Token
from rest_framework.settings import api_settings
from rest_framework.versioning import (
    AcceptHeaderVersioning,
    HostNameVersioning,
    NamespaceVersioning,
    QueryParameterVersioning,
    URLPathVersioning,
)

from tests.host.hostapp.models import Note


def api_request(name: str) -> tuple[str, dict[str, str]]:
    """Where the host's notes are, and how a client names the version, per versioning."""
    versioning = api_settings.DEFAULT_VERSIONING_CLASS
    if versioning is URLPathVersioning:
        return f"/api/v1/{name}", {}
    if versioning is NamespaceVersioning:
        return f"/api/v1/{name}", {}
    if versioning is AcceptHeaderVersioning:
        return f"/api/{name}", {"HTTP_ACCEPT": "application/json; version=v1"}
    if versioning is QueryParameterVersioning:
        return f"/api/{name}?version=v1", {}
    assert versioning is HostNameVersioning, versioning
    return f"/api/{name}", {"HTTP_HOST": "v1.testserver"}


class HostApiTest(TestCase):
    def setUp(self) -> None:
        cache.clear()
        user = get_user_model().objects.create_user("dev@example.com", "pw")
        self.client = Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        Note.objects.bulk_create([Note(text=str(n)) for n in range(3)])

    def test_the_hosts_api_is_versioned_paginated_and_closed(self) -> None:
        path, extra = api_request("notes/")
        response = self.client.get(path, **extra)
        self.assertEqual(response.status_code, 200, response.content[:200])
        page = response.json()
        self.assertEqual(page["count"], 3)  # LimitOffset, PAGE_SIZE 2
        self.assertEqual(len(page["results"]), 2)
        self.assertEqual(Client().get(path, **extra).status_code, 401)

    def test_the_hosts_inference_view_records_through_the_app(self) -> None:
        from ferrox_stats import live

        live.reset()
        self.addCleanup(live.reset)
        path, extra = api_request("infer")
        response = self.client.post(path, "{}", content_type="application/json", **extra)
        self.assertEqual(response.status_code, 200, response.content[:200])
        self.assertEqual(live.get_recorder().snapshot().serving.completed, 1)
