"""What the tracing tests share (test_tracing, test_tracing_release): tracing reset around each test
(``tracing_reset``, used by their modules) and on with its spans in memory (``spans``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from healer.edges import tracing
from healer.settings import TracingSettings

ON = TracingSettings(enabled=True, otlp_endpoint="http://127.0.0.1:9/v1/traces", ui_link_template=None)


@pytest.fixture
def tracing_reset() -> Iterator[None]:
    tracing.reset()
    yield
    tracing.reset()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """Tracing on, its spans kept in memory (ended spans are exported at once)."""
    exporter = InMemorySpanExporter()
    tracing.use_exporter(exporter)
    tracing.configure(ON)
    return exporter
