"""Killed runs: a process SIGKILLed at a chosen point of its work, and run again (the heal's, a release's
and `healer rollback`'s kill matrices). The ``kill_*`` functions arm a kill point by replacing a function
(in the child process only); ``kill_in_child`` runs the work in a spawned child and waits for its death."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_after(target: Any, name: str, *, calls: int = 1) -> None:
    """Replace ``target.name`` by a wrapper that runs the original and SIGKILLs after the n-th call."""
    original = getattr(target, name)
    count = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        count[0] += 1
        if count[0] >= calls:
            kill_self()
        return result

    setattr(target, name, wrapper)


def kill_before(target: Any, name: str, when: Callable[..., bool] = lambda *a, **k: True) -> None:
    """Replace ``target.name`` by a wrapper that SIGKILLs before the call ``when`` holds for (any, by default)."""
    original = getattr(target, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if when(*args, **kwargs):
            kill_self()
        return original(*args, **kwargs)

    setattr(target, name, wrapper)


def kill_during(target: Any, name: str, *, after_s: float = 0.2) -> None:
    """``target.name`` is called and, while it waits for its answer, the process is SIGKILLed: a Triton
    load already sent goes on in Triton without anyone waiting for it."""
    original = getattr(target, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        threading.Timer(after_s, kill_self).start()
        return original(*args, **kwargs)

    setattr(target, name, wrapper)


def kill_in_child(target: Callable[..., None], args: tuple[Any, ...], *, join_s: float, what: str) -> float:
    """Run ``target(*args)`` in a child process that arms its kill point; assert it died of SIGKILL
    (``what`` says what was not killed otherwise); the moment it was reaped."""
    # spawn, not fork: the Triton client's gevent hub does not survive a fork of a threaded process.
    child = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    child.start()
    child.join(timeout=join_s)
    killed_at = time.monotonic()
    if child.is_alive():
        child.kill()
        child.join(timeout=10)
    assert child.exitcode == -signal.SIGKILL, f"{what} ({child.exitcode})"
    return killed_at
