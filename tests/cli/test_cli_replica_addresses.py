"""Replicas anywhere (issue 29 item 3): two real Tritons listed in healer.yaml's
`rollback.replicas.addresses`, no Kubernetes. `healer rollback` heals a wrong-weights version on both
(the stable version verified on the canary before the other replica is touched) and `healer release`
rolls a good version out to both, each through the configuration file alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from healer.cli import main
from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.edges.triton import TritonHttp
from tests.conftest import EXAMPLES
from tests.support.rollback_stack import VersionSource, serve_versions, write_model

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def second_triton(triton_server: EmbeddedTriton, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    """The second Triton, on the same live repository, for the module (each test loads its own model)."""
    with EmbeddedTriton(
        triton_server.model_repository, load_models=[], workdir=tmp_path_factory.mktemp("addresses-replica")
    ) as second:
        yield second


def _config(tmp_path: Path, triton_server: EmbeddedTriton, second: EmbeddedTriton, name: str) -> Path:
    """healer.yaml for model ``name`` whose replicas are the two Tritons' addresses."""
    document = yaml.safe_load((EXAMPLES / "healer.yaml").read_text())
    document.pop("embedded")
    golden = {**document["models"][0]["golden"], "latency_slo_ms": 2000, "timeout_s": 5}  # a busy 2-core box
    document["models"] = [{**document["models"][0], "name": name, "golden": golden}]
    document["triton"]["url"] = triton_server.url
    document["store"] = {"filesystem": {"root": str(tmp_path / "store")}}
    document["live_repository"] = str(triton_server.model_repository)
    document["rollback"] = {
        "state_dir": str(tmp_path / "runs"),
        "replicas": {"addresses": [triton_server.url, second.url]},
    }
    document["release"] = {"bake_s": 0.5, "check_interval_s": 0.1}
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    return config


def _both_serving(
    tmp_path: Path,
    triton_server: EmbeddedTriton,
    second: EmbeddedTriton,
    name: str,
    versions: dict[int, VersionSource],
    serve: int,
) -> tuple[Path, list[TritonHttp]]:
    """``name``'s versions in the store and the live repository, v1 promoted stable by alice, then
    version ``serve`` served on both Tritons; the config file and a client per Triton."""
    write_model(tmp_path / "store", "linear_scorer", name, versions)
    write_model(triton_server.model_repository, "linear_scorer", name, versions)
    config = _config(tmp_path, triton_server, second, name)
    first, other = TritonHttp(triton_server.url, timeout_s=5), TritonHttp(second.url, timeout_s=5)
    first.load_model(name, timeout_s=180)
    serve_versions(first, name, [1])
    assert main(["promote", "--config", str(config), name, "1", "--by", "alice"]) == 0
    pinned = first.model_config(name)
    pinned["version_policy"] = {"specific": {"versions": [serve]}}
    for triton in (first, other):
        triton.load_model(name, config=json.dumps(pinned), timeout_s=180)
    return config, [first, other]


def test_a_rollback_heals_every_address_without_kubernetes(
    tmp_path: Path, triton_server: EmbeddedTriton, second_triton: EmbeddedTriton, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "addresses_rollback"
    versions: dict[int, VersionSource] = {1: ("good", "1"), 2: ("broken", "wrong_weights")}
    config, tritons = _both_serving(tmp_path, triton_server, second_triton, name, versions, serve=2)
    try:
        assert [t.served_versions(name) for t in tritons] == [["2"], ["2"]]
        capsys.readouterr()
        code = main(["rollback", "--config", str(config), name, "2", "--incident", "inc-addresses", "-o", "json"])
        shown = json.loads(capsys.readouterr().out)
        assert code == 0, shown
        assert [t.served_versions(name) for t in tritons] == [["1"], ["1"]]
        phases = {p["name"]: p for p in json.loads(shown["outputs"]["phases"])}
        restore = phases["restore"]["outputs"]
        urls = [triton_server.url, second_triton.url]
        assert set(restore["replicas"]) == set(urls)
        assert restore["waves"] == [[urls[0]], [urls[1]]]  # the canary verified alone, then the other
        assert all(r["verify"]["status"] == "pass" for r in restore["replicas"].values())
        ledger = ModelStore(FilesystemBlobs(tmp_path / "store")).ledger(name)
        assert ledger.is_quarantined("2")
        assert (tmp_path / "store" / name / "2").is_dir()  # nothing deleted from the store
    finally:
        for triton in tritons:
            triton.unload_model(name)
            triton.close()


def test_a_release_reaches_every_address_without_kubernetes(
    tmp_path: Path, triton_server: EmbeddedTriton, second_triton: EmbeddedTriton, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "addresses_release"
    versions: dict[int, VersionSource] = {1: ("good", "1"), 2: ("good", "2")}
    config, tritons = _both_serving(tmp_path, triton_server, second_triton, name, versions, serve=1)
    try:
        assert [t.served_versions(name) for t in tritons] == [["1"], ["1"]]
        capsys.readouterr()
        code = main(["release", "--config", str(config), name, "2", "--release", "rel-addresses"])
        out = capsys.readouterr().out
        assert code == 0, out
        for line in ("  canary: Succeeded", "  bake: Succeeded", "  roll-out: Succeeded"):
            assert line in out, out
        assert f"released {name} v2: every replica serves it, promoted stable" in out
        assert [t.served_versions(name) for t in tritons] == [["2"], ["2"]]
        assert ModelStore(FilesystemBlobs(tmp_path / "store")).ledger(name).stable_record("2") is not None
    finally:
        for triton in tritons:
            triton.unload_model(name)
            triton.close()
