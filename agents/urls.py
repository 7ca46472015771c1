from django.urls import path

from agents import views

app_name = "agents"
urlpatterns = [
    path("", views.chat, name="chat"),
    path("chat/embed/", views.chat_embed, name="embed"),
    path("conversations/new/", views.conversation_new, name="conversation-new"),
    path("conversations/<str:session_id>/", views.conversation_open, name="conversation"),
    path("runs/<uuid:trace_id>/handover/", views.run_handover, name="handover"),
    path("tools/", views.tool_list, name="tools"),
    path("customers/<str:customer_id>/memory/", views.customer_memory, name="customer_memory"),
    path(
        "customers/<str:customer_id>/memory/<int:fact_id>/delete/",
        views.customer_memory_delete,
        name="customer_memory_delete",
    ),
    path("tools/import/", views.tool_import, name="tool_import"),
    path("tools/<int:tool_id>/", views.tool_edit, name="tool_edit"),
    path("tools/<int:tool_id>/<slug:action>/", views.tool_action, name="tool_action"),
]
