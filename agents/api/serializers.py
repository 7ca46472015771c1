from django.urls import reverse
from rest_framework import serializers

from agents.answer_format import style_problem
from agents.models import Agent
from agents.query_validation import (
    CUSTOMER_ID_MESSAGE,
    CUSTOMER_ID_PATTERN,
    validate_query_length,
    validate_query_not_blank,
)
from config.api_fields import KnownFieldsSerializer
from traces.api.serializers import TraceSerializer
from traces.models import Trace


class RunCreateSerializer(KnownFieldsSerializer):
    query = serializers.CharField(
        trim_whitespace=True, validators=[validate_query_not_blank, validate_query_length]
    )
    agent = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Agent.objects.filter(is_active=True),
        required=False,
        help_text="Agent slug; defaults to the support agent.",
    )
    customer_id = serializers.RegexField(
        CUSTOMER_ID_PATTERN,
        required=False,
        default="",
        error_messages={"invalid": CUSTOMER_ID_MESSAGE},
    )
    session_id = serializers.RegexField(
        r"^[A-Za-z0-9_.:-]{0,64}$",
        required=False,
        default="",
        error_messages={"invalid": "Letters, digits, _ . : and - only (max 64)."},
    )
    locale = serializers.CharField(
        max_length=35,
        required=False,
        default="",
        help_text="The customer's locale (BCP 47, e.g. de-DE): how the answer writes dates "
        "and prices. Defaults to the site's AGENT_ANSWER_LOCALE.",
    )
    time_zone = serializers.CharField(
        max_length=64,
        required=False,
        default="",
        help_text="The customer's IANA time zone (e.g. Europe/Berlin) for times in the "
        "answer. Defaults to the site's AGENT_ANSWER_TIME_ZONE.",
    )

    def validate_locale(self, value: str) -> str:
        problem = style_problem(locale=value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate_time_zone(self, value: str) -> str:
        problem = style_problem(time_zone=value)
        if problem:
            raise serializers.ValidationError(problem)
        return value


class RunAcceptedSerializer(TraceSerializer):
    """The queued trace, with the URL to follow it at."""

    url = serializers.SerializerMethodField(help_text="Where to follow the run.")

    class Meta(TraceSerializer.Meta):
        fields = [*TraceSerializer.Meta.fields, "url"]
        read_only_fields = fields

    def get_url(self, trace: Trace) -> str:
        return self.context["request"].build_absolute_uri(reverse("trace-detail", args=[trace.pk]))
