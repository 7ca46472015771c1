"""ASGI entry point (daphne). HTTP goes through Django; Channels routes the protocols."""

from django.core.asgi import get_asgi_application

from config.shape import asgi_settings_select

asgi_settings_select()  # and no persistent database connections (see there)
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from agents.inprocess import embedded_worker_start  # noqa: E402
from agents.routing import websocket_urlpatterns  # noqa: E402

# The embedded shape has no beat: its in-process worker sweeps stuck runs itself.
embedded_worker_start()

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # Session auth like the pages; the Origin must be an allowed host (no cross-site
        # page can open a socket with the user's cookies).
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
