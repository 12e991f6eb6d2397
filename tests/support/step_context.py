"""A step context for the engines' tests (``FakeContext``): what the LocalEngine and the TemplateRunner read
of the real workflows.steps StepContext (its cancellation, its workflow's name, a Triton client to
close), and nothing else."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeContext:
    cancelled: threading.Event = field(default_factory=threading.Event)
    workflow_name: str = ""
    triton: Any = None

    def __post_init__(self) -> None:
        class _Closable:
            def close(self) -> None:
                pass

        self.triton = _Closable()
