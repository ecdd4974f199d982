"""Keeping the app's tables on their own database: ``TelemetryRouter``.

Add it to ``DATABASE_ROUTERS`` and name the alias in
``FERROX_STATS['ARCHIVE_DATABASE']``: the archive, its dead letters, the API tokens
and the instances' heartbeats are then read, written and migrated only there, and the
default database gets none of the app's tables. The host's own apps are left to the
host's other routers.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model

from .conf import conf

APP_LABEL = "ferrox_stats"


def _ours(model: type[Model] | Model) -> bool:
    return bool(model._meta.app_label == APP_LABEL)


class TelemetryRouter:
    """Routes every model of this app to ``FERROX_STATS['ARCHIVE_DATABASE']``.

    Answers ``None`` (no opinion) for every other app, so it combines with the host's
    routers in any order. With ``ARCHIVE_DATABASE = "default"`` it changes nothing.
    """

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return conf.ARCHIVE_DATABASE if _ours(model) else None

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return conf.ARCHIVE_DATABASE if _ours(model) else None

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        # The app's rows may refer to the host's (a token's owner) across aliases:
        # such a reference is kept by id, without a database constraint.
        return True if _ours(obj1) or _ours(obj2) else None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        # RunPython/RunSQL in the app's migrations (0006's sequence, function and
        # trigger) are asked with app_label only, so they follow the tables.
        if app_label == APP_LABEL:
            return db == conf.ARCHIVE_DATABASE
        return None
