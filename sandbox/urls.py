"""Routes of the sandbox shop API, mounted at /sandbox/api/."""

from django.urls import path, re_path

from sandbox import views

app_name = "sandbox"

urlpatterns = [
    path("openapi.json", views.openapi_document, name="openapi"),
    path("users/<str:user_id>", views.user_detail, name="users"),
    path("users/<str:user_id>/orders", views.user_orders, name="user_orders"),
    # <str:> matches the decoded segment, so "%23W1234567" arrives as "#W1234567".
    path("orders/<str:order_id>", views.order_detail, name="orders"),
    path("products", views.product_search, name="products"),
    path("products/<str:product_id>", views.product_detail, name="product_detail"),
    path("skus/<str:sku>", views.sku_detail, name="skus"),
    path("inventory/<str:sku>", views.inventory_detail, name="inventory"),
    path("promotions", views.promotion_list, name="promotions"),
    path("returns", views.return_create, name="returns_create"),
    path("returns/<str:order_id>", views.return_status, name="returns"),
    path("articles", views.article_search, name="articles"),
    path("articles/<str:slug>", views.article_detail, name="article_detail"),
    path("_faults", views.faultrule_index, name="faults"),
    path("_faults/<str:endpoint>", views.faultrule_detail, name="fault_detail"),
    path("_drifts", views.drift_index, name="drifts"),
    path("_drifts/<int:drift_id>", views.drift_detail, name="drift_detail"),
    # Anything else answers in the API's JSON error shape instead of Django's HTML 404.
    re_path(r"^(?P<rest>.*)$", views.unknown_endpoint, name="unknown"),
]
