"""The host's own documents, named as a host would name them: ``Stats``, ``Error``."""

from __future__ import annotations

from rest_framework import serializers

from .models import Note


class StatsSerializer(serializers.Serializer):  # type: ignore[type-arg]
    notes = serializers.IntegerField()


class ErrorSerializer(serializers.Serializer):  # type: ignore[type-arg]
    detail = serializers.CharField()


class NoteSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Note
        fields = ["id", "text"]
