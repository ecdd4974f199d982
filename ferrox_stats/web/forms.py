"""The history view's filters and keyset position, parsed strictly from the query string."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.http import QueryDict
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..archive.queries import Cursor
from ..archive.rows import MAX_AT_MS, MAX_BIGINT, MIN_AT_MS
from ..ingest import describe_name
from ..models import OUTCOMES

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

OLDER = "older"
NEWER = "newer"
# The fields ``FinishedRequest.objects.matching`` takes, in the form's order.
MATCHED = ("model", "route", "status", "outcome", "finish_reason", "client", "replica")


class ZoneDateTimeField(forms.DateTimeField):
    """A ``datetime-local`` value read in the active time zone (the one the pages show
    times in), returned in UTC."""

    input_formats = ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"]
    widget = forms.DateTimeInput(
        format="%Y-%m-%dT%H:%M:%S", attrs={"type": "datetime-local", "step": "1"}
    )

    def to_python(self, value: Any) -> datetime | None:
        if value in self.empty_values:
            return None
        if not isinstance(value, datetime):
            # BaseTemporalField tries the formats; DateTimeField would also apply the
            # current time zone, but only when USE_TZ is on.
            parsed = forms.fields.BaseTemporalField.to_python(self, value)
            if not isinstance(parsed, datetime):
                return None
            value = parsed
        if value.tzinfo is None:
            try:
                value = timezone.make_aware(value, timezone.get_current_timezone())
            except (OverflowError, ValueError):
                raise forms.ValidationError(
                    self.error_messages["invalid"], code="invalid"
                ) from None
        moment: datetime = value.astimezone(UTC)
        return moment


def _text(label: StrOrPromise, max_length: int = 200) -> forms.CharField:
    return forms.CharField(label=label, required=False, max_length=max_length, strip=True)


def refuse_unknown(form: forms.Form) -> None:
    """An error on ``form`` naming the query parameters it has no field for: a misspelt
    filter would otherwise show every row as if it had filtered them."""
    unknown = sorted(set(form.data) - set(form.fields))
    if unknown:
        names = ", ".join(dict.fromkeys(describe_name(name) for name in unknown))
        message = ngettext(
            "Unknown query parameter %(names)s; this page accepts: %(known)s.",
            "Unknown query parameters %(names)s; this page accepts: %(known)s.",
            len(unknown),
        )
        form.add_error(None, message % {"names": names, "known": ", ".join(sorted(form.fields))})


class HistoryForm(forms.Form):
    since = ZoneDateTimeField(label="From", required=False)
    until = ZoneDateTimeField(label="Until", required=False)
    model = _text(_("Model"))
    route = _text(_("Route"))
    status = forms.IntegerField(
        label=_("HTTP status"), required=False, min_value=100, max_value=599
    )
    outcome = forms.ChoiceField(
        label=_("Outcome"), required=False, choices=[("", _("any")), *OUTCOMES]
    )
    finish_reason = _text(_("Finish reason"), 64)
    client = _text(_("Client"))
    replica = _text(_("Replica"))
    # The keyset position; set by the paging links, never shown as inputs.
    cursor = forms.CharField(required=False, widget=forms.HiddenInput)
    direction = forms.ChoiceField(
        required=False, choices=[(OLDER, OLDER), (NEWER, NEWER)], widget=forms.HiddenInput
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        zone = timezone.get_current_timezone_name()
        self.fields["since"].label = gettext("From (%(zone)s)") % {"zone": zone}
        self.fields["until"].label = gettext("Until (%(zone)s)") % {"zone": zone}

    def clean_cursor(self) -> Cursor | None:
        raw = self.cleaned_data.get("cursor")
        if not raw:
            return None
        try:
            cursor = Cursor.decode(raw)
        except ValueError:
            cursor = None
        # A time no datetime can hold, or an id no row can have, is no position either.
        if cursor is None or not (
            MIN_AT_MS <= cursor.at_ms <= MAX_AT_MS and cursor.id <= MAX_BIGINT
        ):
            raise forms.ValidationError(
                gettext("This page link is not valid any more; start again from the newest rows.")
            )
        return cursor

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        refuse_unknown(self)
        since, until = cleaned.get("since"), cleaned.get("until")
        if since is not None and until is not None and since >= until:
            self.add_error("until", gettext("Until must be later than From."))
        return cleaned

    def filters(self) -> dict[str, Any]:
        """The ``matching()`` filters that were given (an empty field filters nothing)."""
        return {name: self.cleaned_data[name] for name in MATCHED if self.cleaned_data[name]}

    def page_query(self, cursor: Cursor | None = None, direction: str = OLDER) -> str:
        """This query string with the keyset position replaced: a paging link.

        Without a cursor, the link to the newest rows under the same filters.
        """
        query = QueryDict(mutable=True)
        for name in ("since", "until", *MATCHED):
            raw = self.data.get(name)
            if raw:
                query[name] = raw
        if cursor is not None:
            query["cursor"] = cursor.encode()
            query["direction"] = direction
        return query.urlencode()


class UsageForm(forms.Form):
    """The usage page's range and filters (``web.usage_page.RANGES``; key, model, replica)."""

    range = forms.ChoiceField(
        label=_("Range"),
        required=False,
        choices=[("24h", _("24 hours")), ("7d", _("7 days")), ("30d", _("30 days"))],
    )
    key = _text(_("API key"))
    model = _text(_("Model"))
    replica = _text(_("Replica"))

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        refuse_unknown(self)
        return cleaned

    def filters(self) -> dict[str, str]:
        """The usage filters that were given (an empty field filters nothing)."""
        return {name: self.cleaned_data[name] for name in USAGE_FILTERS if self.cleaned_data[name]}


# What the usage page filters by: dimensions of ``archive.usage.DIMENSIONS``.
USAGE_FILTERS = ("key", "model", "replica")
