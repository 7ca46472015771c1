from django.urls import path

from policies import views

app_name = "policies"
urlpatterns = [
    path("", views.policy_active, name="active"),
    path("versions/", views.policy_version_list, name="versions"),
    path("versions/<int:number>/", views.policy_version_tree, name="version"),
    path("versions/<int:number>/yaml/", views.policy_version_yaml, name="version-yaml"),
    path("diff/", views.policy_version_diff, name="diff"),
    path("strategies/<int:strategy_id>/", views.strategy_detail, name="strategy"),
    path("experiments/", views.experiment_list, name="experiments"),
    path("experiments/new/", views.experiment_new, name="experiment-new"),
    path("experiments/<int:experiment_id>/", views.experiment_detail, name="experiment"),
    path(
        "experiments/<int:experiment_id>/<slug:action>/",
        views.experiment_action,
        name="experiment-action",
    ),
    path("rollouts/", views.rollout_list, name="rollouts"),
    path("rollouts/<int:rollout_id>/", views.rollout_detail, name="rollout"),
    path("rollouts/<int:rollout_id>/series/", views.rollout_series_json, name="rollout-series"),
    path("rollouts/<int:rollout_id>/<slug:action>/", views.rollout_action, name="rollout-action"),
]
