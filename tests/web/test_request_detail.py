"""One request's page: the archived row(s) with derived rates, or the ring's entry."""

from __future__ import annotations

import html as htmllib
import re

from django.test import Client

from ferrox_stats import live
from ferrox_stats.models import FinishedRequest
from tests.factories import archive, make_record
from tests.web.conftest import PREFIX


def detail(client: Client, request_id: str) -> tuple[int, str]:
    response = client.get(f"{PREFIX}/dashboard/requests/{request_id}")
    return response.status_code, htmllib.unescape(response.content.decode())


def field(html: str, label: str) -> list[str]:
    return re.findall(rf"<dt>{re.escape(label)}</dt><dd>([^<]*)</dd>", html)


def test_an_archived_request_shows_its_derived_rates_and_links_to_the_admin(
    staff_client: Client, recorder: live.Recorder
) -> None:
    archive([make_record(request_id="chatcmpl-x", completion_tokens=11, decode_ms=500.0)])
    row = FinishedRequest.objects.get(request_id="chatcmpl-x")
    status, html = detail(staff_client, "chatcmpl-x")
    assert status == 200
    assert field(html, "Decode tok/s") == ["20.0"]
    assert field(html, "ITL (ms)") == ["50.0"]
    assert field(html, "Completion") == ["11"]
    assert field(html, "Finished (UTC)") == [row.finished_at.strftime("%Y-%m-%d %H:%M:%S.000")]
    assert f'href="/admin/ferrox_stats/finishedrequest/{row.pk}/change/"' in html
    assert "Open in the Django admin" in html


def test_unmeasured_fields_read_as_dashes(staff_client: Client, recorder: live.Recorder) -> None:
    archive([make_record(request_id="chatcmpl-y", completion_tokens=1, ttft_ms=None, model=None)])
    _, html = detail(staff_client, "chatcmpl-y")
    assert field(html, "Decode tok/s") == ["—"]
    assert field(html, "ITL (ms)") == ["—"]
    assert field(html, "TTFT (ms)") == ["—"]
    assert field(html, "Model") == ["—"]


def test_each_replica_that_served_an_id_gets_its_own_section(
    staff_client: Client, recorder: live.Recorder
) -> None:
    archive(
        [
            make_record(request_id="dup", replica="gpu-1"),
            make_record(request_id="dup", replica="gpu-2"),
        ]
    )
    _, html = detail(staff_client, "dup")
    assert sorted(field(html, "Replica")) == ["gpu-1", "gpu-2"]
    assert html.count("Open in the Django admin") == 2


def test_a_request_not_archived_yet_is_shown_from_the_ring(
    staff_client: Client, recorder: live.Recorder
) -> None:
    for n in range(600):  # more than one ring page
        with recorder.track(model="m", request_id=f"r-{n}") as t:
            t.finish(status=200)
    with recorder.track(model="m", request_id="fresh") as t:
        t.tokens(completion=3)
        t.finish(status=200)
    status, html = detail(staff_client, "fresh")
    assert status == 200
    assert "not archived yet" in html
    assert field(html, "Completion") == ["3"]
    assert "Open in the Django admin" not in html


def test_an_id_nobody_holds_is_a_404_that_says_so(
    staff_client: Client, recorder: live.Recorder
) -> None:
    status, html = detail(staff_client, "never-seen")
    assert status == 404
    assert "No archived request has this id, and this process's ring does not hold it" in html


def test_ids_are_escaped(staff_client: Client, recorder: live.Recorder) -> None:
    response = staff_client.get(f"{PREFIX}/dashboard/requests/<script>alert(1)</script>")
    assert b"<script>alert(1)" not in response.content
    assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in response.content


def test_an_id_no_row_can_have_is_a_404_not_an_error(
    staff_client: Client, recorder: live.Recorder
) -> None:
    status, html = detail(staff_client, "bad%00id")
    assert status == 404
    assert "No archived request has this id" in html
