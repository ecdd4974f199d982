"""The pass-through's URLs. Mount them where clients expect an OpenAI server, usually
the root: ``path("", include("ferrox_stats.proxy.urls"))`` gives ``/v1/chat/completions``,
and clients use ``base_url="https://control-plane.example/v1"``."""

from __future__ import annotations

from importlib import import_module

from django.urls import path

from ..extras import PROXY, installed

# Without aiohttp the routes answer 503 naming the extra (and check says E070), so the
# host's URLconf still loads.
views = import_module(f"{__package__}.{'views' if installed(PROXY) else 'unavailable'}")

app_name = "ferrox_stats_proxy"

urlpatterns = [
    path("v1/chat/completions", views.chat_completions, name="chat_completions"),
    path("v1/completions", views.completions, name="completions"),
    path("v1/embeddings", views.embeddings, name="embeddings"),
    path("v1/models", views.models, name="models"),
]
