from django.urls import path

from reviews import views

app_name = "reviews"
urlpatterns = [
    path("", views.review_queue, name="queue"),
    path("<int:item_id>/", views.review_item_page, name="item"),
    path("<int:item_id>/decide/", views.review_decide, name="decide"),
    path("<int:item_id>/<slug:action>/", views.review_item_action, name="act"),
    path("feedback/<uuid:trace_id>/", views.run_feedback, name="feedback"),
    path("audit/", views.audit_log, name="audit"),
]
