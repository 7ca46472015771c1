from django.apps import AppConfig
from django.db.models import QuerySet


class ReviewsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "reviews"

    def ready(self) -> None:
        # reviews sits above agents and policies: it listens to the runtime's events and
        # writes the audit rows, so agents never imports reviews.
        from agents.signals import customer_memory_changed, tool_admin_changed
        from policies.hooks import review_records_register
        from policies.signals import (
            audit_event,
            review_requested,
            strategy_auto_merged,
            strategy_evidence_added,
        )
        from reviews.receivers import (
            DatabaseReviewRecords,
            audit_record,
            review_item_open,
            review_items_close_auto_merged,
            review_items_reopen_on_evidence,
            tool_admin_changed_audit,
        )

        tool_admin_changed.connect(
            tool_admin_changed_audit, dispatch_uid="reviews.tool_admin_changed_audit"
        )
        customer_memory_changed.connect(
            tool_admin_changed_audit, dispatch_uid="reviews.customer_memory_changed_audit"
        )
        # Likewise above policies: the learning loop announces what needs a person and what
        # to audit, and reads the queue's state through policies.hooks.
        audit_event.connect(audit_record, dispatch_uid="reviews.audit_record")
        review_requested.connect(review_item_open, dispatch_uid="reviews.review_item_open")
        strategy_auto_merged.connect(
            review_items_close_auto_merged, dispatch_uid="reviews.close_auto_merged"
        )
        strategy_evidence_added.connect(
            review_items_reopen_on_evidence, dispatch_uid="reviews.reopen_on_evidence"
        )
        review_records_register(DatabaseReviewRecords())
        # A person still has to look at the run behind an open item: retention keeps it.
        from traces.retention import retention_hold_register

        retention_hold_register("open review item", _open_item_traces)


def _open_item_traces() -> QuerySet:
    from reviews.models import ReviewItem

    return ReviewItem.objects.filter(
        status__in=(ReviewItem.Status.OPEN, ReviewItem.Status.NEEDS_EVIDENCE), trace__isnull=False
    ).values("trace_id")
