"""`healer probe` and `healer demo` end to end, against the real tritonserver."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from healer.cli import EXIT_REFUSED, EXIT_USAGE, main
from healer.embedded import EmbeddedTriton, free_port
from healer.settings import ModelSettings
from tests.conftest import EXAMPLE_CONFIG, EXAMPLES

Deploy = Callable[..., ModelSettings]


def write_config(tmp_path: Path, **model_overrides: object) -> Path:
    """The example config with absolute paths and the given changes to the first model."""
    document = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    document.pop("embedded")
    for model in document["models"]:
        for tensor in model["golden"]["inputs"]:
            if "file" in tensor:
                tensor["file"] = str(EXAMPLES / tensor["file"])
    document["models"][0].update(model_overrides)
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_probe_json_lists_every_tier_for_every_model(
    triton_server: EmbeddedTriton, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["probe", "--config", str(EXAMPLE_CONFIG), "--url", triton_server.url, "--json"])
    results = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {(r["model"], r["tier"]) for r in results} == {
        (m, t) for m in ("linear_scorer", "tiny_classifier") for t in ("liveness", "readiness", "business")
    }
    assert {r["status"] for r in results} == {"pass"}
    assert set(results[0]) == {"model", "version", "tier", "status", "latency_ms", "reason", "details"}


def test_probe_table_and_exit_1_on_a_wrong_model(
    tmp_path: Path, triton_server: EmbeddedTriton, deploy: Deploy, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = deploy("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")})
    config = write_config(tmp_path, name=broken.name)
    code = main(["probe", "--config", str(config), "--url", triton_server.url])
    out = capsys.readouterr().out
    assert code == 1
    row = next(line for line in out.splitlines() if line.startswith(broken.name))
    assert row.split()[:5] == [broken.name, "2", "pass", "pass", "FAIL"]
    assert f"{broken.name} v2 business fail: output 'SCORE'" in out


def test_probe_exit_2_when_there_are_only_errors(
    tmp_path: Path, triton_server: EmbeddedTriton, deploy: Deploy, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = deploy("linear_scorer", {3: ("broken", "slow")})
    config = write_config(tmp_path, name=slow.name)
    document = yaml.safe_load(config.read_text())
    document["models"][0]["golden"].update(timeout_s=0.1, latency_slo_ms=50)
    config.write_text(yaml.safe_dump(document))
    code = main(["probe", "--config", str(config), "--url", triton_server.url, "--json"])
    results = json.loads(capsys.readouterr().out)
    assert code == 2
    business = next(r for r in results if r["model"] == slow.name and r["tier"] == "business")
    assert business["status"] == "error"


def test_probe_exit_1_when_triton_is_down(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", "--config", str(EXAMPLE_CONFIG), "--url", f"127.0.0.1:{free_port()}"])
    assert code == 1
    assert "not answering" in capsys.readouterr().out


def test_bad_config_exits_64_naming_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, extra_key=1)
    code = main(["probe", "--config", str(config)])
    assert code == EXIT_USAGE
    assert capsys.readouterr().err.strip() == (
        f"healer: {config}: models[0].extra_key: unknown key (allowed here: golden, name, required, version)"
    )


def test_demo_starts_triton_and_prints_three_green_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--config", str(EXAMPLE_CONFIG)])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [line.split() for line in out.splitlines() if line.startswith(("linear_scorer", "tiny_classifier"))]
    assert [row[:5] for row in rows] == [
        ["linear_scorer", "2", "pass", "pass", "pass"],
        ["tiny_classifier", "2", "pass", "pass", "pass"],
    ]


# ---- store unquarantine (no Triton: a filesystem store that is also the live repository) ----------


def unquarantine_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """linear_scorer v1 and v2 in a filesystem store (NFS-style: it is the live repository), v2
    quarantined by a rollback and its directory moved aside; a config whose Triton is not there."""
    from healer.ledger import QuarantineRecord
    from healer.store import FilesystemBlobs, ModelStore, quarantine_live_version

    root = tmp_path / "repository"
    shutil.copytree(EXAMPLES / "model_repository" / "linear_scorer", root / "linear_scorer")
    config = write_config(tmp_path)
    document = yaml.safe_load(config.read_text())
    document["triton"] = {"url": f"127.0.0.1:{free_port()}", "timeout_s": 1.0}
    document["store"] = {"filesystem": {"root": str(root)}}
    document["rollback"] = {"state_dir": str(tmp_path / "runs")}
    config.write_text(yaml.safe_dump(document))
    store = ModelStore(FilesystemBlobs(root))
    record = QuarantineRecord(version="2", reason="wrong-answer: SCORE", incident="inc-7", at="t", by="healer")
    store.update_ledger("linear_scorer", lambda ledger: ledger.with_quarantine(record))
    assert quarantine_live_version(root, "linear_scorer", "2", incident="inc-7") is not None
    monkeypatch.setenv("USER", "alice")
    return config, root


def test_store_unquarantine_lifts_the_ledger_records_the_audit_and_moves_the_files_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.store import FilesystemBlobs, ModelStore, hash_directory

    config, root = unquarantine_setup(tmp_path, monkeypatch)
    store = ModelStore(FilesystemBlobs(root))
    original = hash_directory(EXAMPLES / "model_repository" / "linear_scorer" / "2")
    assert store.versions("linear_scorer") == ["1"]
    assert main(["store", "--config", str(config), "ls"]) == 0
    rows = [line.split(maxsplit=2) for line in capsys.readouterr().out.splitlines()[2:]]
    assert rows == [
        ["linear_scorer", "1", "-"],
        ["linear_scorer", "2", "quarantined (inc-7: wrong-answer: SCORE) [files moved aside]"],
    ]
    # Quarantined: promote refuses before it asks Triton anything.
    assert main(["promote", "--config", str(config), "linear_scorer", "2"]) == EXIT_REFUSED
    assert "linear_scorer v2 is quarantined (incident inc-7)" in capsys.readouterr().err

    reason = "the SCORE drift was a bad golden file; checked by hand"
    assert main(["store", "--config", str(config), "unquarantine", "linear_scorer", "2", "--reason", reason]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"linear_scorer v2: quarantine lifted by alice (incidents inc-7): {reason}"
    assert f"moved {root}/.healer/quarantine/linear_scorer/2-inc-7 back to {root}/linear_scorer/2" in out

    ledger = store.ledger("linear_scorer")
    assert not ledger.is_quarantined("2") and ledger.generation == 2
    [lift] = ledger.lifted
    assert (lift.version, lift.by, lift.reason, lift.incidents) == ("2", "alice", reason, ("inc-7",))
    [audit] = store.audit("linear_scorer")
    assert {k: audit[k] for k in ("event", "version", "who", "reason", "incidents", "incident")} == {
        "event": "unquarantined",
        "version": "2",
        "who": "alice",
        "reason": reason,
        "incidents": ["inc-7"],
        "incident": "inc-7",
    }
    assert store.versions("linear_scorer") == ["1", "2"]
    assert hash_directory(root / "linear_scorer" / "2") == original
    assert list((root / ".healer" / "quarantine" / "linear_scorer").iterdir()) == []

    # Promotable again: promote now gets past the quarantine and the store checks to Triton itself
    # (not running here; promoting with a Triton is covered in tests/test_cli_rollback.py).
    assert main(["promote", "--config", str(config), "linear_scorer", "2"]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert "quarantined" not in err and "Triton 127.0.0.1:" in err

    # Not quarantined (any more): a clear error naming the model and the version, nothing written.
    assert main(["store", "--config", str(config), "unquarantine", "linear_scorer", "2", "--reason", "again"]) == 1
    assert capsys.readouterr().err.strip() == (f"healer: linear_scorer v2 is not quarantined in {root}: nothing lifted")
    assert main(["store", "--config", str(config), "unquarantine", "linear_scorer", "1", "--reason", "x"]) == 1
    assert "linear_scorer v1 is not quarantined" in capsys.readouterr().err
    assert store.ledger("linear_scorer").generation == 2 and len(store.audit("linear_scorer")) == 1


def test_store_unquarantine_leaves_an_occupied_slot_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config, root = unquarantine_setup(tmp_path, monkeypatch)
    shutil.copytree(EXAMPLES / "model_repository" / "linear_scorer" / "1", root / "linear_scorer" / "2")
    assert main(["store", "--config", str(config), "unquarantine", "linear_scorer", "2", "--reason", "ok"]) == 0
    out = capsys.readouterr().out
    assert f"{root}/linear_scorer/2 exists: left it, and the quarantined copy" in out
    assert (root / ".healer" / "quarantine" / "linear_scorer" / "2-inc-7" / "model.py").is_file()


@pytest.mark.parametrize(
    ("model", "version", "reason", "problem"),
    [
        ("../x", "2", "ok", "invalid model name '../x'"),
        ("linear_scorer", "0", "ok", "invalid version '0'"),
        ("linear_scorer", "2/../1", "ok", "invalid version"),
        ("linear_scorer", "2", "  ", "--reason must say why"),
    ],
)
def test_store_unquarantine_refuses_bad_names_and_an_empty_reason_with_64(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    model: str,
    version: str,
    reason: str,
    problem: str,
) -> None:
    config, root = unquarantine_setup(tmp_path, monkeypatch)
    assert main(["store", "--config", str(config), "unquarantine", model, version, "--reason", reason]) == EXIT_USAGE
    assert problem in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: --reason is required
        main(["store", "--config", str(config), "unquarantine", "linear_scorer", "2"])
    from healer.store import FilesystemBlobs, ModelStore

    assert ModelStore(FilesystemBlobs(root)).ledger("linear_scorer").is_quarantined("2")
    assert not (root / "linear_scorer" / "2").exists()
