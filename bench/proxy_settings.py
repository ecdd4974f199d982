"""Settings of the control plane ``bench/proxy.py`` serves the pass-through from.

The demo project's (``project/settings.py``) with what a benchmark needs instead:
``DEBUG`` off, a SQLite file in the bench's temp directory, no demo traffic, the
pass-through's URLs as the root urlconf, and one upstream, the simulated engine.
The archive keeps its default sink, so archiving each request is part of the cost.

Read from the environment (``bench/proxy.py`` sets both):

- ``FERROX_BENCH_DB``: the SQLite file;
- ``FERROX_BENCH_ENGINE_URL``: the engine's base URL, ``http://127.0.0.1:<port>/v1``.
"""

from __future__ import annotations

import os

SECRET_KEY = "ferrox-stats-bench-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "ferrox_stats",
]

# The demo's stack without its demo-only traffic middleware: what a control plane that
# adds ferrox_stats to an ordinary Django project puts in front of the pass-through.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# The pass-through's own urlconf as the root: the URLs that
# ``path("", include("ferrox_stats.proxy.urls"))`` gives, one resolver level less.
ROOT_URLCONF = "ferrox_stats.proxy.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("FERROX_BENCH_DB", "/tmp/pxbench_control_plane.sqlite3"),
        "CONN_MAX_AGE": 60,
        # As the demo: the archiver thread and token checks write at once, so take the
        # write lock when a transaction begins and wait for it.
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
    }
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

FERROX_STATS = {
    "REPLICA": "bench-control-plane",
    "PROXY_UPSTREAMS": {
        "sim": {
            "BASE_URL": os.environ.get("FERROX_BENCH_ENGINE_URL", "http://127.0.0.1:8001/v1"),
            "API_KEY": None,
        }
    },
}
