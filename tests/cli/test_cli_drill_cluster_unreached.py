"""`healer drill --target cluster` through the Kubernetes API with its API server not reachable: asked
once before the first scenario, it fails with the one line `healer status` prints for the same
kubeconfig, exit 1, and no scenario is tried (each used to 'miss' with urllib3's MaxRetryError dump).
The API server is a real loopback port nothing listens on."""

from __future__ import annotations

from pathlib import Path

import pytest

from healer.cli import main
from tests.cli.test_cli_reach import no_kube, one_line, refused
from tests.conftest import EXAMPLES

__all__ = ["no_kube", "refused"]  # fixtures, used by name


def test_drill_on_an_unreachable_api_server_fails_once_as_status_does(
    no_kube: Path, refused: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    config, _server = refused
    assert main(["status", "-n", "ml", "--kubeconfig", str(config)]) == 1
    said = one_line(capsys.readouterr().err)
    argv = ["drill", "--target", "cluster", "--kubeconfig", str(config), "--config", str(EXAMPLES / "healer.yaml")]
    assert main([*argv, "wrong-weights", "bad-config"]) == 1
    captured = capsys.readouterr()
    assert one_line(captured.err) == said
    assert captured.out == ""  # not even the header: no scenario was started
