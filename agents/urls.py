from django.urls import path

from agents import views

app_name = "agents"
urlpatterns = [
    path("", views.chat, name="chat"),
    path("tools/", views.tool_list, name="tools"),
    path("tools/<int:tool_id>/", views.tool_edit, name="tool_edit"),
    path("tools/<int:tool_id>/<slug:action>/", views.tool_action, name="tool_action"),
]
