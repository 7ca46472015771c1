from django.apps import AppConfig


class ReviewsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "reviews"

    def ready(self) -> None:
        # reviews sits above agents: it listens to the runtime's events and writes the audit
        # rows, so agents never imports reviews.
        from agents.signals import customer_memory_changed, tool_admin_changed
        from reviews.receivers import tool_admin_changed_audit

        tool_admin_changed.connect(
            tool_admin_changed_audit, dispatch_uid="reviews.tool_admin_changed_audit"
        )
        customer_memory_changed.connect(
            tool_admin_changed_audit, dispatch_uid="reviews.customer_memory_changed_audit"
        )
