"""Golden requests kept in the store beside the model (probes/store_suite.py), on a real filesystem
store: the layout, what is skipped and told, and the sidecar's cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from healer.edges.store import FilesystemBlobs, ModelStore
from healer.settings import ModelSettings, parse_section
from probes.store_suite import MAX_FILES, StoreSuites, read_store_requests, suite_with_store
from tests.support.sequence_model import golden_request


def model(tmp_path: Path, *, in_store: bool = True) -> ModelSettings:
    section: ModelSettings = parse_section(
        ModelSettings,
        {"name": "seq", "golden": [golden_request("one", 1)], "golden_in_store": in_store},
        source="healer.yaml",
        base_dir=tmp_path,
        key="models[0]",
    )
    return section


def put(root: Path, name: str, document: Any) -> None:
    target = root / "seq" / "golden" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(document if isinstance(document, str) else yaml.safe_dump(document))


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(FilesystemBlobs(tmp_path / "store"))


def test_the_store_requests_follow_the_configured_ones_in_key_order(tmp_path: Path, store: ModelStore) -> None:
    root = tmp_path / "store"
    long = golden_request("long", 64)
    del long["name"]  # named by its file
    put(root, "long.yaml", long)
    put(root, "b-seven.json", json.dumps(golden_request("seven", 7)))
    put(root, "README.md", "not a request")
    suite = suite_with_store(store, model(tmp_path))
    assert [r.name for r in suite] == ["one", "seven", "long"]
    assert suite[2].inputs[0].values.shape == (64,)
    configured_only = model(tmp_path, in_store=False)
    assert suite_with_store(store, configured_only) is configured_only.suite


def test_a_file_that_does_not_load_is_skipped_and_named(tmp_path: Path, store: ModelStore) -> None:
    root = tmp_path / "store"
    put(root, "bad-shape.yaml", {**golden_request("bad", 2), "latency_slo_ms": -1})
    put(
        root,
        "from-disk.yaml",
        {
            **golden_request("disk", 1),
            "inputs": [{"name": "TOKENS", "datatype": "INT32", "shape": [1], "file": "/etc/x.npy"}],
        },
    )
    put(root, "dup.yaml", golden_request("one", 1))
    put(root, "broken.yaml", "inputs: [\n")
    put(root, "good.yaml", golden_request("good", 3))
    requests, problems = read_store_requests(store, model(tmp_path))
    assert [r.name for r in requests] == ["good"]
    where = f"{root}/seq/golden"
    assert problems == (
        f"{where}/bad-shape.yaml: latency_slo_ms: must be >= 0.001, got -1",
        f"{where}/broken.yaml: not valid YAML: " + problems[1].split("not valid YAML: ", 1)[1],
        f"{where}/dup.yaml: name: golden request 'one' is already in the suite: skipped",
        f"{where}/from-disk.yaml: inputs[0].file: not read from a store: write the values as data",
    )


def test_too_many_files_are_cut_and_told(tmp_path: Path, store: ModelStore) -> None:
    for i in range(MAX_FILES + 1):
        put(tmp_path / "store", f"r{i:03d}.yaml", golden_request(f"r{i:03d}", 1))
    requests, problems = read_store_requests(store, model(tmp_path))
    assert len(requests) == MAX_FILES and "only the first 64 read" in problems[-1]


def put_own(root: Path, version: str, name: str, document: Any) -> None:
    """A request in ``version``'s own folder, <model>/<version>/golden/, where its files are."""
    target = root / "seq" / version / "golden" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(document))


def test_a_versions_own_requests_follow_the_models_and_judge_that_version_alone(
    tmp_path: Path, store: ModelStore
) -> None:
    """<model>/golden/ is for every version (the stable one too); <model>/<v>/golden/ for v alone: the
    requests pushed with a new v3 never judge the stable v2 (a rollback's verify of v2 failed on them)."""
    put(tmp_path / "store", "seven.yaml", golden_request("seven", 7))
    put_own(tmp_path / "store", "3", "long.yaml", golden_request("long", 64))
    put_own(tmp_path / "store", "3", "dup.yaml", golden_request("seven", 7))  # a name the model's file has
    m = model(tmp_path)
    assert [r.name for r in suite_with_store(store, m, "3")] == ["one", "seven", "long"]
    assert [r.name for r in suite_with_store(store, m, "2")] == ["one", "seven"]
    assert [r.name for r in suite_with_store(store, m)] == ["one", "seven"]
    _, problems = read_store_requests(store, m, "3")
    assert len(problems) == 1 and "seq/3/golden/dup.yaml" in problems[0] and "already in the suite" in problems[0]
    assert [r.name for r in suite_with_store(store, m, "../seq/3")] == ["one", "seven"]  # never a path


