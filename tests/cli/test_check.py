"""`healer check` (the chart's helm test): each check says what it tried; a refused or unreachable
argo-server fails naming the host and the CA it was checked against, and nothing is changed."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest

from healer.cli import main
from healer.install_check import run_checks
from healer.settings import Settings


def test_the_embedded_config_passes_with_nothing_to_reach(example_settings: Settings) -> None:
    checks = {c.name: c for c in run_checks(example_settings)}
    assert all(c.ok for c in checks.values())
    assert "not used (rollback.engine is local)" in checks["argo-server"].detail


def test_an_unreachable_argo_server_fails_naming_host_and_ca(example_settings: Settings, tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    ca = tmp_path / "argo-ca.crt"
    rollback = example_settings.rollback
    argo = dataclasses.replace(rollback.argo, host=f"https://127.0.0.1:{port}", ca_file=ca, request_timeout_s=2)
    settings = dataclasses.replace(example_settings, rollback=dataclasses.replace(rollback, engine="argo", argo=argo))
    [argo_check] = [c for c in run_checks(settings) if c.name == "argo-server"]
    assert not argo_check.ok
    assert f"127.0.0.1:{port}" in argo_check.detail and str(ca) in argo_check.detail


def test_the_command_prints_a_line_per_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--config", "examples/healer.yaml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1].rstrip(":") for line in out] == ["config", "argo-server", "kubernetes-api"]
