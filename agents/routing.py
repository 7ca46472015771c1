"""WebSocket routes: live steps of one run."""

from django.urls import path

from agents.consumers import RunConsumer

websocket_urlpatterns = [
    path("ws/runs/<uuid:trace_id>/", RunConsumer.as_asgi()),
]
