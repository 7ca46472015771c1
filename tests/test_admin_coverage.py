"""Django admin covers every model of the project's apps."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin

PROJECT_APPS = ["agents", "traces", "policies", "reviews", "sandbox"]


@pytest.mark.parametrize("app_label", PROJECT_APPS)
def test_every_model_is_registered_in_admin(app_label: str) -> None:
    missing = [
        model.__name__
        for model in apps.get_app_config(app_label).get_models()
        if not admin.site.is_registered(model)
    ]
    assert missing == []
