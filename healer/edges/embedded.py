"""The embedded default: a real tritonserver started and stopped by healer.

The binary comes from the nvidia-pytriton wheel (Triton 2.51 with the Python backend; it runs
on CPU) or from ``$TRITONSERVER``. It runs in ``--model-control-mode=explicit`` so healer,
not a directory poll, decides what is loaded. It is stopped by its process group, and it dies
with its parent (PR_SET_PDEATHSIG), so a crashed test run leaves no orphan servers behind.

Its model repository is a directory, or a bucket Triton reads itself (repository_mode:
object-store): ``s3://http://HOST:PORT/bucket/prefix`` (``triton_repository_url``), with the
credentials Triton's S3 client reads from ``AWS_*`` variables passed in ``environment``.
"""

from __future__ import annotations

import os
import shutil
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import structlog

from healer.edges.processes import ManagedServer, free_port

log = structlog.get_logger(__name__)

LIVE_POLL_INTERVAL_S = 0.1
PORT_RETRIES = 3
# The repositories Triton 2.51 reads without a directory: S3 (and S3-compatible stores), GCS, Azure.
REMOTE_REPOSITORY_SCHEMES = ("s3://", "gs://", "as://")


def is_remote_repository(repository: Path | str) -> bool:
    """Whether Triton reads ``repository`` from an object store rather than a directory."""
    return isinstance(repository, str) and repository.startswith(REMOTE_REPOSITORY_SCHEMES)


def triton_repository_url(bucket: str, prefix: str = "", endpoint_url: str | None = None) -> str:
    """The --model-repository that makes Triton read a bucket itself: ``s3://bucket/prefix`` on AWS,
    ``s3://http://HOST:PORT/bucket/prefix`` for another endpoint (Triton needs the port written)."""
    path = "/".join(part for part in (bucket, prefix.strip("/")) if part)
    if endpoint_url is None:
        return f"s3://{path}"
    endpoint = endpoint_url.rstrip("/")
    scheme, _, hostport = endpoint.partition("://")
    if not hostport or "/" in hostport:
        raise ValueError(f"endpoint_url {endpoint_url!r}: Triton needs scheme://host:port, nothing after it")
    if ":" not in hostport.rsplit("]", 1)[-1]:
        hostport = f"{hostport}:{443 if scheme == 'https' else 80}"
    return f"s3://{scheme}://{hostport}/{path}"


class EmbeddedTritonError(RuntimeError):
    """tritonserver could not be found, started, or did not become live in time."""


def find_tritonserver(explicit: Path | None = None) -> Path:
    """The tritonserver binary: an explicit path, ``$TRITONSERVER``, or the nvidia-pytriton wheel's."""
    candidates: list[tuple[str, Path]] = []
    if explicit is not None:
        candidates.append(("configured path", explicit))
    if os.environ.get("TRITONSERVER"):
        candidates.append(("$TRITONSERVER", Path(os.environ["TRITONSERVER"])))
    for label, candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
        raise EmbeddedTritonError(f"{label} {str(candidate)!r} is not an executable file")
    wheel_binary = _pytriton_dir() / "tritonserver" / "bin" / "tritonserver"
    if wheel_binary.is_file():
        return wheel_binary
    raise EmbeddedTritonError(
        "no tritonserver found: install the embedded extra (pip install 'healer[embedded]', which brings "
        "nvidia-pytriton) or set TRITONSERVER to the binary's path"
    )


def _pytriton_dir() -> Path:
    try:
        import pytriton
    except ImportError:
        return Path("/nonexistent/pytriton")
    return Path(pytriton.__file__).parent


