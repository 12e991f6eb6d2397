"""A stream's events as the edge measured them (pure data): each event's JSON object with the time it
arrived, and how the stream ended. healer/edges/triton_rest.py makes them, probes/stream.py judges them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StreamEvent:
    """One server-sent event of a stream: its JSON object and when it arrived (seconds since the request
    was sent)."""

    at: float
    data: Mapping[str, Any]


@dataclass(frozen=True)
class StreamEnd:
    """How a stream ended, and when (seconds since the request was sent): ``closed`` by Triton, or given up
    by healer: ``stalled`` (no event for the stall limit), ``over`` a cap on what is read, or the request's
    timeout passed (none of them)."""

    at: float
    closed: bool
    stalled: bool = False
    over: str = ""  # why the edge stopped reading ("": it did not): more than it reads of one stream


StreamItem = StreamEvent | StreamEnd
