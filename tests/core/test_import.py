"""The core and the package root import no Django (SPEC §1.3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPORT_FRAMEWORK_MODULES = (
    "import sys; "
    "print(sorted(m for m in sys.modules if m.startswith(('django', 'rest_framework'))))"
)


@pytest.mark.parametrize("module", ["ferrox_stats.core", "ferrox_stats"])
def test_import_loads_no_django_or_drf(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}; {REPORT_FRAMEWORK_MODULES}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"
