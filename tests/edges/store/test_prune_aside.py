"""What a live repository keeps aside is bounded (issue 27, item 7): quarantined and displaced copies
only pile up, and a full disk stops the next rollback. Only copies of versions the store still holds
(and not stable) go; a version's only copy, a stable version's copy and the newest ones stay."""

from __future__ import annotations

import os
from pathlib import Path

from healer.edges.store import DISPLACED_DIR, QUARANTINE_DIR, aside_usage, prune_aside


def _entry(folder: Path, name: str, age: int, *, directory: bool = True) -> None:
    path = folder / name
    if directory:
        path.mkdir(parents=True)
        (path / "model.py").write_text("x" * 100)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("config")
    os.utime(path, (1_000_000 + age, 1_000_000 + age))


def test_prune_aside_keeps_the_newest_and_every_only_copy(tmp_path: Path) -> None:
    quarantine = tmp_path / "m" / QUARANTINE_DIR
    displaced = tmp_path / "m" / DISPLACED_DIR
    for age in range(6):
        _entry(quarantine, f"3-inc-{age}", age)  # v3: in the store, not stable
    _entry(quarantine, "4-inc-old", -10)  # v4: not in the store: this is the version itself
    _entry(quarantine, "2-inc-old", -9)  # v2: stable
    for age in range(4):
        _entry(displaced, f"config.pbtxt-2026{age}", age, directory=False)
    _entry(displaced, "2-bytecode-20260101T000000Z-abcd", -5)  # derived, even of a stable version

    removed = prune_aside(tmp_path, "m", keep=2, removable=lambda v: v == "3")

    assert sorted(p.name for p in quarantine.iterdir()) == ["2-inc-old", "3-inc-4", "3-inc-5", "4-inc-old"]
    assert sorted(p.name for p in displaced.iterdir()) == ["config.pbtxt-20262", "config.pbtxt-20263"]
    assert len(removed) == 4 + 3
    assert aside_usage(tmp_path, "m") == {"entries": 6, "bytes": 4 * 100 + 2 * len("config")}


def test_prune_aside_with_nothing_aside_does_nothing(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    assert prune_aside(tmp_path, "m", keep=1, removable=lambda v: True) == []
    assert aside_usage(tmp_path, "m") == {"entries": 0, "bytes": 0}


def test_what_was_put_aside_within_the_hour_is_never_pruned(tmp_path: Path) -> None:
    """The evidence of what just happened stays, however small keep is (a displaced copy keeps its
    files' old times: the move's own time is what counts)."""
    quarantine = tmp_path / "m" / QUARANTINE_DIR
    for name in ("3-inc-a", "3-inc-b"):
        (quarantine / name).mkdir(parents=True)  # now
    _entry(quarantine, "3-inc-old", 0)
    assert prune_aside(tmp_path, "m", keep=1, removable=lambda v: True) == [f"{QUARANTINE_DIR}/3-inc-old"]
    assert sorted(p.name for p in quarantine.iterdir()) == ["3-inc-a", "3-inc-b"]
