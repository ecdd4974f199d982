"""The OpenAI-compatible pass-through: clients call the control plane as they would an
engine, the request goes on to a configured upstream, and every one is recorded.

Mount ``ferrox_stats.proxy.urls`` (``/v1/chat/completions``, ``/v1/completions``,
``/v1/embeddings``, ``/v1/models``) and serve the project under ASGI.
"""
