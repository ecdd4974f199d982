"""Settings for the test suite: the app mounted under a prefix, DATABASE_URL or SQLite."""

from __future__ import annotations

import os

import dj_database_url

SECRET_KEY = "ferrox-stats-tests"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]

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
    "loadgen",  # manage.py ferrox_stats_loadgen: a development tool of the repository
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"

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

# The suite runs once on SQLite and once on PostgreSQL (scripts/test.sh sets DATABASE_URL).
DATABASES = {"default": dj_database_url.config(default="sqlite:///:memory:")}
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # One test database per run, so concurrent runs on one server never drop each other's.
    DATABASES["default"]["TEST"] = {"NAME": f"test_ferrox_stats_{os.getpid()}"}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"

# Tests build archive writers and heartbeats explicitly; the recorder keeps records in
# memory (HEARTBEAT_S None: a test that turns the archive on gets no heartbeat thread
# writing rows behind the other tests' backs unless it asks for one).
FERROX_STATS = {"REPLICA": "test-replica", "ARCHIVE_SINK": None, "HEARTBEAT_S": None}
