from django.urls import path

from reviews import dashboards

app_name = "dashboards"
urlpatterns = [
    path("", dashboards.overview, name="overview"),
    path("failures/", dashboards.failures, name="failures"),
    path("data/kpis.json", dashboards.kpis_json, name="kpis-json"),
    path("data/runs.json", dashboards.runs_json, name="runs-json"),
    path("data/failures.json", dashboards.failures_json, name="failures-json"),
    path("data/breakdown.json", dashboards.breakdown_json, name="breakdown-json"),
]
