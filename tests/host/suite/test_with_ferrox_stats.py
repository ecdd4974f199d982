"""The host project's own tests, with ferrox_stats installed and mounted at ``telemetry/``.

Django ``TestCase``s, so that the host runs them with ``manage.py test`` and with
pytest-django alike (``tests/test_host_project.py`` runs both, under each versioning
class). The app's endpoints answer as its README documents, whatever the host's global
DRF defaults; the host's own API keeps them.
"""

from __future__ import annotations

import json

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client, TestCase
from rest_framework.authtoken.models import Token

from ferrox_stats import live, tokens

TELEMETRY = "/telemetry"
# (path, status, content type) a read+ingest token gets from each read endpoint.
READS = [
    ("/v1/requests?limit=1", 200, "application/json"),
    ("/v1/stats", 200, "application/json"),
    ("/admin/stats?limit=1", 200, "application/json"),
    ("/v1/history?limit=1", 200, "application/json"),
    ("/v1/history/export?format=jsonl", 200, "application/jsonl"),
    ("/v1/history/no-such-id", 404, "application/json"),
    ("/v1/schema?format=json", 200, "application/vnd.oai.openapi+json"),
    ("/v1/docs", 200, "text/html"),
    ("/metrics", 200, "text/plain; version=0.0.4"),
]


class AppEndpointsTest(TestCase):
    def setUp(self) -> None:
        cache.clear()  # the host's throttles count in the cache
        live.reset()
        self.addCleanup(live.reset)
        _, secret = tokens.issue("host-poller", read=True, ingest=True, replica="gpu-1")
        self.token = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")

    def test_every_read_endpoint_answers_as_documented(self) -> None:
        for path, status, content_type in READS:
            for _ in range(4):  # past the host's user throttle (3/day)
                response = self.token.get(TELEMETRY + path)
                body = (
                    b"".join(response.streaming_content) if response.streaming else response.content
                )
                self.assertEqual(response.status_code, status, (path, body[:200]))
                self.assertTrue(response["Content-Type"].startswith(content_type), path)

    def test_the_app_schema_is_the_apps(self) -> None:
        document = json.loads(self.token.get(f"{TELEMETRY}/v1/schema?format=json").content)
        self.assertEqual(document["info"]["title"], "ferrox_stats API")
        self.assertNotIn("7.3.0", document["info"]["version"])  # the host's version
        names = set(document["components"]["schemas"])
        self.assertTrue(names and all(n.startswith("FerroxStats") for n in names), names)
        self.assertTrue(all(p.startswith(f"{TELEMETRY}/") for p in document["paths"]))
        # The app's drf-spectacular settings, not the host's (COMPONENT_SPLIT_REQUEST).
        self.assertIn("FerroxStatsIngestBatchRequest", names)
        docs = self.token.get(f"{TELEMETRY}/v1/docs").content.decode()
        self.assertIn("ferrox_stats API", docs)
        self.assertNotIn("host-doc-expansion", docs)  # the host's SWAGGER_UI_SETTINGS

    def test_ingest_answers_per_item(self) -> None:
        body = {"records": [{"request_id": f"h-{n}", "at_ms": 1_767_225_600_000} for n in (1, 2)]}
        response = self.token.post(
            f"{TELEMETRY}/v1/ingest", json.dumps(body), content_type="application/json"
        )
        self.assertEqual(response.status_code, 200, response.content[:300])
        self.assertEqual(response.json()["accepted"], 2)

    def test_a_stranger_gets_the_apps_401(self) -> None:
        for path, _, _ in READS:
            response = Client(HTTP_ACCEPT="application/json").get(TELEMETRY + path)
            self.assertEqual(response.status_code, 401, path)
            self.assertEqual(response.json()["error"]["status"], 401, path)

    def test_the_hosts_drf_token_is_not_the_apps(self) -> None:
        user = get_user_model().objects.create_user("ops@example.com", "pw", is_staff=True)
        key = Token.objects.create(user=user).key
        response = Client(HTTP_AUTHORIZATION=f"Token {key}").get(f"{TELEMETRY}/v1/stats")
        self.assertEqual(response.status_code, 401)


class StaffPagesTest(TestCase):
    def setUp(self) -> None:
        cache.clear()
        self.user = get_user_model().objects.create_user(
            "staff@example.com", "pw", is_staff=True, is_superuser=True
        )
        self.client.force_login(self.user)

    def test_the_dashboard_and_its_poll_answer_a_staff_session(self) -> None:
        self.assertEqual(self.client.get(f"{TELEMETRY}/dashboard/").status_code, 200)
        self.assertEqual(self.client.get(f"{TELEMETRY}/dashboard/history/").status_code, 200)
        poll = self.client.get(f"{TELEMETRY}/admin/stats?since=0&limit=5")
        self.assertEqual(poll.status_code, 200, poll.content[:200])
        self.assertIn("entries", poll.json())

    def test_the_apps_admin_is_on_the_hosts_site(self) -> None:
        response = self.client.get("/ops/ferrox_stats/finishedrequest/")
        self.assertEqual(response.status_code, 200)
        self.assertContains(self.client.get("/ops/"), "Host control plane")

    def test_a_login_by_email_reaches_the_dashboard(self) -> None:
        client = Client()
        self.assertTrue(client.login(email="staff@example.com", password="pw"))
        self.assertEqual(client.get(f"{TELEMETRY}/dashboard/").status_code, 200)
