"""`healer promote` with Triton not reachable: it asks Triton first, before any work that writes, so it
says the one line and exits 3 with nothing written: no `.healer-verified` stamp beside the version (the
store's model folder is the live repository in examples/healer.yaml), no ledger, the version not hashed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from healer.cli import main
from healer.cli.output import EXIT_REFUSED
from healer.edges.embedded import free_port
from tests.conftest import EXAMPLES, example_config_document


def tree(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_promote_with_triton_refused_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repository = tmp_path / "model_repository"
    shutil.copytree(EXAMPLES / "model_repository" / "linear_scorer", repository / "linear_scorer")
    document = example_config_document()
    url = f"127.0.0.1:{free_port()}"  # nothing listens: refused
    document["triton"] = {"url": url, "timeout_s": 2.0}
    document["store"] = {"filesystem": {"root": str(repository)}}
    document["rollback"] = {"state_dir": str(tmp_path / "runs")}
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    before = tree(repository)

    assert main(["promote", "--config", str(config), "linear_scorer", "2", "--by", "alice"]) == EXIT_REFUSED
    captured = capsys.readouterr()
    assert captured.err == f"healer: error: cannot reach Triton at {url}: connection refused; nothing promoted\n"
    assert captured.out == ""
    assert tree(repository) == before  # no stamp, no ledger, nothing else
    assert not list(repository.rglob(".healer-verified"))
