"""Query parameters, parsed strictly: a bad one is a 400 that names it."""

from __future__ import annotations

import re

from rest_framework.exceptions import ValidationError
from rest_framework.request import Request

# ASCII digits only: str.isdigit() also accepts "²", which int() refuses.
DIGITS = re.compile(r"[0-9]{1,19}")
SIGNED_DIGITS = re.compile(r"-?[0-9]{1,19}")


def non_negative_int(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not DIGITS.fullmatch(raw):
        raise ValidationError({name: [f"{name} must be a non-negative integer."]})
    return int(raw)


def clamped_limit(request: Request, default: int, most: int) -> int:
    """``limit``, clamped to ``[1, most]``; only a non-integer is an error."""
    raw = request.query_params.get("limit")
    if raw is None or raw == "":
        return min(default, most)
    text = raw.strip()
    if not SIGNED_DIGITS.fullmatch(text):
        raise ValidationError({"limit": ["limit must be an integer."]})
    return max(1, min(int(text), most))
