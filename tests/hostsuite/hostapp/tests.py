"""The host's own tests: its inference code records through ``live.track``, archived by
the app's default writer thread, as in production."""

from __future__ import annotations

from django.test import TestCase, TransactionTestCase

from ferrox_stats import live
from ferrox_stats.archive.writer import ArchiveWriter
from ferrox_stats.models import FinishedRequest


class HostInference(TransactionTestCase):
    def test_a_tracked_request_is_archived(self) -> None:
        with live.track(route="/v1/chat/completions", model="host-model", stream=False) as t:
            t.finish(status=200, prompt_tokens=3, completion_tokens=5)
        sink = live.get_recorder().sink
        assert isinstance(sink, ArchiveWriter)
        assert sink.wait_until_drained(timeout_s=30)
        # The writer thread connected to the test database and wrote there.
        self.assertEqual(FinishedRequest.objects.filter(model="host-model").count(), 1)


class HostViews(TestCase):
    def test_the_host_keeps_working_with_a_recorder_running(self) -> None:
        before = live.get_recorder().stats.recorded_total
        with live.track(model="another-model") as t:
            t.finish(status=200)
        self.assertEqual(live.get_recorder().stats.recorded_total, before + 1)
