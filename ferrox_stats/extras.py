"""Which optional features can run here: each one's third-party library is an extra.

| feature | module | extra |
|---|---|---|
| the OpenAI-compatible pass-through | ``aiohttp`` | ``ferrox-stats[proxy]`` |
| the API's Swagger UI | ``drf_spectacular_sidecar`` | ``ferrox-stats[docs]`` |
| COPY into the archive on PostgreSQL | ``psycopg`` (3) | ``ferrox-stats[postgres]`` |
"""

from __future__ import annotations

from importlib.util import find_spec

__all__ = ["DOCS", "PROXY", "installed"]

PROXY = "aiohttp"
DOCS = "drf_spectacular_sidecar"


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    return find_spec(module) is not None
