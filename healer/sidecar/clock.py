"""The sidecar's time, injected: the monotonic clock its rules count in, the wall clock its records
carry, and its waits (the probe loop's between two cycles). ``REAL_CLOCK`` by default; the tests
give a fake one (tests/support/sidecar_fleet.py ``FakeClock``) that moves only when the code waits, so the
loop's timing runs in no time at all.

Not everything waits on it: a bounded engine call (healer/sidecar/handover.py ``BoundedCalls``) joins
a real thread, and the probes time real answers; both stay on real time."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (the rules' timeouts, streaks and deadlines)."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch (the times written down: incident lines, the drain set)."""
        ...

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        """Until ``event`` is set or ``timeout_s`` has passed; whether it is set."""
        ...


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        return event.wait(timeout_s)


REAL_CLOCK: Clock = RealClock()
