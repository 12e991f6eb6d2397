"""The embedded tritonserver launcher: clear errors, and no orphan processes whatever happens."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from healer.edges.embedded import EmbeddedTriton, EmbeddedTritonError, find_tritonserver
from tests.conftest import EXAMPLE_MODELS, EXAMPLES, ROOT


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 5 (after the parenthesised command) is the process group id.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def wait_until(predicate: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


@pytest.mark.triton
def test_stop_leaves_no_process_of_the_group(tmp_path: Path) -> None:
    server = EmbeddedTriton(EXAMPLES / "model_repository", load_models=["linear_scorer"], workdir=tmp_path)
    server.start()
    pid = server.pid
    assert pid is not None
    # tritonserver plus at least one Python backend stub.
    assert len(group_members(pid)) >= 2
    server.stop()
    assert group_members(pid) == []


@pytest.mark.triton
@pytest.mark.subprocess
def test_triton_dies_with_its_parent(tmp_path: Path) -> None:
    """A test run that is SIGKILLed (no finally blocks run) must not leave tritonserver behind."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from healer.edges.embedded import EmbeddedTriton
        from healer.edges.logs import configure_logging
        configure_logging()  # logs to stderr: stdout carries only the pid
        server = EmbeddedTriton(Path({str(EXAMPLES / "model_repository")!r}), workdir=Path({str(tmp_path)!r}))
        server.start()
        print(server.pid, flush=True)
        time.sleep(120)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert parent.stdout is not None
        triton_pid = int(parent.stdout.readline())
        assert group_members(triton_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert wait_until(lambda: not group_members(triton_pid), timeout_s=20), group_members(triton_pid)
    finally:
        if parent.poll() is None:
            parent.kill()


def test_missing_repository_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedTritonError, match="is not a directory"):
        EmbeddedTriton(tmp_path / "nope", workdir=tmp_path).start()


def test_tritonserver_env_that_is_not_executable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bogus = tmp_path / "tritonserver"
    bogus.write_text("not a program")
    monkeypatch.setenv("TRITONSERVER", str(bogus))
    with pytest.raises(EmbeddedTritonError, match=r"\$TRITONSERVER .* is not an executable file"):
        find_tritonserver()


def fake_tritonserver(tmp_path: Path, script: str) -> Path:
    """A stand-in tritonserver (a shell script) in tmp_path/bin, with the backends folder beside it."""
    fake = tmp_path / "bin" / "tritonserver"
    fake.parent.mkdir()
    fake.write_text(script)
    fake.chmod(0o755)
    (tmp_path / "backends").mkdir()
    return fake


@pytest.mark.subprocess  # a stand-in tritonserver script
def test_server_that_exits_during_start_up_reports_its_log(tmp_path: Path) -> None:
    fake = fake_tritonserver(tmp_path, "#!/bin/sh\necho 'error: simulated start-up failure' >&2\nexit 3\n")
    server = EmbeddedTriton(EXAMPLES / "model_repository", tritonserver=fake, workdir=tmp_path / "work")
    with pytest.raises(EmbeddedTritonError, match=r"exited with 3 during start-up(.|\n)*simulated start-up failure"):
        server.start()
    assert server.pid is None


@pytest.mark.subprocess  # a stand-in tritonserver script
def test_start_up_deadline_is_enforced(tmp_path: Path) -> None:
    fake = fake_tritonserver(tmp_path, "#!/bin/sh\nsleep 30\n")
    server = EmbeddedTriton(
        EXAMPLES / "model_repository", tritonserver=fake, workdir=tmp_path / "work", startup_timeout_s=1
    )
    started = time.monotonic()
    with pytest.raises(EmbeddedTritonError, match="not live after 1 s"):
        server.start()
    assert time.monotonic() - started < 10
    assert os.path.exists(server.log_path)


def test_every_example_model_runs_the_same_code() -> None:
    """Versions differ by their params.json only; a drifted model.py copy would make drills lie. The dense
    models run examples/dense_model.py; a model with code of its own (the LLM stand-in, ...) runs one
    model.py in every version and broken variant."""
    canonical = (EXAMPLES / "dense_model.py").read_bytes()
    copies = sorted(EXAMPLES.glob("**/model.py"))
    ensembles = {
        c.parent.name for c in (EXAMPLES / "model_repository").glob("*/config.pbtxt") if "ensemble" in c.read_text()
    }
    # Not .healer/ (a drill's records, when a test uses the examples' repository as its store: gitignored).
    versions = [
        d
        for d in (EXAMPLES / "model_repository").glob("*/*")
        if d.is_dir() and d.parent.name not in ensembles and not d.parent.name.startswith(".")
    ]
    variants = [d for d in (EXAMPLES / "broken").glob("*/*") if d.is_dir()]
    assert len(copies) == len(versions) + len(variants)
    dense = [c for c in copies if c.parts[-3] in EXAMPLE_MODELS]
    assert len(dense) == 24  # 2 models x (2 versions + 10 broken variants)
    assert [c for c in dense if c.read_bytes() != canonical] == []
    for model in {c.parts[-3] for c in copies} - set(EXAMPLE_MODELS):
        assert len({c.read_bytes() for c in copies if c.parts[-3] == model}) == 1, model
