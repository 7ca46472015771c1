"""Root URL configuration."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from config.api_urls import api_not_found
from config.health import healthz
from traces.api.otlp import OtlpTracesView


def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """Browsers ask for /favicon.ico whatever the page's <link rel="icon"> says. The static
    name is looked up per request: at import, a production manifest may not exist yet."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("favicon.ico", favicon),
    path("", include("agents.urls")),
    path("traces/", include("traces.urls")),
    path("reviews/", include("reviews.urls")),
    path("dashboards/", include("reviews.dashboard_urls")),
    path("policies/", include("policies.urls")),
    path("admin/", admin.site.urls),
    path("accounts/", include("config.auth_urls")),
    path("api/", include("config.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    re_path(r"^api/", api_not_found),
    path("sandbox/api/", include("sandbox.urls")),
    # OTLP/HTTP's fixed path: exporters append /v1/traces to OTEL_EXPORTER_OTLP_ENDPOINT.
    path("otlp/v1/traces", OtlpTracesView.as_view(), name="otlp-traces"),
]

handler404 = "config.errors.page_not_found"
handler500 = "config.errors.server_error"
