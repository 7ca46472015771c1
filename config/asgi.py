"""ASGI entry point (daphne). HTTP goes through Django; Channels routes the protocols."""

from django.core.asgi import get_asgi_application

from config.shape import settings_select

settings_select()
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from agents.inprocess import embedded_worker_start  # noqa: E402

# The embedded shape has no beat: its in-process worker sweeps stuck runs itself.
embedded_worker_start()

application = ProtocolTypeRouter({"http": django_asgi_app})
