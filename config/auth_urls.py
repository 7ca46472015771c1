"""``django.contrib.auth.urls``, with the login page's form limited
(``config.login_limits``): while a user name or an address is locked it says so."""

from django.contrib.auth import views
from django.urls import path

from config.login_limits import LimitedAuthenticationForm

urlpatterns = [
    path(
        "login/",
        views.LoginView.as_view(authentication_form=LimitedAuthenticationForm),
        name="login",
    ),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("password_change/", views.PasswordChangeView.as_view(), name="password_change"),
    path(
        "password_change/done/",
        views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("password_reset/", views.PasswordResetView.as_view(), name="password_reset"),
    path(
        "password_reset/done/",
        views.PasswordResetDoneView.as_view(),
        name="password_reset_done",
    ),
    path(
        "reset/<uidb64>/<token>/",
        views.PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "reset/done/",
        views.PasswordResetCompleteView.as_view(),
        name="password_reset_complete",
    ),
]
