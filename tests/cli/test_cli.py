"""`healer probe` and `healer demo` end to end, against the real tritonserver."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.cli import _parser, main
from healer.cli.output import EXIT_CODES, EXIT_REFUSED, EXIT_USAGE
from healer.edges.embedded import EmbeddedTriton, free_port
from healer.settings import ModelSettings, load_settings
from tests.conftest import EXAMPLE_CONFIG, EXAMPLES, example_config_document

Deploy = Callable[..., ModelSettings]


def write_config(tmp_path: Path, **model_overrides: object) -> Path:
    """The example config with absolute paths and the given changes to the first model."""
    document = example_config_document()
    document["models"][0].update(model_overrides)
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def configured() -> tuple[str, ...]:
    """Every model examples/healer.yaml configures (the dense models, and the models of their own since)."""
    return tuple(m.name for m in load_settings(EXAMPLE_CONFIG).models)


def test_probe_json_lists_every_tier_for_every_model(
    triton_server: EmbeddedTriton, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["probe", "--config", str(EXAMPLE_CONFIG), "--url", triton_server.url, "--json"])
    results = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {(r["model"], r["tier"]) for r in results} == {
        (m, t) for m in configured() for t in ("liveness", "readiness", "business")
    }
    assert {r["status"] for r in results} == {"pass"}
    assert set(results[0]) == {"model", "version", "tier", "status", "latency_ms", "reason", "details"}


def test_probe_outputs_yaml_names_and_a_wide_row_per_tier(
    triton_server: EmbeddedTriton, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["probe", "--config", str(EXAMPLE_CONFIG), "--url", triton_server.url]
    assert main([*base, "-o", "yaml"]) == 0
    assert {(r["model"], r["tier"], r["status"]) for r in yaml.safe_load(capsys.readouterr().out)} == {
        (m, t, "pass") for m in configured() for t in ("liveness", "readiness", "business")
    }
    assert main([*base, "-o", "name"]) == 0
    names = capsys.readouterr().out.split()
    assert names[:2] == ["linear_scorer/2", "tiny_classifier/2"]
    assert [n.split("/")[0] for n in names] == list(configured())
    assert main([*base, "--output", "wide"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["MODEL", "VERSION", "TIER", "STATUS", "LATENCY", "CODE", "REASON"]
    assert sorted((row.split()[0], row.split()[2], row.split()[3]) for row in rows) == sorted(
        (m, t, "pass") for m in configured() for t in ("liveness", "readiness", "business")
    )


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


def test_probe_exit_1_when_a_live_and_ready_model_hangs(
    tmp_path: Path, triton_server: EmbeddedTriton, deploy: Deploy, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = deploy("linear_scorer", {3: ("broken", "slow")})
    config = write_config(tmp_path, name=slow.name)
    document = yaml.safe_load(config.read_text())
    document["models"][0]["golden"].update(timeout_s=0.1, latency_slo_ms=50)
    config.write_text(yaml.safe_dump(document))
    code = main(["probe", "--config", str(config), "--url", triton_server.url, "--json"])
    results = json.loads(capsys.readouterr().out)
    # Live and ready in the same cycle, then no answer: the model hangs, a fail (not "inconclusive").
    # Exit 2 for errors only is covered by tests/probes/test_probes_triton.py::test_errors_only_exit_code.
    assert code == 1
    business = next(r for r in results if r["model"] == slow.name and r["tier"] == "business")
    assert (business["status"], business["code"]) == ("fail", "timeout")


def test_probe_asks_a_slow_first_answer_again_and_fails_only_a_consistently_slow_model(
    tmp_path: Path,
    triton_server: EmbeddedTriton,
    deploy: Deploy,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The first golden request after a start, on a busy machine, was answered in 143.5 ms against the
    100 ms SLO and `healer probe` (and the demo) said FAIL. One slow answer is not a verdict: the
    command asks a correct but slow answer again, best of 3. Here the first request is held 0.5 s
    (linear_scorer's, SLO raised to 400 ms so its warm answers are under it on any machine); the
    `slow` variant answers every request 250 ms late against its 100 ms SLO and still fails."""
    import time

    import healer.edges.triton

    slow = deploy("linear_scorer", {3: ("broken", "slow")})
    document = example_config_document()
    document["models"][0]["golden"].update(latency_slo_ms=400, timeout_s=5.0)
    document["models"][1] = {**document["models"][0], "name": slow.name}
    document["models"][1]["golden"] = {**document["models"][1]["golden"], "latency_slo_ms": 100, "timeout_s": 2.0}
    document["models"] = document["models"][:2]  # these two only: the example's other models are not slow
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    infers: list[str] = []

    class SlowFirst(healer.edges.triton.TritonHttp):
        def infer(self, model: str, *args: Any, **kwargs: Any) -> Any:
            infers.append(model)
            if len(infers) == 1:
                time.sleep(0.5)
            return super().infer(model, *args, **kwargs)

    monkeypatch.setattr(healer.edges.triton, "TritonHttp", SlowFirst)
    code = main(["probe", "--config", str(config), "--url", triton_server.url])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[:5] for line in out.splitlines() if line.startswith("linear_scorer")}
    assert rows["linear_scorer"] == ["linear_scorer", "2", "pass", "pass", "pass"], out
    assert rows[slow.name] == [slow.name, "3", "pass", "pass", "FAIL"], out
    assert f"{slow.name} v3 business fail: correct answer but slow: " in out
    assert "(the best of 3 answers: " in out
    assert infers == ["linear_scorer", "linear_scorer", slow.name, slow.name, slow.name]
    assert code == 1


