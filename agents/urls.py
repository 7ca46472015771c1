from django.urls import path

from agents import views

app_name = "agents"
urlpatterns = [
    path("", views.chat, name="chat"),
    path("chat/embed/", views.chat_embed, name="embed"),
    path("conversations/new/", views.conversation_new, name="conversation-new"),
    path("conversations/<str:session_id>/", views.conversation_open, name="conversation"),
    path("runs/<uuid:trace_id>/handover/", views.run_handover, name="handover"),
]
