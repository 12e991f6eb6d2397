"""An API server (or something in its place: a proxy, a login page) that answers 200 with a body that is
not JSON: every cluster command says so in one line, as `status` and `runs get` do, and a watch takes it
as a failed round, never a crash with an AttributeError's traceback. A real loopback HTTP server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from healer.cli import main
from tests.cli.test_cli_reach import kubeconfig, no_kube, one_line

__all__ = ["no_kube"]  # the fixture, used by name

LOGIN_PAGE = b"<html><body>Sign in to continue</body></html>"


@pytest.fixture
def login_page(no_kube: Path, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose server answers every GET with 200 and an HTML page."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(LOGIN_PAGE)))
            self.end_headers()
            self.wfile.write(LOGIN_PAGE)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield kubeconfig(tmp_path / "kc.yaml", f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list"],
        ["runs", "list", "-A"],
        ["runs", "list", "-w"],
        ["runs", "watch"],
        ["runs", "get", "healer-rollback-x"],
        ["status"],
    ],
)
def test_an_answer_that_is_not_json_is_one_line(
    argv: list[str], login_page: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--kubeconfig", str(login_page)]) == 1
    captured = capsys.readouterr()
    line = one_line(captured.err)
    assert line.startswith("healer: ") and "Traceback" not in captured.err
    assert "AttributeError" not in line and "object has no attribute" not in line
    assert captured.out == ""
