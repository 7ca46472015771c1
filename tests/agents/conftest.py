"""Fixtures shared by the runtime tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents import telemetry


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    """The spans the runtime exports, kept in memory (the tracer provider is put back)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    telemetry.telemetry_use_tracer_provider(provider)
    yield memory
    telemetry.telemetry_use_tracer_provider(None)
