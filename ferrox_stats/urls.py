"""The app's URLs, mountable under any prefix: ``path("telemetry/", include("ferrox_stats.urls"))``.

Mounted at the root beside the Django admin, include these *before* ``admin.site.urls``
so ``admin/stats`` reaches the API rather than the admin's catch-all.
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path

app_name = "ferrox_stats"

urlpatterns: list[URLPattern | URLResolver] = [
    path("", include("ferrox_stats.api.urls")),
    path("dashboard/", include("ferrox_stats.web.urls")),
]
