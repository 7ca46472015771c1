"""ASGI entry point of the sandbox shop's own server process (bin/serve's ``sandbox`` child).

The same Django project, served as an external API would be: plain HTTP, no WebSocket
routes, and none of the web process's background work (no in-process worker, no stuck-run
sweeper, no periodic jobs), so two processes never sweep the same runs.
"""

from django.core.asgi import get_asgi_application

from config.shape import asgi_settings_select

asgi_settings_select()  # and no persistent database connections (see there)
application = get_asgi_application()
