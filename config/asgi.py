"""ASGI entry point (daphne). HTTP goes through Django; Channels routes the protocols."""

from django.core.asgi import get_asgi_application

from config.shape import settings_select

settings_select()
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

application = ProtocolTypeRouter({"http": django_asgi_app})
