"""Every command that names a model or a version acts only on a configured model and a version number
(issue 15, item 9): anything else exits 64 naming the model and the configured ones, and writes nothing.
Real components: a filesystem store and run records in tmp_path; no Triton is needed to be refused."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest
import yaml

from healer.cli import _parser, main
from healer.cli.common import NAMED_ARGUMENTS
from healer.cli.output import EXIT_USAGE
from healer.edges.embedded import free_port
from tests.conftest import EXAMPLES, example_config_document


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The example config over a filesystem store in tmp_path (linear_scorer v1, v2), its run records
    there too, and a Triton that is not running: nothing refused here may get as far as Triton."""
    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    root = tmp_path / "store"
    shutil.copytree(EXAMPLES / "model_repository" / "linear_scorer", root / "linear_scorer")
    document = example_config_document()
    document["models"] = document["models"][:2]  # the two the message below names
    document["triton"] = {"url": f"127.0.0.1:{free_port()}", "timeout_s": 1.0}
    document["store"] = {"filesystem": {"root": str(root)}}
    document["rollback"] = {"state_dir": str(tmp_path / "runs")}
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    return config, tmp_path


UNKNOWN = "unknown model 'nosuchmodel': {config} configures linear_scorer, tiny_classifier"


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["rollback", "nosuchmodel", "3"], "rollback: " + UNKNOWN),
        (["rollback", "linear_scorer", "../../2"], "rollback: invalid version '../../2' (a positive integer)"),
        (["rollback", "linear_scorer", "v3"], "rollback: invalid version 'v3' (a positive integer)"),
        (["rollback", "../x", "3"], "rollback: invalid model name '../x'"),
        (["promote", "nosuchmodel", "2", "--by", "alice"], "promote: " + UNKNOWN),
        (["promote", "linear_scorer", "0", "--by", "alice"], "promote: invalid version '0' (a positive integer)"),
        (["store", "unquarantine", "nosuchmodel", "2", "--reason", "ok"], "store unquarantine: " + UNKNOWN),
        (["store", "ls", "nosuchmodel"], "store ls: " + UNKNOWN),
        (["drill", "--target", "config", "--model", "nosuchmodel"], "drill: " + UNKNOWN),
    ],
)
def test_a_model_not_in_the_config_or_a_bad_version_is_refused_before_anything_is_written(
    setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str], argv: list[str], problem: str
) -> None:
    config, tmp_path = setup
    before = _files(tmp_path)
    assert main([argv[0], "--config", str(config), *argv[1:]]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.strip() == f"healer: {problem.format(config=config)}", err
    assert _files(tmp_path) == before  # no run record, no quarantine, no audit record, no lease


def test_a_rollback_of_an_unknown_model_submits_nothing_to_argo_either(
    setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """With engine argo, an unknown model used to reach argo-server (and its exit handler alerted)."""
    config, _ = setup
    document = yaml.safe_load(config.read_text())
    # Nothing listens there: a submission would fail with "not submitted" (exit 3), not a usage error.
    document["rollback"].update(engine="argo", argo={"host": f"http://127.0.0.1:{free_port()}"})
    config.write_text(yaml.safe_dump(document))
    assert main(["rollback", "--config", str(config), "nosuchmodel", "3"]) == EXIT_USAGE
    assert "unknown model 'nosuchmodel'" in capsys.readouterr().err


def test_every_argument_that_names_a_model_or_a_version_is_checked() -> None:
    """A new command taking MODEL or VERSION gets the check without being listed anywhere else."""
    parser, _ = _parser()
    found: set[str] = set()
    todo = [parser]
    while todo:
        current = todo.pop()
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(dict.fromkeys(action.choices.values()))
            elif action.metavar in {"MODEL", "VERSION", "FROM_VERSION"} or action.dest == "model":
                found.add(action.dest)
    assert found == {"model", "version", "from_version"}
    assert found <= set(NAMED_ARGUMENTS)


# ---- addresses and deadlines given on the command line: the same checks as in healer.yaml --------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (
            "alice:s3cr3t@127.0.0.1:8000",
            "must not carry credentials (user:password@): they would be written to logs and output; "
            "got '***@127.0.0.1:8000'",
        ),
        ("127.0.0.1:abc", "port must be a number from 1 to 65535, got 'abc' in '127.0.0.1:abc'"),
        ("127.0.0.1:99999", "port must be a number from 1 to 65535, got '99999' in '127.0.0.1:99999'"),
        ("http://127.0.0.1:8000", "must be host:port without a scheme or path, got 'http://127.0.0.1:8000'"),
    ],
)
def test_probe_url_is_checked_like_triton_url(
    setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str], url: str, problem: str
) -> None:
    config, _ = setup
    assert main(["probe", "--config", str(config), "--url", url]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.err.strip() == f"healer: probe: --url: {problem}"
    assert "s3cr3t" not in captured.out + captured.err and captured.out == ""


@pytest.mark.subprocess
@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "[::]:{triton}"])
def test_sidecar_listen_flag_is_checked_like_sidecar_listen(setup: tuple[Path, Path], listen: str) -> None:
    import subprocess
    import sys

    config, _ = setup
    triton_port = yaml.safe_load(config.read_text())["triton"]["url"].rsplit(":", 1)[1]
    listen = listen.format(triton=triton_port)
    healer = Path(sys.executable).parent / "healer"
    done = subprocess.run(
        [str(healer), "sidecar", "--config", str(config), "--listen", listen],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == EXIT_USAGE, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("healer: sidecar: --listen: ") and listen in line, line
    if listen.startswith("[::]"):
        assert f"port {triton_port} is Triton's (triton.url '127.0.0.1:{triton_port}')" in line


@pytest.mark.parametrize("deadline", ["0", "-5", "3601", "36000"])
def test_render_deadline_is_bounded_like_rollback_deadline_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deadline: str
) -> None:
    assert main(["render", "--deadline", deadline, "--out", str(tmp_path / "out")]) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == (
        f"healer: render: --deadline: must be from 1 to 3600 seconds (as rollback.deadline_s), got {deadline}"
    )
    assert not (tmp_path / "out").exists()
