"""A real Alertmanager (Debian's prometheus-alertmanager, 0.25 here) on a loopback port, for the tests of
what healer sends it and what it sends healer; its API v2 asked with the standard library."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from healer.edges.processes import free_port

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
MISSING = "Alertmanager is not installed (Debian: prometheus-alertmanager)"


def api(base: str, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(  # noqa: S310 - the loopback Alertmanager started here
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
        text = response.read()
    return json.loads(text) if text.strip() else None


@contextmanager
def running_alertmanager(config: dict[str, Any], directory: Path) -> Iterator[str]:
    """Alertmanager with ``config`` (as its YAML would say), clustering off; yields its base URL and
    stops it at the end (SIGTERM, then SIGKILL after 10 s)."""
    assert ALERTMANAGER is not None, MISSING
    path = directory / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = directory / "alertmanager.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                ALERTMANAGER,
                f"--config.file={path}",
                f"--storage.path={directory / 'alertmanager-data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(base + "/-/ready", timeout=2) as response:  # noqa: S310
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"Alertmanager did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
