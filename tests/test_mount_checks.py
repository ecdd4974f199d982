"""The checks on how the host mounts the app (``ferrox_stats.mount_checks``)."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.core import checks
from django.test import Client, override_settings
from django.urls import include, path

from ferrox_stats.mount_checks import check_routes_reach_the_app

pytestmark = pytest.mark.django_db


class urlconf:
    """A URLconf module made on the spot (ROOT_URLCONF also takes a module object)."""

    def __init__(self, *patterns: object) -> None:
        self.urlpatterns = list(patterns)


APP_FIRST = urlconf(path("", include("ferrox_stats.urls")), path("admin/", admin.site.urls))
ADMIN_FIRST = urlconf(path("admin/", admin.site.urls), path("", include("ferrox_stats.urls")))


def ids(messages: list[checks.CheckMessage]) -> list[str | None]:
    return [m.id for m in messages]


def test_mounted_at_the_root_before_the_admin_passes(client: Client) -> None:
    with override_settings(ROOT_URLCONF=APP_FIRST):
        assert check_routes_reach_the_app() == []


def test_mounted_at_the_root_after_the_admin_is_e020() -> None:
    with override_settings(ROOT_URLCONF=ADMIN_FIRST):
        errors = check_routes_reach_the_app()

    assert ids(errors) == ["ferrox_stats.E020"]
    assert errors[0].msg.startswith("/admin/stats is mounted for 'ferrox_stats:admin-stats'")
    assert "before admin.site.urls" in (errors[0].hint or "")


def test_e020_runs_with_the_url_checks() -> None:
    with override_settings(ROOT_URLCONF=ADMIN_FIRST):
        found = checks.run_checks(tags=[checks.Tags.urls])

    assert "ferrox_stats.E020" in ids(found)


@pytest.mark.parametrize(
    "conf",
    [
        # Under a prefix, as the suite mounts it.
        urlconf(path("admin/", admin.site.urls), path("ops/", include("ferrox_stats.urls"))),
        # Under the host's own instance namespace.
        urlconf(path("t/", include("ferrox_stats.urls", namespace="telemetry"))),
        # Not mounted at all: nothing to check.
        urlconf(path("admin/", admin.site.urls)),
    ],
)
def test_other_mounts_pass(conf: urlconf) -> None:
    with override_settings(ROOT_URLCONF=conf):
        assert check_routes_reach_the_app() == []


def test_a_host_route_that_shadows_the_pass_through_is_e020() -> None:
    def host_models(request: object) -> None:
        raise AssertionError("not called")

    conf = urlconf(path("v1/models", host_models), path("", include("ferrox_stats.proxy.urls")))
    with override_settings(ROOT_URLCONF=conf):
        errors = check_routes_reach_the_app()

    assert ids(errors) == ["ferrox_stats.E020"]
    assert "'ferrox_stats_proxy:models'" in errors[0].msg
