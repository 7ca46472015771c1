from rest_framework import serializers

from traces.models import ErrorType, Step, Trace

# The largest value a PositiveIntegerField (Step.step_number) holds.
MAX_STEP_NUMBER = 2**31 - 1


def _error_type_field() -> serializers.ChoiceField:
    # The model field is blank=True: a step or trace without an error has "".
    return serializers.ChoiceField(choices=ErrorType.choices, allow_blank=True, read_only=True)


class StepSerializer(serializers.ModelSerializer):
    error_type = _error_type_field()

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
    error_type = _error_type_field()

    class Meta:
        model = Trace
        fields = [
            "id",
            "query",
            "query_hash",
            "session_id",
            "customer_id",
            "locale",
            "time_zone",
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


# Each ordering an index backs (a descending one reads the same index backwards); the id
# breaks ties, so pages neither skip nor repeat rows.
TRACE_ORDERINGS = ("-created_at", "created_at", "-total_latency_ms", "total_latency_ms")
STEP_ORDERINGS = ("-created_at", "created_at")


def _ordering_field(choices: tuple[str, ...]) -> serializers.ChoiceField:
    return serializers.ChoiceField(
        choices=choices,
        required=False,
        default=choices[0],
        help_text="Sort order; a leading - means descending. Default: " + choices[0] + ".",
        error_messages={
            "invalid_choice": '"{input}" is not an ordering of this list. Use one of: '
            + ", ".join(choices)
            + "."
        },
    )


class TraceFilterSerializer(serializers.Serializer):
    """Query parameters of the trace list; each one given narrows it."""

    ordering = _ordering_field(TRACE_ORDERINGS)

    status = serializers.ChoiceField(choices=Trace.Status.choices, required=False)
    error_type = serializers.ChoiceField(choices=ErrorType.choices, required=False)
    outcome = serializers.ChoiceField(choices=Trace.Outcome.choices, required=False)
    agent = serializers.SlugField(required=False, max_length=50, help_text="Agent slug.")
    origin = serializers.ChoiceField(
        choices=Trace.Origin.choices,
        required=False,
        help_text="Who started the runs: `customer` for the traffic the console's lists and "
        "dashboards show; without it the list also holds the learning loop's replays and "
        "experiments, and runs ingested over OTLP.",
    )


class StepFilterSerializer(serializers.Serializer):
    """Query parameters of the step list; each one given narrows it."""

    ordering = _ordering_field(STEP_ORDERINGS)

    trace = serializers.UUIDField(required=False, help_text="Trace id.")
    error_type = serializers.ChoiceField(choices=ErrorType.choices, required=False)
    tool = serializers.CharField(required=False, max_length=64, help_text="Tool name.")


class StepCursorSerializer(serializers.Serializer):
    """Query parameter of a trace's steps: only those after a step number already seen."""

    after = serializers.IntegerField(
        required=False, default=0, min_value=0, max_value=MAX_STEP_NUMBER
    )
