"""Local and embedded-demo settings: SQLite and an in-process worker unless env says otherwise."""

from .base import *  # noqa: F403
from .base import env

DEBUG = env.bool("DJANGO_DEBUG", default=True)
