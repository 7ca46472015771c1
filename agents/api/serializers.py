from rest_framework import serializers

from agents.models import Agent


class RunCreateSerializer(serializers.Serializer):
    query = serializers.CharField(max_length=4000, trim_whitespace=True)
    agent = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Agent.objects.filter(is_active=True),
        required=False,
        help_text="Agent slug; defaults to the support agent.",
    )
    customer_id = serializers.RegexField(r"^[A-Za-z0-9_-]{0,64}$", required=False, default="")
    session_id = serializers.RegexField(r"^[A-Za-z0-9_.:-]{0,64}$", required=False, default="")
