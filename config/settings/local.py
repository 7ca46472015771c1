"""Local and embedded-demo settings: SQLite and an in-process worker unless env says otherwise.

Safe by default like production: DEBUG only with DJANGO_DEBUG=true, and the secret key comes
from the environment or `.env` (bin/serve writes a random one there on first start).
"""

import os

from config.shape import secret_key_required

from .base import *  # noqa: F403

SECRET_KEY = secret_key_required(os.environ)