def test_the_sidecar_remembers_a_suite_per_model_and_version(tmp_path: Path, store: ModelStore) -> None:
    clock = Clock()
    suites = StoreSuites(lambda: store, refresh_s=60, clock=clock)
    m = model(tmp_path)
    put_own(tmp_path / "store", "3", "long.yaml", golden_request("long", 64))
    assert [r.name for r in suites.suite_of(m, "3")] == ["one", "long"]
    assert [r.name for r in suites.suite_of(m, "2")] == ["one"]  # not v3's, cached or not
    put_own(tmp_path / "store", "2", "seven.yaml", golden_request("seven", 7))
    clock.now = 59
    assert [r.name for r in suites.suite_of(m, "2")] == ["one"]  # remembered for v2
    assert [r.name for r in suites.suite_of(m, "3")] == ["one", "long"]
    clock.now = 61
    assert [r.name for r in suites.suite_of(m, "2")] == ["one", "seven"]
    assert [r.name for r in suites.suite_of(m, "3")] == ["one", "long"]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_sidecar_reads_once_a_minute_and_keeps_the_last_suite_when_the_store_fails(
    tmp_path: Path, store: ModelStore
) -> None:
    clock, opened = Clock(), []
    broken = {"now": False}

    class Flaky:
        location = store.location

        class blobs:
            @staticmethod
            def keys(prefix: str) -> list[str]:
                if broken["now"]:
                    raise OSError("store not mounted")
                return store.blobs.keys(prefix)

            @staticmethod
            def read(key: str) -> bytes:
                return store.blobs.read(key)

    suites = StoreSuites(lambda: opened.append(1) or Flaky(), refresh_s=60, clock=clock)
    m = model(tmp_path)
    put(tmp_path / "store", "long.yaml", golden_request("long", 64))
    assert [r.name for r in suites.suite_of(m)] == ["one", "long"]
    put(tmp_path / "store", "seven.yaml", golden_request("seven", 7))
    clock.now = 59
    assert [r.name for r in suites.suite_of(m)] == ["one", "long"]  # remembered
    clock.now = 61
    assert [r.name for r in suites.suite_of(m)] == ["one", "long", "seven"]  # read again
    broken["now"] = True
    clock.now = 200
    with structlog.testing.capture_logs() as logs:
        assert [r.name for r in suites.suite_of(m)] == ["one", "long", "seven"]  # the last read stands
    assert [e["event"] for e in logs] == ["golden_store_unread"]
    assert opened == [1]  # the store is opened once
    assert StoreSuites(None).suite_of(m) == m.suite


def test_a_request_added_to_the_store_is_fitted_to_a_version_already_seen(tmp_path: Path, store: ModelStore) -> None:
    """The fit of a version is remembered per suite: a store request naming an input the model does not
    have is a configuration error (never sent), though the version fitted the suite before it."""
    from healer.settings import Settings, TritonSettings
    from probes.contract import Fit
    from probes.fit import GoldenFit

    class Metadata:
        def model_metadata(self, model: str, version: str) -> dict[str, Any]:
            return {
                "inputs": [{"name": "TOKENS", "datatype": "INT32", "shape": [-1]}],
                "outputs": [{"name": "OUT", "datatype": "INT32", "shape": [-1]}],
            }

        def model_config(self, model: str) -> dict[str, Any]:
            return {"max_batch_size": 0, "input": [{"name": "TOKENS", "data_type": "TYPE_INT32", "dims": [-1]}]}

    m = model(tmp_path)
    settings = Settings(source="healer.yaml", triton=TritonSettings(), models=(m,))
    fit = GoldenFit(settings, stable_of=None)
    assert fit.check(Metadata(), "seq", "2", m.suite).fit is Fit.FITS  # type: ignore[arg-type, union-attr]
    typo = golden_request("typo", 1)
    typo["inputs"][0]["name"] = "TOKEN"  # type: ignore[index]
    put(tmp_path / "store", "typo.yaml", typo)
    verdict = fit.check(Metadata(), "seq", "2", suite_with_store(store, m))  # type: ignore[arg-type]
    assert verdict is not None and verdict.fit is Fit.CONFIG_ERROR
    assert verdict.findings[0].startswith("models[0].golden[1].inputs[0].name: seq v2 has no input 'TOKEN'")


def test_a_file_whose_aliases_expand_past_the_bound_is_skipped_and_named(tmp_path: Path, store: ModelStore) -> None:
    # "Billion laughs" pushed with a version: 10^7 numbers from under 600 bytes, refused while read (the
    # sidecar's memory untouched), named with its line; the other requests are read.
    from tests.settings.test_yaml12_one_pass import laughs

    root = tmp_path / "store"
    put(
        root,
        "laughs.yaml",
        laughs(7).replace(
            "name: m\ndata:", "latency_slo_ms: 100\ninputs:\n  - {name: X, datatype: FP32, shape: [1], data:"
        )
        + "}\n",
    )
    put(root, "good.yaml", golden_request("good", 3))
    requests, problems = read_store_requests(store, model(tmp_path))
    assert [r.name for r in requests] == ["good"]
    assert len(problems) == 1 and problems[0].startswith(
        f"{root}/seq/golden/laughs.yaml: aliases expand the document past "
    )
    assert "(line 3, column " in problems[0]
