"""The admin on a host's own ``AdminSite``, and latencies shown rounded."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.urls import path, reverse

from ferrox_stats import admin as stats_admin
from ferrox_stats.models import ApiToken, DeadLetter, FinishedRequest, Instance

from .factories import archive, make_record

pytestmark = pytest.mark.django_db


class HostSite(admin.AdminSite):
    site_header = "Host control plane"


host_site = HostSite(name="host_admin")
stats_admin.register(host_site)

# This module is the URLconf of the tests marked with it: only the host's site.
urlpatterns = [path("ops/", host_site.urls)]


def test_register_puts_every_model_admin_on_the_given_site() -> None:
    site = admin.AdminSite(name="elsewhere")
    stats_admin.register(site)

    assert {m: type(a) for m, a in site._registry.items()} == {
        FinishedRequest: stats_admin.FinishedRequestAdmin,
        DeadLetter: stats_admin.DeadLetterAdmin,
        ApiToken: stats_admin.ApiTokenAdmin,
        Instance: stats_admin.InstanceAdmin,
    }
    # The default site keeps its own registrations.
    assert isinstance(admin.site._registry[FinishedRequest], stats_admin.FinishedRequestAdmin)


@pytest.mark.urls(__name__)
def test_a_host_site_serves_the_archive(client: Client) -> None:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    archive([make_record(request_id="chatcmpl-host")])
    row = FinishedRequest.objects.get()

    changelist = client.get(reverse("host_admin:ferrox_stats_finishedrequest_changelist"))
    detail = client.get(reverse("host_admin:ferrox_stats_finishedrequest_change", args=[row.pk]))

    assert changelist.status_code == detail.status_code == 200
    assert changelist.request["PATH_INFO"].startswith("/ops/")
    assert "chatcmpl-host" in changelist.content.decode()
    assert b"Host control plane" in detail.content


def _cells(response: Any) -> dict[str, str]:
    return {
        field.field["name"]: str(field.contents())
        for fieldset in response.context["adminform"]
        for line in fieldset
        for field in line
    }


def test_latencies_show_rounded_in_the_list_and_the_detail(admin_client: Client) -> None:
    archive(
        [
            make_record(
                ttft_ms=120.04999,
                duration_ms=5802.033534999964,
                queue_ms=3.0,
                decode_ms=None,
            )
        ]
    )
    row = FinishedRequest.objects.get()

    listing = admin_client.get(reverse("admin:ferrox_stats_finishedrequest_changelist"))
    detail = admin_client.get(reverse("admin:ferrox_stats_finishedrequest_change", args=[row.pk]))

    page = listing.content.decode()
    assert "5802.0" in page and "120.0" in page
    assert "5802.03" not in page and "120.04" not in page
    cells = _cells(detail)
    assert (cells["ttft"], cells["duration"], cells["queue"], cells["decode"]) == (
        "120.0",
        "5802.0",
        "3.0",
        "—",
    )
    assert "5802.03" not in detail.content.decode()
