"""The app config: ``ready()`` only wires checks; no queries, no threads."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks
from django.utils.translation import gettext_lazy as _


class FerroxStatsConfig(AppConfig):
    name = "ferrox_stats"
    verbose_name = _("Ferrox serving telemetry")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .checks import check_extras, check_settings

        checks.register(check_settings, "ferrox_stats")
        checks.register(check_extras, "ferrox_stats")
        from .mount_checks import check_routes_reach_the_app

        checks.register(check_routes_reach_the_app, "ferrox_stats", checks.Tags.urls)
