"""A host project's settings: ferrox_stats installed with its default archive sink.

Run by tests/test_host_suite.py under ``manage.py test`` and pytest-django.
"""

from __future__ import annotations

import os

import dj_database_url

SECRET_KEY = "hostsuite"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
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
    "hostapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "hostsite.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
# Persistent connections, as production settings often have them.
DATABASES = {"default": dj_database_url.config(default="sqlite:///:memory:", conn_max_age=60)}
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    DATABASES["default"]["TEST"] = {"NAME": f"test_hostsuite_{os.getpid()}"}
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The app's defaults, the archive writer included: what a host gets out of the box.
FERROX_STATS = {"REPLICA": "hostsuite"}

# The recipe from the README: stop the recorder before the test database is dropped.
# (pytest-django: pytest.ini loads ferrox_stats.testing.pytest.)
TEST_RUNNER = os.environ.get("HOSTSUITE_TEST_RUNNER", "ferrox_stats.testing.DiscoverRunner")
