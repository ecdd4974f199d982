"""The host project as deployed: what ``check --deploy`` asks of production settings."""

from __future__ import annotations

from .settings import *  # noqa: F403

SECURE_SSL_REDIRECT = True
SECURE_HSTS_SECONDS = 31_536_000
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECRET_KEY = "host-deploy-k3y-" + "q8Zr!vT2@mW5#pL9$xN4%bH7^cJ1&dF6*gK0(sY3)eU8" * 2
# A default version, so that the deploy check's schema describes the host's API.
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_VERSION": "v1"}  # noqa: F405
