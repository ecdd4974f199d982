"""An index that covers extra columns where the database can, silently elsewhere.

Django's ``Index(include=...)`` warns (``models.W040``) on every database without
covering indexes, SQLite among them: a host that runs ``check --fail-level WARNING``
on SQLite would fail on our app for an optimisation it cannot use anyway. The
columns to cover live here under another name, so the check does not see them, and
are handed to a plain ``Index(include=...)`` only when the schema editor's database
supports INCLUDE (PostgreSQL); elsewhere the index is made without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import models


class CoveringIndex(models.Index):
    def __init__(
        self, *args: Any, covering: tuple[str, ...] | list[str] = (), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.covering = tuple(covering)

    def deconstruct(self) -> tuple[str, Sequence[Any], dict[str, Any]]:
        _, args, kwargs = super().deconstruct()
        kwargs["covering"] = self.covering
        return "ferrox_stats.indexes.CoveringIndex", args, kwargs

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        if not schema_editor.connection.features.supports_covering_indexes:
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        _, args, index_kwargs = super().deconstruct()
        index = models.Index(*args, include=self.covering, **index_kwargs)
        return index.create_sql(model, schema_editor, using=using, **kwargs)
