"""Child servers (tritonserver, and in tests SeaweedFS) in their own process group, never orphaned.

A server is started in a new session, so it and every process it starts (Triton's Python
backend stubs) form one group that is stopped together; and it gets SIGTERM when its parent
dies (PR_SET_PDEATHSIG), so a SIGKILLed test run or CLI leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self


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


class ManagedServer:
    """A server child process on free loopback ports, with a log file, as a context manager.

    Subclasses pick the ports (``_allocate_ports``) and start and wait for the server (``_launch``,
    raising ``start_error``). A start that loses a port race ("address already in use") is retried
    on new ports a bounded number of times.
    """

    log_name = "server.log"
    start_error: type[Exception] = RuntimeError
    port_retries = 3
    stop_grace_s = 15.0

    def __init__(self, workdir: Path | None, *, prefix: str) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix=prefix))
        self.log_path = self.workdir / self.log_name
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        last_error: Exception | None = None
        for _attempt in range(self.port_retries):
            self._allocate_ports()
            try:
                self._launch()
                return
            except self.start_error as exc:
                last_error = exc
                self.stop()
                if "address already in use" not in self.log_tail().lower():
                    raise
        assert last_error is not None
        raise last_error

    def stop(self) -> int | None:
        """Stop the whole process group (the server and whatever it started); its return code."""
        process, self._process = self._process, None
        return stop_group(process, grace_s=self.stop_grace_s) if process is not None else None

    def kill(self) -> None:
        """SIGKILL the server (for drills and tests of a crash). Call stop() afterwards to reap it."""
        if self._process is not None:
            kill_group(self._process)

    def cleanup(self) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def _wait_ready(
        self, ready: Callable[[], bool], *, program: str, not_ready: str, timeout_s: float, interval_s: float
    ) -> None:
        """Poll ``ready`` until it holds; fail with the log if the process exits or ``timeout_s`` passes."""
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise self.start_error(
                    f"{program} exited with {self._process.returncode} during start-up; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                if ready():
                    return
            except Exception as exc:  # refused, reset, 5xx while the server comes up
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(interval_s)
        raise self.start_error(
            f"{not_ready} after {timeout_s:g} s (last: {last}); log {self.log_path}:\n{self.log_tail()}"
        )

    def _spawn(self, command: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        self._process = spawn_group(command, log_path=self.log_path, **kwargs)
        return self._process

    def _allocate_ports(self) -> None:
        raise NotImplementedError

    def _launch(self) -> None:
        raise NotImplementedError
