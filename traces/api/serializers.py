from rest_framework import serializers

from traces.models import Step, Trace


class StepSerializer(serializers.ModelSerializer):
    class Meta:
        model = Step
        fields = [
            "id",
            "trace",
            "step_number",
            "round_number",
            "phase",
            "thought",
            "action_type",
            "tool_name",
            "action_input",
            "endpoint",
            "request_payload",
            "status_code",
            "ok",
            "error_type",
            "error_detail",
            "response_size",
            "response_summary",
            "latency_ms",
            "prompt_tokens",
            "completion_tokens",
            "cost_usd",
            "llm_backend",
            "parse_mode",
            "adapters_fired",
            "strategies_applied",
            "strategy_version",
            "started_at",
            "created_at",
        ]
        read_only_fields = fields


class TraceSerializer(serializers.ModelSerializer):
    agent: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    # Blank until the run ends: the schema must say so.
    outcome = serializers.ChoiceField(
        choices=Trace.Outcome.choices, allow_blank=True, read_only=True
    )

    class Meta:
        model = Trace
        fields = [
            "id",
            "query",
            "query_hash",
            "session_id",
            "customer_id",
            "agent",
            "source",
            "llm_backend",
            "llm_model",
            "policy_version",
            "policy_bucket",
            "status",
            "outcome",
            "error_type",
            "final_answer",
            "total_steps",
            "total_latency_ms",
            "total_tokens",
            "total_cost_usd",
            "attempts",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class TraceDetailSerializer(TraceSerializer):
    steps = StepSerializer(many=True, read_only=True)

    class Meta(TraceSerializer.Meta):
        fields = [*TraceSerializer.Meta.fields, "steps"]
        read_only_fields = fields
