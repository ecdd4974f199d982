"""The host project with DRF's QueryParameterVersioning as its global versioning class."""

from __future__ import annotations

from .settings import *  # noqa: F403

REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_VERSIONING_CLASS": "rest_framework.versioning.QueryParameterVersioning",
}
