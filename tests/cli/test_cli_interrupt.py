"""Ctrl-C on a command that waits on the cluster: one line and exit 130, as a shell tool, never the
Kubernetes client's 90-line KeyboardInterrupt traceback; a rollback stopped so says its workflow may
already have been submitted. The API server is a real loopback port that accepts the connection and
never answers (a hung server, a black-holed proxy)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from healer.cli.output import EXIT_INTERRUPTED
from tests.cli.test_cli_reach import as_a_shell_starts_it, kubeconfig, signal_masks


class SilentServer:
    """Accepts TCP connections and never says a word: the client waits for its TLS handshake."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connected = threading.Event()
        self.held: list[socket.socket] = []

    def serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            self.held.append(connection)
            self.connected.set()


@pytest.fixture
def silent(tmp_path: Path) -> Iterator[SilentServer]:
    server = SilentServer()
    threading.Thread(target=server.serve, daemon=True).start()
    try:
        yield server
    finally:
        server.listener.close()
        for connection in server.held:
            connection.close()


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["status", "-n", "ml"], "healer: interrupted (Ctrl-C)"),
        (["runs", "list"], "healer: interrupted (Ctrl-C)"),
        (
            ["rollback", "m", "1"],
            "healer: interrupted (Ctrl-C); the rollback workflow may have been submitted: check `healer runs list`",
        ),
    ],
)
def test_ctrl_c_on_a_cluster_command_is_one_line_and_exit_130(
    argv: list[str], said: str, silent: SilentServer, tmp_path: Path
) -> None:
    config = kubeconfig(tmp_path / "kc.yaml", silent.url)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "HEALER_CONFIG")}
    healer = str(Path(sys.executable).parent / "healer")
    process = subprocess.Popen(
        [healer, *argv, "--kubeconfig", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "HOME": str(home), "PYTHONUNBUFFERED": "1"},
        preexec_fn=as_a_shell_starts_it,  # noqa: PLW1509 (two C-level calls, see there)
    )
    try:
        # Interrupted while it waits on the API server (not while Python is still importing).
        assert silent.connected.wait(timeout=60), "the command never reached the API server"
        masks = signal_masks(process.pid)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait(timeout=30)
    assert process.returncode == EXIT_INTERRUPTED, f"{err}\nits threads when Ctrl-C was sent:\n{masks}"
    assert err.splitlines() == [said], err
    assert out == ""
