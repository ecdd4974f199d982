"""The models and their migrations agree."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_makemigrations_finds_nothing_to_do() -> None:
    out = StringIO()
    call_command("makemigrations", "ferrox_stats", "--check", "--dry-run", stdout=out)
    assert out.getvalue() == "No changes detected in app 'ferrox_stats'\n"
