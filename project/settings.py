"""Settings of the demo control plane: an existing Django project that adds ferrox_stats.

Not packaged. ``DATABASE_URL`` picks the database (PostgreSQL in production);
without it the demo runs on a SQLite file beside this project.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent

# The demo's key is public on purpose; a real control plane reads its own from the environment.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "ferrox-stats-demo-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")

if not DEBUG:
    # Production (DJANGO_DEBUG=0) is served over HTTPS only: plain HTTP is redirected,
    # cookies never travel in clear, and browsers are told to stay on HTTPS (HSTS).
    # Behind a proxy that terminates TLS, DJANGO_SECURE_PROXY_SSL_HEADER=1 trusts its
    # X-Forwarded-Proto (only when the proxy sets it on every request). HSTS is hard to
    # take back: start with a small DJANGO_HSTS_SECONDS and raise it once HTTPS is known
    # good; DJANGO_HSTS_INCLUDE_SUBDOMAINS=0 / DJANGO_HSTS_PRELOAD=0 opt out (and
    # `check --deploy` then says so).
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = os.environ.get("DJANGO_HSTS_INCLUDE_SUBDOMAINS", "1") == "1"
    SECURE_HSTS_PRELOAD = os.environ.get("DJANGO_HSTS_PRELOAD", "1") == "1"
    if os.environ.get("DJANGO_SECURE_PROXY_SSL_HEADER") == "1":
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

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
    "loadgen",  # manage.py ferrox_stats_loadgen (the repository's, not in the wheel)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "project.traffic.start_on_first_request",
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "project.context_processors.links",
            ],
        },
    },
]

# The demo serves under ASGI (uvicorn project.asgi:application): the pass-through needs it.
ASGI_APPLICATION = "project.asgi.application"
WSGI_APPLICATION = "project.wsgi.application"

DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{BASE_DIR / 'demo.sqlite3'}", conn_max_age=60
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The archiver thread and ingest requests write at once: take the write lock when a
    # transaction begins and wait for it, rather than fail with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 20}
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"

FERROX_STATS = {
    "REPLICA": os.environ.get("FERROX_STATS_REPLICA") or "demo-control-plane",
    # The pass-through (/v1/...) forwards every model to one engine: in the demo, the
    # simulated one that scripts/demo.sh starts (python -m loadgen.engine).
    "PROXY_UPSTREAMS": {
        "demo-engine": {
            "BASE_URL": os.environ.get("FERROX_DEMO_ENGINE_URL", "http://127.0.0.1:8001/v1"),
            "API_KEY": None,
        },
    },
}

# The demo server plays plausible traffic through its in-process tracker, from its first
# request on, for DEMO_TRAFFIC_S seconds (project/traffic.py).
DEMO_TRAFFIC = os.environ.get("FERROX_DEMO_TRAFFIC", "1") == "1"
DEMO_TRAFFIC_S = float(os.environ.get("FERROX_DEMO_TRAFFIC_S", "3600"))
