"""How the app's views are described in OpenAPI, and where.

The app's schema is its own (``schema.SchemaView``). A host's drf-spectacular schema
leaves the app's views out entirely — they are skipped before the host's generator
looks at them, so the host's paths, components, operationIds and tags are the same
with and without the app — unless the host sets ``FERROX_STATS["HOST_SCHEMA"]``.
Wherever they are described, every component is named ``FerroxStats…``, every
operationId starts ``ferrox_stats_`` and every operation carries the ``ferrox_stats``
tag, so nothing collides with the host's own names.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import extend_schema

from ..conf import conf

COMPONENT_PREFIX = "FerroxStats"
OPERATION_PREFIX = "ferrox_stats_"
TAG = "ferrox_stats"

# True while the app's own schema is generated (in this thread or task only).
_describing_app: ContextVar[bool] = ContextVar("ferrox_stats_describing_app", default=False)


@contextmanager
def describing_app() -> Iterator[None]:
    token = _describing_app.set(True)
    try:
        yield
    finally:
        _describing_app.reset(token)


def shown() -> bool:
    """Whether a schema being generated now describes the app's views."""
    return _describing_app.get() or conf.HOST_SCHEMA


class FerroxAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema with the app's names: prefixed components, its tag."""

    def get_serializer_name(self, serializer: Any, direction: Any) -> str:
        name = str(super().get_serializer_name(serializer, direction))
        return name if name.startswith(COMPONENT_PREFIX) else COMPONENT_PREFIX + name

    def get_tags(self) -> list[str]:
        return [TAG]


class AppOnlySchema:
    """A view's ``schema``: the app's AutoSchema where the app is described, else None.

    DRF's and drf-spectacular's endpoint enumerators skip a view whose class-level
    ``schema`` is None, so a host's generator never sees the app's views (nor counts
    their paths when it guesses the common path prefix it derives tags from).
    """

    def __init__(self) -> None:
        self.inner = FerroxAutoSchema()

    def __get__(self, instance: Any, owner: Any) -> Any:
        if not shown():
            return None
        return self.inner.__get__(instance, owner)

    def __set__(self, instance: Any, value: Any) -> None:
        # drf-spectacular sets a per-method schema (extend_schema) on the view instance.
        self.inner.__set__(instance, value)


class AppSchemaGenerator(SchemaGenerator):
    """Generates the app's own schema: while it runs, the app's views are described."""

    def get_schema(self, request: Any = None, public: bool = False) -> Any:
        with describing_app():
            return super().get_schema(request=request, public=public)


def documented(**kwargs: Any) -> Any:
    """``extend_schema`` on the app's AutoSchema, whatever DEFAULT_SCHEMA_CLASS says.

    An ``operation_id`` is prefixed with ``ferrox_stats_``.
    """
    if "operation_id" in kwargs:
        kwargs["operation_id"] = OPERATION_PREFIX + kwargs["operation_id"]

    def decorate(method: Any) -> Any:
        method.schema = FerroxAutoSchema
        return extend_schema(**kwargs)(method)

    return decorate


class NamedChoices(OpenApiSerializerFieldExtension):
    target_class = "ferrox_stats.api.serializers.NamedChoiceField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> Any:
        name = COMPONENT_PREFIX + self.target.component_name
        component = ResolvedComponent(
            name=name,
            type=ResolvedComponent.SCHEMA,
            object=name,
            schema={"type": "string", "enum": list(self.target.choices)},
        )
        auto_schema.registry.register_on_missing(component)
        return component.ref
