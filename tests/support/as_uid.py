"""Run a check as another user: a forked child drops root to a uid and reports through a pipe (the
tests that check what a non-root Triton, sidecar or NFS client may read and write)."""

from __future__ import annotations

import os
from collections.abc import Callable


def as_uid(uid: int, check: Callable[[], object]) -> str:
    """``check()`` in a forked child that dropped root to ``uid``: what it returned, as text, or the
    exception's class and message."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                outcome = str(check())
            except Exception as exc:
                outcome = f"{type(exc).__name__}: {exc}"
            os.write(writer, outcome.encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        raw = pipe.read()
    os.waitpid(pid, 0)
    return raw.decode()
