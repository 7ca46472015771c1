from django.urls import path

from traces import views

app_name = "traces"
urlpatterns = [
    path("", views.trace_list, name="list"),
    path("<uuid:trace_id>/", views.trace_detail, name="detail"),
    path("<uuid:trace_id>/run/", views.trace_steps_partial, name="run-partial"),
    path("jobs/", views.job_list, name="jobs"),
    path("jobs/partial/", views.job_list_partial, name="jobs-partial"),
]
