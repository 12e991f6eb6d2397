"""`healer release` and `healer runs resume` against the real Triton and a filesystem store: a release
waiting for a person, resumed from another command, then rolled out; a bad version refused at the
canary, and the command's exit code and output."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from healer.cli import main
from healer.cli.output import EXIT_REFUSED, EXIT_USAGE
from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.edges.triton import TritonHttp
from healer.engines.records import RunRecords
from tests.conftest import EXAMPLES
from tests.support.kill_points import kill_after, kill_before, kill_in_child
from tests.support.rollback_stack import VersionSource, serve_versions, write_model
from workflows.steps import release as release_steps

pytestmark = pytest.mark.timeout(600)


def _config(tmp_path: Path, triton_server: EmbeddedTriton, name: str) -> Path:
    document = yaml.safe_load((EXAMPLES / "healer.yaml").read_text())
    document.pop("embedded")
    golden = {**document["models"][0]["golden"], "latency_slo_ms": 2000, "timeout_s": 5}  # a busy 2-core box
    document["models"] = [{**document["models"][0], "name": name, "golden": golden}]
    document["triton"]["url"] = triton_server.url
    document["store"] = {"filesystem": {"root": str(tmp_path / "store")}}
    document["live_repository"] = str(triton_server.model_repository)
    document["rollback"] = {"state_dir": str(tmp_path / "runs")}
    document["release"] = {"bake_s": 0.5, "check_interval_s": 0.1}
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    return config


def _promoted_v1(
    tmp_path: Path, triton_server: EmbeddedTriton, triton: TritonHttp, name: str, versions: dict[int, VersionSource]
) -> Path:
    """Model ``name`` with these versions in the store and the live repository, v1 served and promoted
    stable by alice; its config file."""
    write_model(tmp_path / "store", "linear_scorer", name, versions)
    write_model(triton_server.model_repository, "linear_scorer", name, versions)
    config = _config(tmp_path, triton_server, name)
    triton.load_model(name, timeout_s=60)
    serve_versions(triton, name, [1])
    assert main(["promote", "--config", str(config), name, "1", "--by", "alice"]) == 0
    return config


def test_release_waits_for_a_person_then_rolls_out(
    tmp_path: Path, triton_server: EmbeddedTriton, triton: TritonHttp, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "cli_release"
    config = _promoted_v1(tmp_path, triton_server, triton, name, {1: ("good", "1"), 2: ("good", "2")})
    capsys.readouterr()

    # A person resumes it from another command while the release waits at its approval step.
    records = RunRecords(tmp_path / "runs")
    resumed: list[int] = []

    def resume_when_waiting() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for run in records.runs():
                nodes = run["status"]["nodes"].values()
                if any(n.get("type") == "Suspend" and n.get("phase") == "Running" for n in nodes):
                    time.sleep(1.5)  # a person reads the command's line first (it polls every 0.5 s)
                    resumed.append(main(["runs", "resume", "--config", str(config), run["metadata"]["name"]]))
                    return
            time.sleep(0.1)

    person = threading.Thread(target=resume_when_waiting, daemon=True)
    person.start()
    code = main(["release", "--config", str(config), name, "2", "--approve", "--release", "rel-cli-2"])
    person.join(5)
    out = capsys.readouterr().out
    assert code == 0, out
    assert resumed == [0]
    assert "submitted healer-release-cli-release-" in out and "release rel-cli-2" in out
    for line in ("  canary: Succeeded", "  bake: Succeeded", "waiting for a person", "  roll-out: Succeeded"):
        assert line in out, out
    assert f"released {name} v2: every replica serves it, promoted stable" in out
    assert triton.served_versions(name) == ["2"]

    # Listed with the rollbacks; the same version again is refused (already stable), changing nothing.
    assert main(["runs", "list", "--config", str(config), "-o", "name"]) == 0
    assert capsys.readouterr().out.startswith("healer-release-cli-release-")
    assert main(["release", "--config", str(config), name, "2", "-o", "json"]) == EXIT_REFUSED
    shown = json.loads(capsys.readouterr().out)
    assert shown["phase"] == "Failed" and "already stable" in json.dumps(shown)
    assert triton.served_versions(name) == ["2"]


def test_release_refuses_bad_input_with_a_clear_message(
    tmp_path: Path, triton_server: EmbeddedTriton, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, triton_server, "cli_release_input")
    assert main(["release", "--config", str(config), "not_a_model", "2"]) == EXIT_USAGE
    assert "unknown model 'not_a_model'" in capsys.readouterr().err
    assert main(["release", "--config", str(config), "cli_release_input", "v2"]) == EXIT_USAGE
    assert "invalid version 'v2'" in capsys.readouterr().err
    assert main(["release", "--config", str(config), "cli_release_input", "2", "--bake", "99999"]) == EXIT_USAGE
    assert "bake_s must be between 0 and 1800 s" in capsys.readouterr().err


def _release_killed(argv: list[str], kill_point: str) -> None:
    """`healer release` in a child process, SIGKILLed at ``kill_point`` (as test_kill_matrix.py does)."""
    if kill_point == "bake":  # after the bake's second check: the canary serves v1 and v2
        kill_after(release_steps, "_bake_check", calls=2)
    else:  # "after-promotion": promoted stable in the ledger, killed before its `released` record
        kill_before(release_steps, "audit", when=lambda ctx, request, event, details: event == "released")
    try:
        main(argv)
    finally:
        os._exit(3)  # reached only if the kill point never was: the test fails


def _kill_release(argv: list[str], kill_point: str) -> float:
    """Run ``argv`` in a child killed at ``kill_point``; the moment it was reaped."""
    killed_at = kill_in_child(
        _release_killed, (argv, kill_point), join_s=240, what=f"healer release was not killed at {kill_point}"
    )
    return killed_at


def test_a_killed_release_is_put_back_or_finished_by_the_next_release(
    tmp_path: Path, triton_server: EmbeddedTriton, triton: TritonHttp, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 27: `healer release` SIGKILLed in the bake, then after its promotion. The next `healer
    release` runs the dead run's put-back first: the canary goes back to v1 and the new release goes
    on; a promoted v3 stays (finished, not reverted, nothing quarantined), and what it prints never
    advises a rollback."""
    name = "cli_release_killed"
    config = _promoted_v1(
        tmp_path, triton_server, triton, name, {1: ("good", "1"), 2: ("good", "2"), 3: ("good", "2"), 4: ("good", "1")}
    )
    capsys.readouterr()
    records = RunRecords(tmp_path / "runs")

    # Killed in the bake: the canary serves v1 and v2, its run stays Running.
    _kill_release(["release", "--config", str(config), name, "2", "--bake", "60"], "bake")
    assert triton.served_versions(name) == ["1", "2"]
    assert [r["status"]["phase"] for r in records.runs()] == ["Running"]
    code = main(["release", "--config", str(config), name, "2"])
    captured = capsys.readouterr()
    assert code == 0, captured
    put_back = [line for line in captured.err.splitlines() if ": put back:" in line]
    assert len(put_back) == 1, captured.err
    assert f"every replica serves the stable {name} v1 again; v2 not quarantined" in put_back[0], captured.err
    assert "rollback" not in captured.err
    assert f"released {name} v2: every replica serves it, promoted stable" in captured.out
    assert triton.served_versions(name) == ["2"]
    assert sorted(r["status"]["phase"] for r in records.runs()) == ["Error", "Succeeded"]

    # Killed after its promotion: v3 is stable, the `released` record missing.
    killed_at = _kill_release(
        ["release", "--config", str(config), name, "3", "--release", "rel-killed-3"], "after-promotion"
    )
    assert triton.served_versions(name) == ["3"]
    code = main(["release", "--config", str(config), name, "3"])  # refused (already stable), after finishing
    converge_s = time.monotonic() - killed_at
    captured = capsys.readouterr()
    print(f"\nkilled after promotion: converge_s={converge_s:.2f}")
    assert code == EXIT_REFUSED and "already stable" in captured.out, captured
    finished = [line for line in captured.err.splitlines() if ": finished:" in line]
    assert len(finished) == 1, captured.err
    assert f"{name} v3 was promoted stable before its process ended; left serving" in finished[0], captured.err
    assert "rollback" not in captured.err
    assert triton.served_versions(name) == ["3"]
    assert converge_s < 90
    ledger = ModelStore(FilesystemBlobs(tmp_path / "store")).ledger(name)
    assert ledger.stable_record("3") is not None and not ledger.quarantined
    released = ModelStore(FilesystemBlobs(tmp_path / "store")).audit_of(name, "rel-killed-3")
    assert [r["event"] for r in released].count("released") == 1
    killed = next(r for r in records.runs() if r["metadata"]["labels"].get("healer.io/incident") == "rel-killed-3")
    assert killed["status"]["phase"] == "Succeeded", killed["status"]

    # Killed in the bake again: `healer store doctor --repair` puts it back too, and says so.
    _kill_release(["release", "--config", str(config), name, "4", "--bake", "60"], "bake")
    assert triton.served_versions(name) == ["3", "4"]
    code = main(["store", "doctor", "--config", str(config), name, "--repair", "--reason", "release killed"])
    captured = capsys.readouterr()
    assert code == 0, captured
    assert f"put back: every replica serves the stable {name} v3 again; v4 not quarantined" in captured.out, captured
    assert triton.served_versions(name) == ["3"]
    assert [r for r in records.runs() if r["status"]["phase"] in ("Pending", "Running")] == []
