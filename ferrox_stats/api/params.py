"""Query parameters, parsed strictly: a bad one is a 400 that names it."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.settings import api_settings

from ..ingest import describe_name

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


def only_known(request: Request, accepted: Iterable[str]) -> None:
    """A 400 naming every query parameter not in ``accepted``, and listing those that are.

    A misspelt filter (``sttus=500``) must not quietly answer with unfiltered rows.
    DRF's own ``?format=`` (``URL_FORMAT_OVERRIDE``) is always accepted. A name is
    echoed only when it is a plain identifier.
    """
    known = set(accepted)
    if override := api_settings.URL_FORMAT_OVERRIDE:
        known.add(override)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        names = ", ".join(dict.fromkeys(describe_name(name) for name in unknown))
        plural = "s" if len(unknown) > 1 else ""
        raise ValidationError(
            {
                "query": [
                    f"Unknown query parameter{plural} {names}; "
                    f"this endpoint accepts: {', '.join(sorted(known))}."
                ]
            }
        )
