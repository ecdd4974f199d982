"""A paginator that never counts the whole archive: its count stops at a cap."""

from __future__ import annotations

from math import ceil
from typing import Any

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property


class CappedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Counts at most ``cap + 1`` rows, so a page costs the same at 10 rows or 10M.

    ``COUNT(*)`` over a large PostgreSQL table reads every row (MVCC keeps no row
    count), which is what makes Django's changelist slow on big tables. Here the count
    runs over a ``LIMIT cap + 1`` subquery instead. ``capped`` says the true count is
    larger; pages then cover the first ``cap`` rows (narrow the list to see others).
    """

    cap = 10_000

    @cached_property
    def count(self) -> int:
        """The number of rows, or ``cap + 1`` when there are more than ``cap``."""
        rows: Any = self.object_list
        if isinstance(rows, QuerySet):
            # No ORDER BY: any cap + 1 rows answer "are there more than cap?".
            return int(rows.order_by().values("pk")[: self.cap + 1].count())
        return min(len(rows), self.cap + 1)

    @property
    def capped(self) -> bool:
        return self.count > self.cap

    @cached_property
    def num_pages(self) -> int:
        if self.capped:
            # The sentinel row past the cap only says "more": it gets no page of its own.
            return ceil(self.cap / int(self.per_page))
        return int(super().num_pages)
