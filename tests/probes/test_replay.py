"""The replay set in the store (probes/replay.py): the model's and the version's files, bounded, each bad
file refused with an error naming it; an array's rows shaped as the model's one input takes them."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from healer.edges.store import FilesystemBlobs, ModelStore
from probes import replay
from probes.replay import ReplayError, read_replay_set, replay_inputs

METADATA = {"inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [-1, 6]}]}


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(FilesystemBlobs(tmp_path))


def put(store: ModelStore, key: str, data: bytes | str) -> None:
    path = Path(store.blobs.root) / key  # type: ignore[attr-defined]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


ONE = "inputs:\n  - {name: INPUT, datatype: FP32, shape: [1, 6], data: [[1, 2, 3, 4, 5, 6]]}\n"


def test_the_models_files_then_the_versions_in_key_order(store: ModelStore) -> None:
    put(store, "m/replay/b.yaml", ONE)
    put(store, "m/replay/a.npy", npy(np.zeros((3, 6), dtype=np.float32)))
    put(store, "m/replay/notes.txt", "ignored")
    put(
        store,
        "m/2/replay/own.json",
        '{"inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [1, 6], "data": [[0, 0, 0, 0, 0, 1]]}]}',
    )
    put(store, "m/3/replay/other.yaml", ONE)
    files = read_replay_set(store, "m", "2")
    assert [f.name for f in files] == ["replay/a.npy", "replay/b.yaml", "2/replay/own.json"]
    inputs = replay_inputs(files, METADATA)
    assert [i.name for i in inputs] == [
        "replay/a.npy[0]",
        "replay/a.npy[1]",
        "replay/a.npy[2]",
        "replay/b.yaml",
        "2/replay/own.json",
    ]
    assert inputs[0].inputs[0].shape == (1, 6) and inputs[0].inputs[0].name == "INPUT"
    assert [f.name for f in read_replay_set(store, "m")] == ["replay/a.npy", "replay/b.yaml"]
    assert read_replay_set(store, "none", "1") == ()


def test_rows_without_a_batch_dimension_are_sent_as_they_are(store: ModelStore) -> None:
    put(store, "m/replay/a.npy", npy(np.zeros((2, 6), dtype=np.float32)))
    unbatched = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [6]}]}
    assert replay_inputs(read_replay_set(store, "m"), unbatched)[0].inputs[0].shape == (6,)


@pytest.mark.parametrize(
    ("key", "data", "metadata", "said"),
    [
        ("m/replay/x.yaml", "inputs: [", METADATA, "x.yaml: not valid YAML"),
        ("m/replay/x.yaml", "outputs: []", METADATA, "x.yaml: inputs: a replay file is a mapping"),
        ("m/replay/x.yaml", ONE + "expected: 1\n", METADATA, "x.yaml: expected: unknown key"),
        (
            "m/replay/x.yaml",
            "inputs:\n  - {name: INPUT, datatype: FP32, shape: [1, 6], file: a.npy}\n",
            METADATA,
            "x.yaml: inputs[0].file: not read from a store",
        ),
        (
            "m/replay/x.yaml",
            "inputs:\n  - {name: INPUT, datatype: FP33, shape: [1, 6], data: [[1, 2, 3, 4, 5, 6]]}\n",
            METADATA,
            "x.yaml: inputs[0].datatype",
        ),
        ("m/replay/x.npy", b"not an array", METADATA, "x.npy: not a .npy array"),
        ("m/replay/x.npy", npy(np.zeros((2, 6), dtype=np.float64)), METADATA, "x.npy: the array is float64"),
        ("m/replay/x.npy", npy(np.zeros((2, 5, 6, 7), dtype=np.float32)), METADATA, "x.npy: each row is [5, 6, 7]"),
        (
            "m/replay/x.npy",
            npy(np.zeros((2, 6), dtype=np.float32)),
            {"inputs": [*METADATA["inputs"], {"name": "B", "datatype": "FP32", "shape": [-1, 1]}]},
            "x.npy: an array of inputs is for a model with one input; this one has 2",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_it(
    store: ModelStore, key: str, data: bytes | str, metadata: dict[str, object], said: str
) -> None:
    put(store, key, data)
    with pytest.raises(ReplayError, match="x\\.") as caught:
        replay_inputs(read_replay_set(store, "m"), metadata)
    assert said in str(caught.value)
    assert str(caught.value).startswith(f"{store.location}/{key}")


def test_over_the_inputs_cap_is_refused_naming_the_file(store: ModelStore) -> None:
    put(store, "m/replay/a.npy", npy(np.zeros((replay.MAX_INPUTS, 6), dtype=np.float32)))
    assert len(replay_inputs(read_replay_set(store, "m"), METADATA)) == replay.MAX_INPUTS
    put(store, "m/replay/b.yaml", ONE)
    with pytest.raises(ReplayError, match=rf"b\.yaml: the replay set has over {replay.MAX_INPUTS} inputs"):
        read_replay_set(store, "m")


def test_over_the_bytes_cap_is_refused_naming_the_file(store: ModelStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "MAX_BYTES", 1000)
    put(store, "m/replay/a.yaml", ONE)
    put(store, "m/replay/b.npy", npy(np.zeros((100, 6), dtype=np.float32)))  # 2,528 bytes
    with pytest.raises(ReplayError, match=r"b\.npy: the replay set is over"):
        read_replay_set(store, "m")


def test_a_file_whose_aliases_expand_past_the_bound_is_refused_naming_it(store: ModelStore) -> None:
    from tests.settings.test_yaml12_one_pass import laughs

    put(
        store,
        "m/replay/laughs.yaml",
        "inputs:\n  - {name: INPUT, datatype: FP32, shape: [1], " + laughs(7).replace("name: m\n", "") + "}\n",
    )
    with pytest.raises(ReplayError, match="aliases expand the document past") as caught:
        read_replay_set(store, "m")
    assert str(caught.value).startswith(f"{store.location}/m/replay/laughs.yaml: ")
