"""The host's own API, on the project's global DRF defaults."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ferrox_stats import live

from .models import Note
from .serializers import ErrorSerializer, NoteSerializer, StatsSerializer


class StatsView(APIView):
    @extend_schema(responses={200: StatsSerializer, 403: ErrorSerializer})
    def get(self, request: Request, version: str | None = None) -> Response:
        return Response({"notes": Note.objects.count(), "version": request.version})


class NoteViewSet(viewsets.ModelViewSet):  # type: ignore[type-arg]
    queryset = Note.objects.order_by("id")
    serializer_class = NoteSerializer


class InferView(APIView):
    """The host's own inference endpoint, recording through the app's in-process API."""

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT})
    def post(self, request: Request, version: str | None = None) -> Response:
        with live.track(route="/host/infer", model="host-model") as tracked:
            tracked.tokens(prompt=5, completion=2)
            tracked.finish(status=200, finish_reason="stop")
        return Response({"ok": True})
