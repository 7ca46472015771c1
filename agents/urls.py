from django.urls import path

from agents import views

app_name = "agents"
urlpatterns = [path("", views.chat, name="chat")]
