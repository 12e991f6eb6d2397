"""rollback.replicas as a list of Triton addresses (no Kubernetes): what loads, what each step lists,
and every bad entry failing with the file and the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.settings import ConfigError, ReplicaSettings, Settings, load_settings
from tests.conftest import EXAMPLES
from tests.support.settings_files import minimal_model
from workflows.plan import ReplicaTarget
from workflows.steps.context import replica_lister


def _path(tmp_path: Path, replicas: Any) -> Path:
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump({"models": [minimal_model()], "rollback": {"replicas": replicas}}), encoding="utf-8")
    return path


def _load(tmp_path: Path, replicas: Any) -> Settings:
    return load_settings(_path(tmp_path, replicas))


def _error(tmp_path: Path, replicas: Any) -> str:
    """The ConfigError message, the file's path written as <file>."""
    path = _path(tmp_path, replicas)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value).replace(str(path), "<file>")


def test_addresses_load_as_written_and_are_listed_as_they_are(tmp_path: Path) -> None:
    settings = _load(tmp_path, {"addresses": ["10.0.0.5:8000", "triton-b.lan:8001", "[fd00::7]:8000"]})
    replicas = settings.rollback.replicas
    assert replicas == ReplicaSettings(addresses=("10.0.0.5:8000", "triton-b.lan:8001", "[fd00::7]:8000"))
    assert replicas.pod_query is None  # nothing asked of the Kubernetes API
    lister = replica_lister(settings)
    assert lister is not None
    assert lister() == [
        ReplicaTarget("10.0.0.5:8000"),
        ReplicaTarget("triton-b.lan:8001"),
        ReplicaTarget("[fd00::7]:8000"),
    ]


def test_a_selector_still_loads_and_queries_its_pods(tmp_path: Path) -> None:
    replicas = _load(tmp_path, {"namespace": "ml", "selector": "app=triton"}).rollback.replicas
    assert replicas is not None
    assert (replicas.pod_query, replicas.port, replicas.addresses) == (("ml", "app=triton"), 8000, ())


def test_unset_replicas_list_nothing(tmp_path: Path) -> None:
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump({"models": [minimal_model()]}), encoding="utf-8")
    assert replica_lister(load_settings(path)) is None


@pytest.mark.parametrize(
    ("replicas", "problem"),
    [
        ({}, "rollback.replicas: needs exactly one of 'selector' (Kubernetes pods) or 'addresses' (a list of Tritons)"),
        (
            {"namespace": "ml", "selector": "app=triton", "addresses": ["10.0.0.5:8000"]},
            "rollback.replicas: needs exactly one of 'selector' (Kubernetes pods) or 'addresses' (a list of Tritons)",
        ),
        (
            {"selector": "app=triton"},
            "rollback.replicas.namespace: is required with selector (the namespace the pods are listed in)",
        ),
        (
            {"addresses": ["10.0.0.5:8000"], "port": 8000},
            "rollback.replicas.port: applies to selector only: with addresses each Triton is given as host:port",
        ),
        (
            {"addresses": ["10.0.0.5:8000"], "namespace": "ml"},
            "rollback.replicas.namespace: applies to selector only: with addresses each Triton is given as host:port",
        ),
        ({"addresses": []}, "rollback.replicas.addresses: must have at least 1 item(s), got 0"),
        ({"addresses": "10.0.0.5:8000"}, "rollback.replicas.addresses: must be a list, got '10.0.0.5:8000'"),
        (
            {"addresses": ["10.0.0.5:8000", "http://10.0.0.6:8000"]},
            "rollback.replicas.addresses[1]: must be host:port without a scheme or path, got 'http://10.0.0.6:8000'",
        ),
        (
            {"addresses": ["10.0.0.5"]},
            "rollback.replicas.addresses[0]: must be host:port without a scheme or path, got '10.0.0.5'",
        ),
        (
            {"addresses": ["10.0.0.5:0"]},
            "rollback.replicas.addresses[0]: port must be a number from 1 to 65535, got '0' in '10.0.0.5:0'",
        ),
        ({"addresses": [8000]}, "rollback.replicas.addresses[0]: must be a non-empty string, got 8000"),
        (
            {"addresses": ["Triton-A:8000", "10.0.0.6:8000", "triton-a:8000"]},
            "rollback.replicas.addresses[2]: duplicate Triton 'triton-a:8000' (also addresses[0])",
        ),
        (
            {"addresses": [{"url": "10.0.0.5:8000"}]},
            "rollback.replicas.addresses[0].url: unknown key (allowed here: sidecar, triton)",
        ),
    ],
)
def test_bad_replicas_name_the_file_and_the_key(tmp_path: Path, replicas: Any, problem: str) -> None:
    assert _error(tmp_path, replicas) == f"<file>: {problem}"


def test_the_sidecar_may_listen_on_a_port_only_the_selector_would_name(tmp_path: Path) -> None:
    """With addresses no Triton runs in a pod beside this sidecar on rollback.replicas.port's default."""
    path = tmp_path / "healer.yaml"
    document = {
        "models": [minimal_model()],
        "rollback": {"replicas": {"addresses": ["10.0.0.5:8000"]}},
        "sidecar": {"listen": "0.0.0.0:8000"},
        "triton": {"url": "10.0.0.9:8001"},
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    assert load_settings(path).sidecar.listen == "0.0.0.0:8000"


def test_the_argo_drill_watches_every_address_and_the_sidecar_beside_each(example_settings: Settings) -> None:
    """The drill's inject-and-wait step (workflows/steps/drill.py) lists the same replicas as the rollback."""
    from workflows.steps.drill import cluster_target

    replicas = ReplicaSettings(addresses=("10.0.0.5:8000", "10.0.0.6:8000"))
    settings = dataclasses.replace(
        example_settings, rollback=dataclasses.replace(example_settings.rollback, replicas=replicas)
    )
    found = cluster_target(settings, "linear_scorer", EXAMPLES / "broken")
    port = settings.sidecar.listen.rpartition(":")[2]
    assert found.target.replicas == ["10.0.0.5:8000", "10.0.0.6:8000"]
    assert found.sidecars == [f"http://10.0.0.5:{port}", f"http://10.0.0.6:{port}"]
