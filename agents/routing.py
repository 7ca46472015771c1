"""WebSocket routes of the runtime (mounted by ``config/asgi.py``)."""

from django.urls import path

from agents.consumers import RunStreamConsumer

websocket_urlpatterns = [
    path("ws/runs/<uuid:trace_id>/", RunStreamConsumer.as_asgi(), name="run-stream"),
]
