"""Child servers (tritonserver, and in tests SeaweedFS) in their own process group, never orphaned.

A server is started in a new session, so it and every process it starts (Triton's Python
backend stubs) form one group that is stopped together; and it gets SIGTERM when its parent
dies (PR_SET_PDEATHSIG), so a SIGKILLed test run or CLI leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent(death_signal: int) -> Callable[[], None]:
    # libc is loaded here, in the parent: between fork and exec a threaded parent's child must not
    # import modules or take locks (the dynamic loader's included).
    import ctypes

    prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    pr_set_pdeathsig = 1

    def set_death_signal() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(pr_set_pdeathsig, death_signal)

    return set_death_signal


def spawn_group(
    command: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    death_signal: int = signal.SIGTERM,
) -> subprocess.Popen[bytes]:
    """Start ``command`` as the leader of a new process group, output to ``log_path``; it receives
    ``death_signal`` when this process dies."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            list(command),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent(death_signal),  # noqa: PLW1509 - only prctl, no locks taken
        )


def stop_group(process: subprocess.Popen[bytes], *, grace_s: float) -> int | None:
    """SIGTERM the group, wait up to ``grace_s``, then SIGKILL whatever is left of it. Bounded."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
    # Children (e.g. backend stubs) can outlive their leader; reap the whole group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    return process.returncode


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the group at once (a crash, for drills and tests)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
