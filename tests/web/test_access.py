"""Who may see the dashboard, and that it works under the prefix the project mounts it at."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

from ferrox_stats import access, live
from tests.conftest import grant
from tests.factories import archive, make_record
from tests.web.conftest import DASHBOARD, HISTORY, PREFIX, PROCESS, ROOT

DETAIL = f"{PREFIX}/dashboard/requests/chatcmpl-1"
USAGE = f"{PREFIX}/dashboard/usage/"
PAGES = [DASHBOARD, PROCESS, HISTORY, USAGE, DETAIL]
# What each page needs: the archive's pages show client addresses and key labels.
NEEDS = {
    DASHBOARD: access.DASHBOARD,
    PROCESS: access.DASHBOARD,
    HISTORY: access.ARCHIVE,
    USAGE: access.ARCHIVE,
    DETAIL: access.ARCHIVE,
}


@pytest.fixture(autouse=True)
def _archived_row(db: None, recorder: live.Recorder) -> None:
    archive([make_record(request_id="chatcmpl-1")])


@pytest.mark.parametrize("url", PAGES)
def test_anonymous_visitors_are_sent_to_the_admin_login(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/admin/login/?next={url}"


@pytest.mark.urls("tests.web.urls_no_admin")
def test_without_an_admin_named_admin_visitors_go_to_login_url(
    client: Client, settings: Any
) -> None:
    settings.LOGIN_URL = "/accounts/sign-in/"
    response = client.get(DASHBOARD)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/sign-in/?next={DASHBOARD}"


@pytest.mark.parametrize("staff", [False, True])
@pytest.mark.parametrize("url", PAGES)
def test_logged_in_users_without_the_permission_get_403(
    client: Client, django_user_model: Any, url: str, staff: bool
) -> None:
    # is_staff alone opens nothing: the host's permissions decide.
    client.force_login(django_user_model.objects.create_user("someone", is_staff=staff))
    assert client.get(url).status_code == 403


@pytest.mark.parametrize("permission", [access.DASHBOARD, access.ARCHIVE])
def test_a_permission_granted_through_a_group_opens_its_pages_and_no_other(
    client: Client, django_user_model: Any, permission: str
) -> None:
    client.force_login(grant(django_user_model.objects.create_user("member"), permission))
    statuses = {url: client.get(url).status_code for url in PAGES}
    assert statuses == {url: 200 if NEEDS[url] == permission else 403 for url in PAGES}


def test_a_superuser_sees_every_page(client: Client, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com"))
    assert [client.get(url).status_code for url in PAGES] == [200] * len(PAGES)


@pytest.mark.parametrize("url", PAGES)
def test_inactive_staff_are_sent_to_the_admin_login(
    client: Client, django_user_model: Any, url: str
) -> None:
    user = django_user_model.objects.create_user("gone", is_staff=True)
    client.force_login(user)
    user.is_active = False
    user.save()
    assert client.get(url).status_code == 302


@pytest.mark.parametrize("url", PAGES)
def test_staff_see_the_pages(staff_client: Client, url: str) -> None:
    response = staff_client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"


@pytest.mark.parametrize("url", PAGES)
def test_the_pages_only_answer_reads(staff_client: Client, url: str) -> None:
    assert staff_client.post(url).status_code == 405


@pytest.mark.parametrize(
    ("name", "args", "path"),
    [
        ("ferrox_stats:web:dashboard", [], "/control/telemetry/dashboard/"),
        ("ferrox_stats:web:process", [], "/control/telemetry/dashboard/process/"),
        ("ferrox_stats:web:history", [], "/control/telemetry/dashboard/history/"),
        ("ferrox_stats:web:usage", [], "/control/telemetry/dashboard/usage/"),
        (
            "ferrox_stats:web:request-detail",
            ["chatcmpl-1"],
            "/control/telemetry/dashboard/requests/chatcmpl-1",
        ),
    ],
)
def test_the_pages_are_named_under_the_apps_namespace(
    name: str, args: list[str], path: str
) -> None:
    assert reverse(name, args=args) == path


@pytest.mark.parametrize(("url", "script"), [(DASHBOARD, "fleet.js"), (PROCESS, "dashboard.js")])
def test_every_link_and_asset_resolves_under_the_prefix(
    staff_client: Client, url: str, script: str
) -> None:
    html = staff_client.get(url).content.decode()
    for href in (
        "/control/telemetry/dashboard/",
        "/control/telemetry/dashboard/process/",
        "/control/telemetry/dashboard/history/",
        "/control/telemetry/dashboard/usage/",
        "/control/telemetry/v1/docs",
        "/admin/",
        "/static/ferrox_stats/dashboard.css",
        "/static/ferrox_stats/format.js",
        "/static/ferrox_stats/charts.js",
        "/static/ferrox_stats/rows.js",
        "/static/ferrox_stats/poller.js",
        f"/static/ferrox_stats/{script}",
        "/static/ferrox_stats/vendor/uplot/uPlot.iife.min.js",
        "/static/ferrox_stats/vendor/uplot/uPlot.min.css",
    ):
        assert f'"{href}"' in html, href


@pytest.mark.parametrize(
    "asset",
    [
        "ferrox_stats/dashboard.css",
        "ferrox_stats/dashboard.js",
        "ferrox_stats/fleet.js",
        "ferrox_stats/rows.js",
        "ferrox_stats/poller.js",
        "ferrox_stats/format.js",
        "ferrox_stats/charts.js",
        "ferrox_stats/vendor/uplot/uPlot.iife.min.js",
        "ferrox_stats/vendor/uplot/uPlot.min.css",
        "ferrox_stats/vendor/uplot/LICENSE",
    ],
)
def test_static_files_ship_inside_the_app(asset: str) -> None:
    found = finders.find(asset)
    assert found is not None
    assert Path(str(found)).is_relative_to(ROOT / "ferrox_stats" / "static")


@pytest.mark.parametrize("url", PAGES)
def test_nothing_is_loaded_from_another_host(staff_client: Client, url: str) -> None:
    html = staff_client.get(url).content.decode()
    assert not re.search(r"""(src|href)=["'](https?:)?//""", html)


def test_the_vendored_chart_library_is_the_one_package_json_pins() -> None:
    import json

    pinned = json.loads((ROOT / "package.json").read_text())["dependencies"]["uplot"]
    head = (ROOT / "ferrox_stats/static/ferrox_stats/vendor/uplot/uPlot.iife.min.js").read_text()
    assert f"(v{pinned})" in head.splitlines()[0]


def _imports(package: Path) -> set[str]:
    names: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names.add("." * node.level + (node.module or ""))
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize(("package", "other"), [("web", "api"), ("api", "web")])
def test_api_and_web_never_import_each_other(package: str, other: str) -> None:
    imported = _imports(ROOT / "ferrox_stats" / package)
    assert not {
        name
        for name in imported
        if name in (f"..{other}", f"ferrox_stats.{other}")
        or name.startswith((f"..{other}.", f"ferrox_stats.{other}."))
    }


def test_the_readmes_upgrade_recipe_lets_the_staff_back_in(
    client: Client, django_user_model: Any
) -> None:
    readme = (ROOT / "README.md").read_text()
    recipe = readme.split("**Upgrading**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    client.force_login(django_user_model.objects.create_user("old-hand", is_staff=True))
    assert [client.get(url).status_code for url in PAGES] == [403] * len(PAGES)
    exec(recipe, {})  # the README's own words, run as a host would paste them
    assert [client.get(url).status_code for url in PAGES] == [200] * len(PAGES)