class EmbeddedTriton(ManagedServer):
    """A real tritonserver on free loopback ports, as a context manager."""

    log_name = "tritonserver.log"
    start_error = EmbeddedTritonError

    def __init__(
        self,
        model_repository: Path | str,
        *,
        tritonserver: Path | None = None,
        load_models: Sequence[str] = (),
        startup_timeout_s: float = 60.0,
        workdir: Path | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(workdir, prefix="healer-triton-")
        # A bucket (s3://...) is passed to Triton as written; a directory as its absolute path.
        self.repository = (
            str(model_repository) if is_remote_repository(model_repository) else str(Path(model_repository).resolve())
        )
        # The directory Triton reads; None when it reads a bucket (nothing on this machine to write to).
        self.model_repository: Path | None = None if self.reads_object_store else Path(self.repository)
        self.environment = dict(environment or {})
        self.binary = find_tritonserver(tritonserver)
        self.load_models = tuple(load_models)
        self.startup_timeout_s = startup_timeout_s
        self.http_port = 0
        self.metrics_port = 0
        self._backends: Path | None = None

    @property
    def url(self) -> str:
        """host:port for tritonclient (no scheme)."""
        return f"127.0.0.1:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def reads_object_store(self) -> bool:
        return is_remote_repository(self.repository)

    def start(self) -> None:
        if self.model_repository is not None and not self.model_repository.is_dir():
            raise EmbeddedTritonError(f"model repository {str(self.model_repository)!r} is not a directory")
        self._backends = self._prepare_backends()
        super().start()

    def stop(self) -> int | None:
        """Stop the whole group: tritonserver and its Python backend stubs."""
        pid = self.pid
        returncode = super().stop()
        if pid is not None:
            log.info("triton_stopped", pid=pid, returncode=returncode)
        return returncode

    def _allocate_ports(self) -> None:
        self.http_port, self.metrics_port = free_port(), free_port()

    def _prepare_backends(self) -> Path:
        """The wheel's backends lack the Python stub: a writable copy with the stub for this interpreter's
        version. A full Triton install (``$TRITONSERVER``) has its stub, and gigabytes of backends: used as is."""
        source = self.binary.parent.parent / "backends"
        if (source / "python" / "triton_python_backend_stub").exists() or not (source / "python").is_dir():
            return source
        target = self.workdir / "backends"
        if not target.exists():
            shutil.copytree(source, target)
        stub = (
            _pytriton_dir()
            / "tritonserver"
            / "python_backend_stubs"
            / (f"{sys.version_info.major}.{sys.version_info.minor}")
            / "triton_python_backend_stub"
        )
        stub_target = target / "python" / "triton_python_backend_stub"
        if stub.is_file() and stub_target.parent.is_dir() and not stub_target.exists():
            shutil.copy2(stub, stub_target)
        return target

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        libs = _pytriton_dir().parent / "nvidia_pytriton.libs"
        if libs.is_dir():
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs), env.get("LD_LIBRARY_PATH")]))
        # The Python backend stub finds its interpreter (and so numpy) by searching PATH for python3:
        # put this interpreter's directory first so models run with the same environment as healer.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env.update(self.environment)  # e.g. the AWS_* credentials Triton reads a bucket with
        # (The stub's interpreter ignores PYTHON* variables, so it writes __pycache__ beside model.py:
        # the store and the sha256 checks treat __pycache__ as derived, not model content.)
        return env

    def _launch(self) -> None:
        assert self._backends is not None
        backends = self._backends
        command = [
            str(self.binary),
            f"--model-repository={self.repository}",
            "--model-control-mode=explicit",
            f"--backend-directory={backends}",
            f"--http-port={self.http_port}",
            "--http-address=127.0.0.1",
            "--allow-grpc=false",
            f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",
            # A model that fails to load is healer's business, not a reason for the server to exit.
            "--exit-on-error=false",
            "--strict-readiness=true",
            # On SIGTERM Triton waits this long for in-flight requests and unloads, then exits.
            "--exit-timeout-secs=5",
            *(f"--load-model={name}" for name in self.load_models),
        ]
        process = self._spawn(command, env=self._environment())
        log.info(
            "triton_starting",
            pid=process.pid,
            http_port=self.http_port,
            model_repository=self.repository,
        )
        self._wait_live()

    def _wait_live(self) -> None:
        live_url = f"http://{self.url}/v2/health/live"

        def live() -> bool:
            with urllib.request.urlopen(live_url, timeout=1.0) as response:
                return bool(response.status == 200)

        self._wait_ready(
            live,
            program="tritonserver",
            not_ready="tritonserver not live",
            timeout_s=self.startup_timeout_s,
            interval_s=LIVE_POLL_INTERVAL_S,
        )
        log.info("triton_live", pid=self.pid, url=self.url)
