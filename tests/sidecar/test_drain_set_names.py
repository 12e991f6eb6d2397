"""Two replica sets never share one drain set (issue 15, item 12). With ``sidecar.drain.peer_urls`` a
set used to fall back to the name "default": every such replica set writing to one store shared it,
one set's writer pruned the other's drained pod, and the other's second pod could then drain too.
The drain rule (healer/core/decisions.py ``drain_plan``) against a real filesystem store shows the harm;
the settings now refuse peer_urls without ``set``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.core.decisions import DrainPlan, Peer, drain_plan
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.settings import ConfigError, DrainSettings, load_settings

SETS = {
    "a": ("http://triton-a-0:8088", "http://triton-a-1:8088"),
    "b": ("http://triton-b-0:8088", "http://triton-b-1:8088"),
}


def _config(tmp_path: Path, replica_set: str, drain: dict[str, Any]) -> Path:
    document = {
        "models": [
            {
                "name": "m",
                "golden": {
                    "latency_slo_ms": 100,
                    "inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [1.0]}],
                    "outputs": [{"name": "OUT", "datatype": "FP32", "shape": [1], "data": [1.0]}],
                },
            }
        ],
        "store": {"filesystem": {"root": str(tmp_path / "store")}},  # one store for both sets
        "sidecar": {"drain": {"peer_urls": list(SETS[replica_set]), **drain}},
    }
    path = tmp_path / f"healer-{replica_set}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _admit(store: ModelStore, drain: DrainSettings, me: str, peers: list[Peer]) -> DrainPlan:
    """One sidecar's drain decision as healer/sidecar/loop.py makes it: the rule applied to the drain set
    with compare-and-swap, then planned again on the set as written."""

    def plan(drained: Any) -> DrainPlan:
        return drain_plan(me, wants=True, peers=peers, drained=drained, min_ready=drain.min_ready, now_wall=1.0)

    written = store.update_drain_set(drain.drain_set, lambda d: plan(d).drained)
    return plan(written.drained)


def _race(store: ModelStore, a: DrainSettings, b: DrainSettings) -> tuple[DrainPlan, DrainPlan]:
    """Both pods of set a break; a-1 reads its peers while a-0 still serves, a-0 is admitted, set b's
    b-0 is admitted, then a-1 decides. Returns a-0's and a-1's plans."""
    a_peers = [Peer("a-0", ready=True), Peer("a-1", ready=True)]  # a-1's read, before a-0 drained
    first = _admit(store, a, "a-0", a_peers)
    assert first.drain
    assert _admit(store, b, "b-0", [Peer("b-0", ready=True), Peer("b-1", ready=True)]).drain
    return first, _admit(store, a, "a-1", a_peers)


def test_two_replica_sets_with_peer_urls_and_no_set_name_collide_so_the_name_is_required(tmp_path: Path) -> None:
    # The collision: without a name both sets got the same drain set ("default"), and set b's writer
    # pruned a-0 (not among b's pods) from it: a-1 then saw a-0 serving and drained as well. Set a
    # was left with no pod in the Service although min_ready is 1.
    unnamed = [DrainSettings(peer_urls=SETS[s]) for s in ("a", "b")]
    assert unnamed[0].drain_set == unnamed[1].drain_set
    (tmp_path / "shared").mkdir()
    shared = ModelStore(FilesystemBlobs(tmp_path / "shared"))
    first, second = _race(shared, *unnamed)
    assert first.drain and second.drain  # both pods of set a drained: its Service is empty

    # The refusal: each set must name its drain set; the error names the file and the key.
    for replica_set in SETS:
        path = _config(tmp_path, replica_set, {})
        with pytest.raises(ConfigError) as info:
            load_settings(path)
        assert str(info.value) == (
            f"{path}: sidecar.drain.set: is required with peer_urls: name the replica set's drain set "
            "(the same name in every pod of the set, a different one in every other set sharing the store); "
            "`set: default` keeps the set these pods used before this was required, so a rolling upgrade "
            "does not split it in two"
        )

    # Named: the same race holds a-1 back, a-0 keeps its place, b's set is its own.
    named = [load_settings(_config(tmp_path, s, {"set": f"triton-{s}"})).sidecar.drain for s in SETS]
    assert named[0] is not None and named[1] is not None
    assert (named[0].drain_set, named[1].drain_set) == ("triton-a", "triton-b")
    (tmp_path / "store").mkdir()
    store = ModelStore(FilesystemBlobs(tmp_path / "store"))
    first, second = _race(store, named[0], named[1])
    assert first.drain and not second.drain
    assert "held back: 0 other pod(s) serving" in second.why
    assert dict(store.drain_set("triton-a").drained) == {"a-0": 1.0}
    assert dict(store.drain_set("triton-b").drained) == {"b-0": 1.0}
