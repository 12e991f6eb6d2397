"""structlog set-up: one JSON object per line, with ISO timestamps and the log level."""

from __future__ import annotations

import datetime as dt
import logging
import sys
from typing import TextIO

import structlog


def configure_logging(*, stream: TextIO | None = None, level: str = "info") -> None:
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        # Look the stream up per logger: sys.stderr may be replaced (tests, daemons) after configuration.
        logger_factory=(lambda *_: structlog.PrintLogger(stream or sys.stderr)),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger


def iso_utc(wall: float) -> str:
    """A wall-clock time as the log lines and reports write it: UTC, milliseconds, a trailing Z."""
    return dt.datetime.fromtimestamp(wall, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
