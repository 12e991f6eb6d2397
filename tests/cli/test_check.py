"""`healer check` (the chart's helm test): each check says what it tried; a refused or unreachable
argo-server fails naming the host and the CA it was checked against, and nothing is changed."""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

import pytest
import yaml

from healer.cli import main
from healer.cli.install_check import run_checks
from healer.edges.embedded import EmbeddedTriton
from healer.settings import ReplicaSettings, Settings
from tests.conftest import example_config_document


def test_the_embedded_config_passes_with_nothing_to_reach(example_settings: Settings) -> None:
    checks = {c.name: c for c in run_checks(example_settings)}
    assert all(c.ok for c in checks.values() if c.checked)
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


def test_replicas_given_as_addresses_need_no_kubernetes_api(example_settings: Settings) -> None:
    replicas = ReplicaSettings(addresses=("10.0.0.5:8000", "10.0.0.6:8000"))
    settings = dataclasses.replace(
        example_settings, rollback=dataclasses.replace(example_settings.rollback, replicas=replicas)
    )
    [kube] = [c for c in run_checks(settings) if c.name == "kubernetes-api"]
    assert kube.ok and kube.detail == "not used (rollback.replicas.addresses: 2 Tritons)"


def test_the_command_prints_a_line_per_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--config", "examples/healer.yaml"]) == 0
    out = capsys.readouterr().out.splitlines()
    names = [line.split()[1].rstrip(":") for line in out]
    assert names[:3] == ["config", "argo-server", "kubernetes-api"]
    # The golden requests: one line, not checked, while no Triton answers at triton.url; else one per model.
    assert names[3:] in (["golden-requests"], ["golden:linear_scorer", "golden:tiny_classifier"])


def test_golden_requests_are_not_checked_without_a_triton_and_say_so(example_settings: Settings) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    triton = dataclasses.replace(example_settings.triton, url=f"127.0.0.1:{port}")
    [golden] = [c for c in run_checks(dataclasses.replace(example_settings, triton=triton)) if "golden" in c.name]
    assert not golden.ok and not golden.checked  # not done: not ok, and no failure either
    assert golden.detail == f"not checked: Triton at 127.0.0.1:{port} not reachable (connection refused)"


def test_a_check_that_could_not_be_done_is_a_warning_not_ok(
    example_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Triton not reachable from where `healer check` runs (the chart's test pod): the golden requests
    are not checked, and the line says WARN, never `ok`; the exit code is the checks' that were done
    (README: 0 when none failed), so `helm test` does not fail for what it cannot see."""
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    document = example_config_document()
    document["triton"] = {"url": f"127.0.0.1:{port}", "timeout_s": 2.0}
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    assert main(["check", "--config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3] == (
        f"WARN   golden-requests: not checked: Triton at 127.0.0.1:{port} not reachable (connection refused)"
    )
    assert main(["check", "--config", str(config), "-o", "json"]) == 0
    [golden] = [c for c in json.loads(capsys.readouterr().out) if c["name"] == "golden-requests"]
    assert (golden["ok"], golden["checked"]) == (False, False)


def test_a_typo_in_a_golden_request_fails_the_check_naming_its_key(
    triton_server: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An input name the model does not have: Triton would refuse the request, which the probes read as
    the model failing. `healer check` says so, naming the key, before any sidecar runs with it."""
    document = example_config_document()
    document["triton"]["url"] = triton_server.url
    document["models"][0]["golden"]["inputs"][0]["name"] = "FEATURS"
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))

    assert main(["check", "--config", str(config)]) == 1
    lines = {line.split()[1].rstrip(":"): line for line in capsys.readouterr().out.splitlines()}
    assert lines["golden:linear_scorer"] == (
        "FAILED golden:linear_scorer: "
        "models[0].golden.inputs[0].name: linear_scorer v2 has no input 'FEATURS'; its inputs: FEATURES; "
        "models[0].golden.inputs: no 'FEATURES', an input linear_scorer v2 requires (FP32 [-1, 4])"
    )
    assert lines["golden:tiny_classifier"].startswith(
        f"ok     golden:tiny_classifier: fits v2 as Triton at {triton_server.url} serves it"
    )
