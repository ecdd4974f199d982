"""The host's own API keeps the host's global DRF defaults with the app installed."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client, TestCase
from django.urls import reverse
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


def notes_request() -> tuple[str, dict[str, str]]:
    """Where the host's notes are, and how a client names the version, per versioning."""
    versioning = api_settings.DEFAULT_VERSIONING_CLASS
    if versioning is URLPathVersioning:
        return "/api/v1/notes/", {}
    if versioning is NamespaceVersioning:
        return reverse("v1:note-list"), {}
    if versioning is AcceptHeaderVersioning:
        return "/api/notes/", {"HTTP_ACCEPT": "application/json; version=v1"}
    if versioning is QueryParameterVersioning:
        return "/api/notes/?version=v1", {}
    assert versioning is HostNameVersioning, versioning
    return "/api/notes/", {"HTTP_HOST": "v1.testserver"}


class HostApiTest(TestCase):
    def setUp(self) -> None:
        cache.clear()
        user = get_user_model().objects.create_user("dev@example.com", "pw")
        self.client = Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        Note.objects.bulk_create([Note(text=str(n)) for n in range(3)])

    def test_the_hosts_api_is_versioned_paginated_and_closed(self) -> None:
        path, extra = notes_request()
        response = self.client.get(path, **extra)
        self.assertEqual(response.status_code, 200, response.content[:200])
        page = response.json()
        self.assertEqual(page["count"], 3)  # LimitOffset, PAGE_SIZE 2
        self.assertEqual(len(page["results"]), 2)
        self.assertEqual(Client().get(path, **extra).status_code, 401)
