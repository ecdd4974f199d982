"""The host's own AdminSite; every app's admin, ferrox_stats' too, registers on it."""

from __future__ import annotations

from django.contrib import admin

from .models import Note, User


class HostAdminSite(admin.AdminSite):
    site_header = "Host control plane"


admin.site.register(User)
admin.site.register(Note)
