from __future__ import annotations

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class HostAppConfig(AppConfig):
    name = "tests.host.hostapp"
    label = "hostapp"
    default_auto_field = "django.db.models.BigAutoField"


class HostAdminConfig(admin_apps.AdminConfig):
    """Django's admin with the host's own AdminSite as ``admin.site``."""

    default = False

    default_site = "tests.host.hostapp.admin.HostAdminSite"
