"""Mounts only the sandbox, at the prefix config/urls.py uses.

These tests then do not depend on the routes of apps other engineers are changing.
"""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("sandbox/api/", include("sandbox.urls")),
]