def test_bad_config_exits_64_naming_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, extra_key=1)
    code = main(["probe", "--config", str(config)])
    assert code == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    # One line naming the file, the key and the keys allowed there (the list grows with the settings).
    assert err.startswith(f"healer: {config}: models[0].extra_key: unknown key (allowed here: agreement, calls, "), err
    assert err.endswith(", name, required, version)") and "\n" not in err, err


@pytest.mark.triton
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
    from healer.core.ledger import QuarantineRecord
    from healer.edges.store import FilesystemBlobs, ModelStore, quarantine_live_version

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
    from healer.edges.store import FilesystemBlobs, ModelStore, hash_directory

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
    assert f"moved {root}/linear_scorer/.healer-quarantine/2-inc-7 back to {root}/linear_scorer/2" in out

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
    assert list((root / "linear_scorer" / ".healer-quarantine").iterdir()) == []

    # Promotable again: promote now gets past the quarantine and the store checks to Triton itself
    # (not running here; promoting with a Triton is covered in tests/cli/test_cli_rollback.py).
    assert main(["promote", "--config", str(config), "linear_scorer", "2"]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert "quarantined" not in err and "cannot reach Triton at 127.0.0.1:" in err and "nothing promoted" in err

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
    assert (root / "linear_scorer" / ".healer-quarantine" / "2-inc-7" / "model.py").is_file()


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
    # argparse: --reason is required; a usage error is 64 like any other
    assert main(["store", "--config", str(config), "unquarantine", "linear_scorer", "2"]) == EXIT_USAGE
    from healer.edges.store import FilesystemBlobs, ModelStore

    assert ModelStore(FilesystemBlobs(root)).ledger("linear_scorer").is_quarantined("2")
    assert not (root / "linear_scorer" / "2").exists()


# ---- command-line conventions (no Triton) ---------------------------------------------------------


def run_record(name: str, *, phase: str = "Succeeded", pod: str = "triton-0", message: str = "") -> dict[str, object]:
    """A run record as the LocalEngine writes it (Argo's Workflow shape), finished."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "healer.io/model": "linear_scorer",
                "healer.io/from-version": "3",
                "healer.io/to-version": "auto",
                "healer.io/incident": f"inc-{name[-4:]}",
            },
            "annotations": {"workflows.argoproj.io/title": "Rollback linear_scorer v3 → stable"},
        },
        "spec": {
            "arguments": {"parameters": [{"name": "model", "value": "linear_scorer"}, {"name": "pod", "value": pod}]}
        },
        "status": {
            "phase": phase,
            "message": message,
            "startedAt": "2026-01-01T00:00:01Z",
            "finishedAt": "2026-01-01T00:00:05Z",
            "nodes": {
                f"{name}[0].heal": {
                    "id": f"{name}[0].heal",
                    "name": f"{name}[0].heal(0)",
                    "displayName": "heal",
                    "templateName": "heal",
                    "type": "Pod",
                    "phase": phase,
                    "startedAt": "2026-01-01T00:00:01Z",
                    "finishedAt": "2026-01-01T00:00:05Z",
                    "outputs": {
                        "parameters": [
                            {"name": "to-version", "value": "2"},
                            {
                                "name": "phases",
                                "value": json.dumps([{"name": "lease", "outcome": "ok", "duration_s": 0.1}]),
                            },
                        ]
                    },
                }
            },
        },
    }


@pytest.fixture
def runs_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config whose state_dir holds two finished runs; HEALER_CONFIG unset."""
    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    config = write_config(tmp_path)
    document = yaml.safe_load(config.read_text())
    document["rollback"] = {"state_dir": str(tmp_path / "runs")}
    config.write_text(yaml.safe_dump(document))
    (tmp_path / "runs").mkdir()
    for name, phase, message in (
        ("healer-rollback-linear-scorer-0000000001", "Succeeded", ""),
        ("healer-rollback-linear-scorer-0000000002", "Failed", "heal: no stable version"),
    ):
        (tmp_path / "runs" / f"{name}.json").write_text(json.dumps(run_record(name, phase=phase, message=message)))
    return config


@pytest.mark.parametrize(
    "argv",
    [
        ["nope"],
        ["probe", "--no-such-flag"],
        ["probe", "--config", "x.yaml", "-o", "xml"],
        ["runs", "--config", "x.yaml", "get"],
        ["rollback", "--config", "x.yaml", "only_a_model"],
        ["store", "--config", "x.yaml"],
    ],
)
def test_usage_errors_exit_64_not_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """2 is probe's "inconclusive, retry later": a typo must not read as that."""
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: healer") and "error:" in err


@pytest.mark.subprocess
def test_usage_error_of_the_installed_command_exits_64() -> None:
    healer = Path(sys.executable).parent / "healer"
    done = subprocess.run([str(healer), "probe", "-o", "xml"], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_USAGE
    assert "invalid choice: 'xml'" in done.stderr and done.stdout == ""


def test_no_config_names_both_the_flag_and_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    for argv in (["probe"], ["runs", "list"], ["store", "ls"], ["rollback", "m", "2"]):
        assert main(argv) == EXIT_USAGE
        err = capsys.readouterr().err
        assert "--config FILE" in err and "HEALER_CONFIG" in err, err
    monkeypatch.setenv("HEALER_CONFIG", "")  # empty is unset, not the current directory
    assert main(["probe"]) == EXIT_USAGE


def test_healer_config_is_the_default_and_config_wins(
    tmp_path: Path, runs_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HEALER_CONFIG", str(runs_config))
    assert main(["runs", "list", "-o", "name"]) == 0
    assert capsys.readouterr().out.split() == [
        "healer-rollback-linear-scorer-0000000001",
        "healer-rollback-linear-scorer-0000000002",
    ]
    missing = tmp_path / "missing.yaml"
    assert main(["probe", "--config", str(missing)]) == EXIT_USAGE
    assert f"healer: {missing}: cannot read file" in capsys.readouterr().err
    monkeypatch.setenv("HEALER_CONFIG", str(missing))
    assert main(["store", "ls"]) == EXIT_USAGE
    assert f"healer: {missing}: cannot read file" in capsys.readouterr().err


def test_version_comes_from_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"healer {version('healer')}"


def _all_parsers() -> list[argparse.ArgumentParser]:
    parser, _ = _parser()
    found, todo = [], [parser]
    while todo:
        current = todo.pop()
        found.append(current)
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(dict.fromkeys(action.choices.values()))  # aliases share a parser
    return found


def test_every_argument_has_help_and_every_command_an_epilog_with_its_exit_codes() -> None:
    parsers = _all_parsers()
    assert len(parsers) == 1 + len(EXIT_CODES) + 8  # healer, its commands, 4 store and 4 runs subcommands
    for parser in parsers:
        for action in parser._actions:
            if action.help != argparse.SUPPRESS:
                assert action.help, f"{parser.prog}: {action.dest} has no help"
        if parser.prog == "healer":
            continue
        command = parser.prog.split()[1]
        assert "examples:\n  " in (parser.epilog or "") and f"healer {command}" in (parser.epilog or ""), parser.prog
        for code, meaning in EXIT_CODES[command]:
            assert f"  {code:<4}{meaning}" in (parser.epilog or ""), (parser.prog, code)


def test_top_level_help_says_what_healer_is_and_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "self-healing controller for NVIDIA Triton" in out
    for command in EXIT_CODES:
        assert re.search(rf"^    {command}\s+\S", out, re.MULTILINE), command
    assert "exit codes:" in out


def test_readme_exit_code_table_matches_the_commands() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme[readme.index("### Exit codes") :].split("\n\n")[1]
    rows = {int(line.split("|")[1]): line.split("|")[3] for line in table.splitlines()[2:]}
    for command, codes in EXIT_CODES.items():
        for code, _meaning in codes:
            assert "all" in rows[code] or command in rows[code], (command, code)


def test_log_level_help_tells_where_logs_go(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert (
        "(default: warning, so a person's output is the results; info for `healer sidecar` and `healer webhook`)"
        in (help_text)
    )
    assert "on stdout for `healer sidecar`" in help_text and "on stderr for every other command" in help_text


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        ([], None),  # quiet: a person's output is the results
        (["-v"], "info"),
        (["runs", "-v"], "info"),  # after the command too
        (["--log-level", "info"], "info"),
        (["runs", "--log-level", "info"], "info"),
    ],
    ids=["default", "-v", "-v-after", "--log-level", "--log-level-after"],
)
def test_people_get_results_and_logs_only_when_asked(
    flags: list[str], level: str | None, runs_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 19: info-level JSON lines mixed into human output; --log-level only before the command."""
    from healer.edges.logs import get_logger

    argv = (
        [*flags, "--config", str(runs_config)]
        if flags[:1] == ["runs"]
        else [*flags, "runs", "--config", str(runs_config)]
    )
    assert main(argv) == 0
    get_logger("healer.test").info("state_changed", model="m")  # as configured by the command
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    if level is None:
        assert lines == []
    else:
        [line] = lines
        assert json.loads(line)["event"] == "state_changed" and json.loads(line)["level"] == level
    assert "state_changed" not in captured.out


def test_the_daemons_log_at_info_by_default() -> None:
    from healer.cli import _parser
    from healer.cli.common import log_level_for

    parser, _ = _parser()
    assert log_level_for(parser.parse_args(["sidecar", "--config", "x"])) == "info"
    assert (
        log_level_for(parser.parse_args(["webhook", "--tls-cert", "c", "--tls-key", "k", "--injection", "i"])) == "info"
    )
    assert log_level_for(parser.parse_args(["sidecar", "--config", "x", "--log-level", "error"])) == "error"


def test_runs_list_and_get_in_every_output(runs_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = "healer-rollback-linear-scorer-0000000001", "healer-rollback-linear-scorer-0000000002"
    # `runs` bare and `runs list`, --config before or after the subcommand: the same table.
    tables = []
    for argv in (["runs", "--config", str(runs_config)], ["runs", "list", "--config", str(runs_config)]):
        assert main(argv) == 0
        tables.append(capsys.readouterr().out)
    assert tables[0] == tables[1]
    header, *rows = tables[0].splitlines()
    assert header.split() == ["NAME", "STATUS", "AGE", "DURATION", "MODEL", "FROM→TO", "INCIDENT"]
    assert sorted(row.split()[:2] for row in rows) == [[first, "Succeeded"], [second, "Failed"]]
    assert all(row.split()[3:6] == ["4s", "linear_scorer", "v3→2"] for row in rows)

    assert main(["runs", "--config", str(runs_config), "list", "-o", "wide"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[-2:] == ["POD", "MESSAGE"]
    assert next(row for row in rows if row.startswith(second)).endswith("triton-0  heal: no stable version")

    assert main(["runs", "--config", str(runs_config), "-o", "json"]) == 0
    assert sorted(r["metadata"]["name"] for r in json.loads(capsys.readouterr().out)) == [first, second]
    assert main(["runs", "list", "--config", str(runs_config), "-o", "yaml"]) == 0
    assert sorted(r["metadata"]["name"] for r in yaml.safe_load(capsys.readouterr().out)) == [first, second]

    for verb in ("get", "show"):
        assert main(["runs", "--config", str(runs_config), verb, second]) == 0
        shown = capsys.readouterr().out
        assert f"Name:        {second}" in shown and "Message:     heal: no stable version" in shown
        assert re.search(r"^  └ lease\s+ok\s+0.1$", shown, re.MULTILINE), shown
    assert main(["runs", "get", second, "--config", str(runs_config), "-o", "wide"]) == 0
    wide = capsys.readouterr().out
    assert re.search(
        rf"^heal\s+heal\s+Failed\s+4s\s+2026-01-01T00:00:01Z\s+{re.escape(second)}\[0\]\.heal\s", wide, re.M
    )
    assert main(["runs", "--config", str(runs_config), "show", first, "--json"]) == 0  # the old flag
    assert json.loads(capsys.readouterr().out)["metadata"]["name"] == first
    assert main(["runs", "--config", str(runs_config), "get", first, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["status"]["phase"] == "Succeeded"
    assert main(["runs", "--config", str(runs_config), "get", first, "-o", "name"]) == 0
    assert capsys.readouterr().out == f"{first}\n"

    assert main(["runs", "--config", str(runs_config), "get", "healer-rollback-nope"]) == 1  # like kubectl get
    assert "no run 'healer-rollback-nope'" in capsys.readouterr().err


def test_store_ls_in_every_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _root = unquarantine_setup(tmp_path, monkeypatch)
    monkeypatch.setenv("HEALER_CONFIG", str(config))
    assert main(["store", "ls", "-o", "name"]) == 0
    assert capsys.readouterr().out.split() == ["linear_scorer/1", "linear_scorer/2"]
    assert main(["store", "ls", "linear_scorer", "-o", "wide"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()[1:]
    assert header.split() == ["MODEL", "VERSION", "STATE", "BY", "AT"]
    assert rows[1].split()[-2:] == ["healer", "t"]  # who quarantined it, and when
    assert main(["store", "--json", "ls"]) == EXIT_USAGE  # --json belongs to ls, as before
    capsys.readouterr()
    for flag in (["--json"], ["-o", "json"]):
        assert main(["store", "ls", *flag]) == 0
        [entry] = json.loads(capsys.readouterr().out)
        assert entry["versions"] == ["1"] and entry["quarantined"][0]["incident"] == "inc-7"
    assert main(["store", "ls", "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)[0]["model"] == "linear_scorer"


def test_store_stage_reads_the_stable_versions_in_full_and_refuses_a_changed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.core.ledger import StableRecord
    from healer.edges.store import FilesystemBlobs, ModelStore, stamped_hashes

    config, root = unquarantine_setup(tmp_path, monkeypatch)  # the store is the live repository
    store = ModelStore(FilesystemBlobs(root))
    record = StableRecord(
        version="1", files=store.version_files("linear_scorer", "1"), promoted_at="t", promoted_by="a"
    )
    store.update_ledger("linear_scorer", lambda ledger: ledger.with_stable(record))
    assert main(["store", "stage", "--config", str(config), "-o", "json"]) == 0
    [staged] = json.loads(capsys.readouterr().out)
    assert (staged["model"], staged["version"], staged["outcome"]) == ("linear_scorer", "1", "verified")
    assert stamped_hashes(root / "linear_scorer" / "1") == dict(record.files)
    (root / "linear_scorer" / "1" / "params.json").write_text("{}")
    assert main(["store", "stage", "linear_scorer", "--config", str(config)]) == EXIT_REFUSED
    out = capsys.readouterr().out
    assert "linear_scorer v1: refused" in out and "params.json" in out, out
    assert stamped_hashes(root / "linear_scorer" / "1") is None


# ---- unreadable YAML: exit 64 naming the file, never a traceback ------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("? [a, b]: 1\n", "(top level): mapping keys must be strings, got a mapping as a key on line 1"),
        ("[a, b]: 1\n", "(top level): mapping keys must be strings, got a list as a key on line 1"),
        (
            "models:\n  - name: m\n    golden:\n      ? [x]\n      : 1\n",
            "models[0].golden: mapping keys must be strings, got a list as a key on line 4",
        ),
        ("models:\n  - {name: m, 7: x}\n", "models[0]: mapping keys must be strings, got '7', read as int (quote it"),
        ("[" * 10_000 + "\n", "nested more than 100 levels deep (line 1, column 101)"),
        ("[" * 10_000 + "]" * 10_000 + "\n", "nested more than 100 levels deep"),
        ("models:\n" + "  " * 0 + "- " * 5_000 + "x\n", "nested more than 100 levels deep"),
        ("models: [\n", "not valid YAML"),
    ],
)
def test_unreadable_yaml_exits_64_naming_the_file(
    tmp_path: Path, text: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "healer.yaml"
    config.write_text(text)
    assert main(["probe", "--config", str(config)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"healer: {config}: ") and problem in err, err
    assert "Traceback" not in err


def test_a_tensor_nested_as_deep_as_numpy_allows_is_still_read(tmp_path: Path) -> None:
    """The depth limit leaves room for any real config: a rank-32 golden tensor is read."""
    from healer.settings import load_settings

    config = write_config(tmp_path)
    document = yaml.safe_load(config.read_text())
    rank = 32
    value: object = 1.0
    for _ in range(rank):
        value = [value]
    document["models"][0]["golden"]["inputs"][0].update(shape=[1] * rank, data=value)
    config.write_text(yaml.safe_dump(document))
    settings = load_settings(config)
    assert settings.models[0].golden.inputs[0].values.shape == (1,) * rank


def test_cli_habits(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19's CLI habits: `drill --list` needs no config; `store list` (ls still works); drill
    offers no `-o name` it would refuse; promote's help says it is not Argo Rollouts' promote."""
    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    assert main(["drill", "--list"]) == 0
    assert "wrong-weights" in capsys.readouterr().out
    assert main(["drill", "-o", "name", "--config", str(EXAMPLE_CONFIG)]) == EXIT_USAGE
    assert "invalid choice: 'name'" in capsys.readouterr().err
    parser, _ = _parser()
    assert parser.parse_args(["store", "list"]).store_command == "list"
    assert parser.parse_args(["store", "ls"]).store_command == "ls"
    assert main(["promote", "--help"]) == 0
    assert "unlike `kubectl argo rollouts promote`" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("text", "token"),
    [("abc.def\n", "abc.def"), ("Bearer abc.def\n", "abc.def"), ("bearer  abc ", "abc"), ("Bearer", "Bearer")],
)
def test_a_token_file_with_or_without_its_bearer_prefix(text: str, token: str) -> None:
    from healer.engines.factory import bearer_token

    assert bearer_token(text) == token
