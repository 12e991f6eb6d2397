"""`healer release` and `healer runs resume` against the real Triton and a filesystem store: a release
waiting for a person, resumed from another command, then rolled out; a bad version refused at the
canary, and the command's exit code and output."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from healer.cli import EXIT_REFUSED, EXIT_USAGE, main
from healer.embedded import EmbeddedTriton
from healer.engines.records import RunRecords
from healer.triton import TritonHttp
from tests.conftest import EXAMPLES
from tests.rollback_stack import serve_versions, write_model

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


def test_release_waits_for_a_person_then_rolls_out(
    tmp_path: Path, triton_server: EmbeddedTriton, triton: TritonHttp, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "cli_release"
    versions = {1: ("good", "1"), 2: ("good", "2")}
    write_model(tmp_path / "store", "linear_scorer", name, versions)
    write_model(triton_server.model_repository, "linear_scorer", name, versions)
    config = _config(tmp_path, triton_server, name)
    triton.load_model(name, timeout_s=60)
    serve_versions(triton, name, [1])
    assert main(["promote", "--config", str(config), name, "1", "--by", "alice"]) == 0
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
