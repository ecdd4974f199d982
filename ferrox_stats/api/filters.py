"""The history filters: django-filter parses and documents them; the archive queries apply them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import django_filters
from rest_framework.exceptions import ValidationError

from ..archive.rows import MAX_AT_MS, MIN_AT_MS, at_ms_to_datetime
from ..models import OUTCOMES, FinishedRequest


class HistoryFilter(django_filters.FilterSet):
    since = django_filters.NumberFilter(
        method="filter_window", help_text="Finished at or after this epoch ms."
    )
    until = django_filters.NumberFilter(
        method="filter_window", help_text="Finished before this epoch ms."
    )
    model = django_filters.CharFilter(method="filter_field", help_text="Served model.")
    route = django_filters.CharFilter(
        method="filter_field", help_text="Route, e.g. /v1/chat/completions."
    )
    status = django_filters.NumberFilter(method="filter_field", help_text="HTTP status.")
    outcome = django_filters.ChoiceFilter(
        choices=OUTCOMES, method="filter_field", help_text="ok, error or aborted."
    )
    aborted = django_filters.CharFilter(method="filter_field", help_text="Abort reason.")
    finish_reason = django_filters.CharFilter(method="filter_field", help_text="Finish reason.")
    client = django_filters.CharFilter(method="filter_field", help_text="Client address or name.")
    replica = django_filters.CharFilter(method="filter_field", help_text="Replica that served it.")

    class Meta:
        model = FinishedRequest
        fields: list[str] = []

    def filter_window(self, queryset: Any, name: str, value: Decimal | None) -> Any:
        if value is None:
            return queryset
        at_ms = _integer(value, MIN_AT_MS, MAX_AT_MS)
        if at_ms is None:
            raise ValidationError({name: [f"{name} must be epoch milliseconds."]})
        moment = at_ms_to_datetime(at_ms)
        return queryset.window(since=moment) if name == "since" else queryset.window(until=moment)

    def filter_field(self, queryset: Any, name: str, value: Any) -> Any:
        if value is None or value == "":
            return queryset
        if name == "status":
            value = _integer(value, 100, 599)
            if value is None:
                raise ValidationError({"status": ["status must be an HTTP status (100-599)."]})
        return queryset.matching({name: value})


def _integer(value: Decimal, lowest: int, highest: int) -> int | None:
    """``value`` as an integer in range, or ``None`` (fractions, NaN and infinities too)."""
    if not value.is_finite() or value != value.to_integral_value():
        return None
    number = int(value)
    return number if lowest <= number <= highest else None
