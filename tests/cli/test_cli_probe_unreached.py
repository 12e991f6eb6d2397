"""`healer probe -o json|yaml` with Triton refused: stdout still carries the result a script reads, every
tier of every model `error` (nothing learnt), beside the one line on stderr, and exit 2 (inconclusive).
The table keeps stdout empty. Triton is a real loopback port nothing listens on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from healer.cli import main
from healer.edges.embedded import free_port
from tests.conftest import example_config_document


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_probe_data_output_says_every_tier_is_error_when_triton_is_refused(
    output: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = example_config_document()
    url = f"127.0.0.1:{free_port()}"
    document["triton"] = {"url": url, "timeout_s": 2.0}
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    assert main(["probe", "--config", str(config), "-o", output]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"healer: error: cannot reach Triton at {url}: connection refused; nothing learnt, every tier "
        "is `error` (is Triton running there?)\n"
    )
    results = json.loads(captured.out) if output == "json" else yaml.safe_load(captured.out)
    models = [m["name"] for m in document["models"]]
    assert [(r["model"], r["tier"]) for r in results] == [
        (model, tier) for model in models for tier in ("liveness", "readiness", "business")
    ]
    assert {r["status"] for r in results} == {"error"}
    assert results[0]["reason"] == f"cannot reach Triton at {url}: connection refused"

    assert main(["probe", "--config", str(config)]) == 2  # the table: only the line on stderr
    assert capsys.readouterr().out == ""
