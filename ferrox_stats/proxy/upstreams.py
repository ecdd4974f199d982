"""Which upstream engine a pass-through request goes to, read from ``PROXY_UPSTREAMS``."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..conf import conf

# In MODELS, or MODELS left out: the upstream for every model no other one lists.
CATCH_ALL = "*"
KEYS = frozenset({"BASE_URL", "API_KEY", "MODELS", "STREAM_USAGE"})


class UpstreamConfigError(ValueError):
    """``PROXY_UPSTREAMS`` cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class Upstream:
    """One engine the pass-through forwards to."""

    name: str
    # The engine's OpenAI base URL, with its /v1 and without a trailing slash.
    base_url: str
    # Sent upstream as "Authorization: Bearer …"; None sends no credentials.
    api_key: str | None = field(repr=False)
    # The models routed here; empty: every model no other upstream lists.
    models: frozenset[str]
    # Whether a streamed request asks this upstream for a usage chunk.
    stream_usage: bool

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path}"


@dataclass(frozen=True, slots=True)
class Routing:
    """The configured upstreams, and which one serves a model."""

    upstreams: tuple[Upstream, ...]
    by_model: Mapping[str, Upstream]
    fallback: Upstream | None

    def for_model(self, model: str) -> Upstream | None:
        return self.by_model.get(model, self.fallback)


def parse(raw: Any) -> Routing:
    """Validate ``PROXY_UPSTREAMS`` and build its routing; ``UpstreamConfigError`` if bad."""
    if not isinstance(raw, Mapping):
        raise UpstreamConfigError(f"must be a dict of upstreams by name, got {type(raw).__name__}")
    upstreams = tuple(_upstream(name, spec) for name, spec in raw.items())
    by_model: dict[str, Upstream] = {}
    fallbacks = [upstream for upstream in upstreams if not upstream.models]
    if len(fallbacks) > 1:
        names = ", ".join(repr(upstream.name) for upstream in fallbacks)
        raise UpstreamConfigError(f"only one upstream may take every model; {names} both do")
    for upstream in upstreams:
        for model in upstream.models:
            if model in by_model:
                raise UpstreamConfigError(
                    f"model {model!r} is listed by {by_model[model].name!r} and {upstream.name!r}"
                )
            by_model[model] = upstream
    return Routing(upstreams, by_model, fallbacks[0] if fallbacks else None)


def _upstream(name: Any, spec: Any) -> Upstream:
    if not isinstance(name, str) or not name:
        raise UpstreamConfigError(f"an upstream's name must be a non-empty string, got {name!r}")
    if not isinstance(spec, Mapping):
        raise UpstreamConfigError(f"upstream {name!r} must be a dict with a BASE_URL")
    unknown = set(spec) - KEYS
    if unknown:
        raise UpstreamConfigError(f"upstream {name!r} has unknown keys {sorted(unknown)}")
    base_url = spec.get("BASE_URL")
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise UpstreamConfigError(f"upstream {name!r} needs BASE_URL, an http(s) URL")
    api_key = spec.get("API_KEY")
    if api_key is not None and (not isinstance(api_key, str) or not api_key):
        raise UpstreamConfigError(f"upstream {name!r}: API_KEY must be a non-empty string or None")
    models = spec.get("MODELS", [CATCH_ALL])
    if isinstance(models, str) or not all(isinstance(m, str) and m for m in models):
        raise UpstreamConfigError(f"upstream {name!r}: MODELS must be a list of model names")
    stream_usage = spec.get("STREAM_USAGE", True)
    if not isinstance(stream_usage, bool):
        raise UpstreamConfigError(f"upstream {name!r}: STREAM_USAGE must be True or False")
    listed = frozenset(models)
    return Upstream(
        name=name,
        base_url=base_url.rstrip("/"),
        api_key=api_key,
        models=frozenset() if CATCH_ALL in listed else listed,
        stream_usage=stream_usage,
    )


_parsed: tuple[Any, Routing] | None = None


def routing() -> Routing:
    """The routing for the current settings (parsed again only when they change)."""
    global _parsed
    raw = conf.PROXY_UPSTREAMS
    cached = _parsed
    if cached is not None and cached[0] == raw:
        return cached[1]
    parsed = parse(raw)
    # A deep copy: settings changed in place must not look unchanged.
    _parsed = (copy.deepcopy(raw), parsed)
    return parsed
