"""A host control plane the app is added to, configured as an adopting team's would be.

Custom user (UUID key, e-mail login), its own AdminSite, DRF configured globally
(Token + Session auth, IsAuthenticated, LimitOffset pagination, JSON only, URL-path
versioning without a default, throttles), drf-spectacular with its own settings,
German and Berlin time. ``settings_<variant>.py`` change one thing each.
"""

from __future__ import annotations

import os

import dj_database_url

SECRET_KEY = "host-project-tests-" + "x" * 50
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost", "v1.testserver"]

INSTALLED_APPS = [
    "tests.host.hostapp.apps.HostAdminConfig",  # the host's AdminSite as admin.site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "tests.host.hostapp",
    "ferrox_stats",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "tests.host.urls"
AUTH_USER_MODEL = "hostapp.User"

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

DATABASES = {"default": dj_database_url.config(default="sqlite:///:memory:")}
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # One test database per process, so concurrent runs on one server never collide.
    DATABASES["default"]["TEST"] = {"NAME": f"test_ferrox_host_{os.getpid()}"}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "Europe/Berlin"
LANGUAGE_CODE = "de"
USE_I18N = True
STATIC_URL = "static/"
STATIC_ROOT = os.path.join(os.path.dirname(__file__), "static-root")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 2,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_VERSIONING_CLASS": "rest_framework.versioning.URLPathVersioning",
    "ALLOWED_VERSIONS": ["v1"],
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {"anon": "2/day", "user": "3/day"},
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["rest_framework.filters.OrderingFilter"],
    "URL_FORMAT_OVERRIDE": None,
    "COMPACT_JSON": False,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Host control plane API",
    "VERSION": "7.3.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": False,
    "SWAGGER_UI_SETTINGS": {"docExpansion": "host-doc-expansion"},
}

FERROX_STATS = {"REPLICA": "host-replica"}
# The README's recipe for a host's tests: the recorder stops before the test databases go.
TEST_RUNNER = "ferrox_stats.testing.DiscoverRunner"
