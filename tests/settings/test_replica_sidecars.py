"""rollback.replicas.addresses entries as mappings {triton, sidecar} (issue 29, per-pod repositories):
strings stay accepted, each sidecar is listed beside its Triton, and every bad entry fails naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.core.pod_contract import SIDECAR_PORT
from healer.settings import ConfigError, ReplicaSettings, Settings, load_settings
from tests.support.settings_files import minimal_model
from workflows.plan import ReplicaTarget
from workflows.steps.context import replica_lister
from workflows.steps.per_pod import with_sidecars


def _path(tmp_path: Path, addresses: Any, **top: Any) -> Path:
    path = tmp_path / "healer.yaml"
    document = {"models": [minimal_model()], "rollback": {"replicas": {"addresses": addresses}}, **top}
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def _load(tmp_path: Path, addresses: Any, **top: Any) -> Settings:
    return load_settings(_path(tmp_path, addresses, **top))


def test_mappings_and_strings_load_side_by_side(tmp_path: Path) -> None:
    addresses = [
        {"triton": "10.0.0.5:8000", "sidecar": "10.0.0.5:9090"},
        "10.0.0.6:8000",
        {"triton": "[fd00::7]:8000"},
    ]
    replicas = _load(tmp_path, addresses).rollback.replicas
    assert replicas == ReplicaSettings(
        addresses=("10.0.0.5:8000", "10.0.0.6:8000", "[fd00::7]:8000"), sidecars=("10.0.0.5:9090", "", "")
    )
    assert [replicas.sidecar_of(i) for i in range(3)] == ["10.0.0.5:9090", "", ""]


def test_strings_alone_load_as_before(tmp_path: Path) -> None:
    replicas = _load(tmp_path, ["10.0.0.5:8000"]).rollback.replicas
    assert replicas == ReplicaSettings(addresses=("10.0.0.5:8000",))
    assert replicas is not None and replicas.sidecar_of(0) == ""


def test_per_pod_lists_each_sidecar_named_or_beside_its_triton(tmp_path: Path) -> None:
    addresses = [{"triton": "10.0.0.5:8000", "sidecar": "10.0.0.5:9090"}, "10.0.0.6:8000", "[fd00::7]:8000"]
    settings = _load(tmp_path, addresses, repository_mode="per-pod", sidecar={"listen": "0.0.0.0:8181"})
    lister = replica_lister(settings)
    assert lister is not None
    assert lister() == [
        ReplicaTarget("10.0.0.5:8000", sidecar="10.0.0.5:9090"),
        ReplicaTarget("10.0.0.6:8000", sidecar="10.0.0.6:8181"),  # the Triton's host, sidecar.listen's port
        ReplicaTarget("[fd00::7]:8000", sidecar="[fd00::7]:8181"),
    ]


def test_shared_mode_asks_no_sidecar_unless_one_is_named(tmp_path: Path) -> None:
    lister = replica_lister(_load(tmp_path, ["10.0.0.6:8000", {"triton": "10.0.0.7:8000", "sidecar": "h:1"}]))
    assert lister is not None
    assert lister() == [ReplicaTarget("10.0.0.6:8000"), ReplicaTarget("10.0.0.7:8000", sidecar="h:1")]


def test_kubernetes_pods_are_staged_through_the_injected_sidecars_port(example_settings: Settings) -> None:
    import dataclasses

    per_pod = dataclasses.replace(example_settings, repository_mode="per-pod")
    targets = [ReplicaTarget("10.1.0.4:8000", "triton-0"), ReplicaTarget("", "triton-1", "no pod IP yet")]
    assert with_sidecars(per_pod, targets, kubernetes=True) == [
        ReplicaTarget("10.1.0.4:8000", "triton-0", sidecar=f"10.1.0.4:{SIDECAR_PORT}"),
        ReplicaTarget("", "triton-1", "no pod IP yet"),
    ]


@pytest.mark.parametrize(
    ("addresses", "problem"),
    [
        ([{"sidecar": "10.0.0.5:9090"}], "rollback.replicas.addresses[0].triton: is required"),
        (
            ["10.0.0.4:8000", {"triton": "10.0.0.5:8000", "sidecar": "http://10.0.0.5:9090"}],
            "rollback.replicas.addresses[1].sidecar: must be host:port without a scheme or path, "
            "got 'http://10.0.0.5:9090'",
        ),
        (
            [{"triton": "10.0.0.5", "sidecar": "10.0.0.5:9090"}],
            "rollback.replicas.addresses[0].triton: must be host:port without a scheme or path, got '10.0.0.5'",
        ),
        (
            [{"triton": "10.0.0.5:8000", "sidecar": "10.0.0.5:8000"}],
            "rollback.replicas.addresses[0].sidecar: is the Triton's own address ('10.0.0.5:8000'): name the "
            "healer sidecar beside it",
        ),
        (
            ["10.0.0.5:8000", {"triton": "10.0.0.5:8000", "sidecar": "10.0.0.5:9090"}],
            "rollback.replicas.addresses[1].triton: duplicate Triton '10.0.0.5:8000' (also addresses[0])",
        ),
        ([{"triton": 8000}], "rollback.replicas.addresses[0].triton: must be a non-empty string, got 8000"),
        (
            [{"triton": "10.0.0.5:8000", "port": 9090}],
            "rollback.replicas.addresses[0].port: unknown key (allowed here: sidecar, triton)",
        ),
    ],
)
def test_a_bad_mapping_names_the_file_and_the_key(tmp_path: Path, addresses: Any, problem: str) -> None:
    path = _path(tmp_path, addresses)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert str(info.value) == f"{path}: {problem}"
