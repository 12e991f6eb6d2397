"""The store's config.pbtxt pinned after a heal (workflows/steps/records.py pin_config_in_store) and moved on
by a promotion (healer/edges/store/in_place.py repin), on a real filesystem store: a stable version promoted
with no config.pbtxt (Triton auto-completed it) is still pinned, a pin that cannot be written is never a
success, and a promotion racing a heal never pins a quarantined version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from healer.core.ledger import Ledger, QuarantineRecord, StableRecord
from healer.edges.store import DISPLACED_DIR, FilesystemBlobs, ModelStore, pin_text, pinned_version
from healer.edges.store import live as live_module
from healer.settings import Settings
from workflows import steps
from workflows.steps.records import pin_config_in_store

MODEL = "m"
ONNX_CONFIG = {"name": MODEL, "backend": "onnxruntime", "platform": "onnxruntime_onnx", "max_batch_size": 4}


def _stable(version: str, *, config_file: str = "", config: dict[str, Any] | None = None) -> StableRecord:
    return StableRecord(
        version=version,
        files={"model.onnx": "0" * 64},
        promoted_at="2026-01-01T00:00:00Z",
        promoted_by="test",
        config=ONNX_CONFIG if config is None else config,
        config_file=config_file,
    )


def _ctx(example_settings: Settings, root: Path) -> steps.StepContext:
    for version in ("1", "2"):
        (root / MODEL / version).mkdir(parents=True, exist_ok=True)
        (root / MODEL / version / "model.onnx").write_bytes(b"onnx " + version.encode())
    return steps.StepContext(
        settings=example_settings,
        triton=None,  # type: ignore[arg-type]
        store=ModelStore(FilesystemBlobs(root)),
        live_repository=None,
        workflow_name="wf-1",
    )


def test_a_stable_version_promoted_with_no_config_file_is_pinned_all_the_same(
    example_settings: Settings, tmp_path: Path
) -> None:
    """No config.pbtxt in the store (Triton completes an ONNX model's config): a restarted Triton would load
    the highest version, the quarantined one. The pin names the model, its backend and platform and the
    stable version; the rest is Triton's auto-complete, as it was when the version was verified."""
    ctx = _ctx(example_settings, tmp_path)
    outputs = pin_config_in_store(ctx, MODEL, _stable("1"), incident="inc-1")
    assert outputs["config_file"] == "pinned to v1"
    written = (tmp_path / MODEL / "config.pbtxt").read_text()
    assert pinned_version(written) == "1"
    assert f'name: "{MODEL}"' in written
    assert 'backend: "onnxruntime"' in written and 'platform: "onnxruntime_onnx"' in written
    assert written.rstrip().endswith("version_policy: { specific: { versions: [ 1 ] } }")
    assert "max_batch_size" not in written  # left to auto-complete, as when the version was promoted
    events = [r["event"] for r in ctx.store.audit_of(MODEL, "inc-1")]
    assert events == ["config-pinned"]


@pytest.mark.parametrize(
    ("config_file", "config"),
    [("", {"name": MODEL}), ("input [ { name: 'x' }", ONNX_CONFIG)],
    ids=["no-backend-recorded", "config-file-does-not-read"],
)
def test_a_pin_that_cannot_be_made_fails_the_step_instead_of_reporting_success(
    example_settings: Settings, tmp_path: Path, config_file: str, config: dict[str, Any]
) -> None:
    ctx = _ctx(example_settings, tmp_path)
    with pytest.raises(steps.PermanentStepError, match="restarted Triton may load the quarantined version"):
        pin_config_in_store(ctx, MODEL, _stable("1", config_file=config_file, config=config), incident="inc-1")
    assert not (tmp_path / MODEL / "config.pbtxt").exists()


def _promoted(ctx: steps.StepContext, *records: StableRecord) -> None:
    def change(ledger: Ledger) -> Ledger:
        for record in records:
            ledger = ledger.with_stable(record)
        return ledger

    ctx.store.update_ledger(MODEL, change)


def test_a_promotion_of_a_version_with_no_config_file_moves_the_pin_to_it(
    example_settings: Settings, tmp_path: Path
) -> None:
    ctx = _ctx(example_settings, tmp_path)
    (tmp_path / MODEL / "config.pbtxt").write_text(pin_text(f'name: "{MODEL}"\nbackend: "onnxruntime"\n', "1"))
    _promoted(ctx, _stable("1"), _stable("2"))  # promote.py's ledger update: Triton's config, no file
    outcome = ctx.store.repin(MODEL, "", "2", incident="promote-2")
    assert outcome["written"] is True
    written = (tmp_path / MODEL / "config.pbtxt").read_text()
    assert pinned_version(written) == "2" and 'platform: "onnxruntime_onnx"' in written


def _quarantine(store: ModelStore, version: str) -> None:
    record = QuarantineRecord(version=version, reason="wrong answer", incident="inc-9", at="now", by="healer")
    store.update_ledger(MODEL, lambda ledger: ledger.with_quarantine(record))


def _pinned_to_v1_with_v2_promoted(ctx: steps.StepContext, root: Path) -> str:
    config_file = f'name: "{MODEL}"\nbackend: "onnxruntime"\n'
    _promoted(ctx, _stable("1", config_file=config_file), _stable("2", config_file=config_file))
    (root / MODEL / "config.pbtxt").write_text(pin_text(config_file, "1"))
    return config_file


def test_a_promotion_never_pins_a_version_quarantined_after_its_ledger_update(
    example_settings: Settings, tmp_path: Path
) -> None:
    """promote.py: the ledger updated (v2 stable), then a heal quarantines v2 before the repin: the repin
    reads the ledger again after config.pbtxt, before its conditional write, and leaves the pin on v1."""
    ctx = _ctx(example_settings, tmp_path)
    config_file = _pinned_to_v1_with_v2_promoted(ctx, tmp_path)
    _quarantine(ctx.store, "2")
    outcome = ctx.store.repin(MODEL, config_file, "2", incident="promote-2")
    assert outcome["written"] is False and "quarantined while it was being promoted" in outcome["why"]
    assert pinned_version((tmp_path / MODEL / "config.pbtxt").read_text()) == "1"
    assert [r["event"] for r in ctx.store.audit_of(MODEL, "promote-2")] == ["config-not-pinned"]


def test_a_quarantine_just_after_the_check_puts_the_earlier_pin_back(
    example_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heal quarantines v2 right after the repin's check and finds its pin (v1) there already, so it
    writes nothing and the repin's conditional write succeeds: the repin's second look puts v1 back."""
    ctx = _ctx(example_settings, tmp_path)
    config_file = _pinned_to_v1_with_v2_promoted(ctx, tmp_path)
    real_ledger = ctx.store.ledger
    heal_done = False

    def heal_right_after_the_check(model: str) -> Ledger:
        nonlocal heal_done
        seen = real_ledger(model)
        if not heal_done:
            heal_done = True
            _quarantine(ctx.store, "2")  # the heal's pin of v1 then finds v1 pinned: nothing written
        return seen

    monkeypatch.setattr(ctx.store, "ledger", heal_right_after_the_check)
    outcome = ctx.store.repin(MODEL, config_file, "2", incident="promote-2")
    assert heal_done
    assert outcome["written"] is False and outcome["put_back"] is True
    assert pinned_version((tmp_path / MODEL / "config.pbtxt").read_text()) == "1"


def _pushing_during_each_pin(monkeypatch: pytest.MonkeyPatch, root: Path, pushes: list[str]) -> None:
    """Someone pushes config.pbtxt between the pin's read and its write, once per entry of ``pushes``."""
    real_write = live_module.write_atomic

    def push_first(path: Path, data: bytes) -> None:
        real_write(path, data)
        if DISPLACED_DIR in path.parts and pushes:  # the file read is copied aside: now the push lands
            (root / MODEL / "config.pbtxt").write_text(pushes.pop(0))

    monkeypatch.setattr(live_module, "write_atomic", push_first)


def _healing_v2(example_settings: Settings, root: Path) -> steps.StepContext:
    ctx = _ctx(example_settings, root)
    _promoted(ctx, _stable("1"))
    _quarantine(ctx.store, "2")
    (root / MODEL / "config.pbtxt").write_text(f'name: "{MODEL}"\nbackend: "onnxruntime"\n')
    return ctx


def test_a_push_that_lets_a_restart_load_the_quarantined_version_is_pinned_over_once(
    example_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _healing_v2(example_settings, tmp_path)
    pushed = f'name: "{MODEL}"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'  # latest 1: v2, quarantined
    _pushing_during_each_pin(monkeypatch, tmp_path, [pushed])
    outputs = pin_config_in_store(ctx, MODEL, _stable("1"), incident="inc-1")
    assert outputs["config_file"] == "pinned to v1"
    assert pinned_version((tmp_path / MODEL / "config.pbtxt").read_text()) == "1"
    assert Path(outputs["config_displaced"]).read_text() == pushed  # the push kept, never lost
    assert [r["event"] for r in ctx.store.audit_of(MODEL, "inc-1")] == ["config-pinned"]


def test_a_push_that_leaves_the_quarantined_version_out_wins(
    example_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _healing_v2(example_settings, tmp_path)
    pushed = f'name: "{MODEL}"\nversion_policy: {{ specific: {{ versions: [ 1, 3 ] }} }}\n'
    _pushing_during_each_pin(monkeypatch, tmp_path, [pushed])
    outputs = pin_config_in_store(ctx, MODEL, _stable("1"), incident="inc-1")
    assert outputs["config_file"].startswith("not pinned: ")
    assert "leaves every quarantined version out" in outputs["config_file"]
    assert "warning" not in outputs
    assert (tmp_path / MODEL / "config.pbtxt").read_text() == pushed


def test_a_second_lost_race_is_a_warning_in_the_outputs(
    example_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _healing_v2(example_settings, tmp_path)
    pushes = [f'name: "{MODEL}"\nmax_batch_size: {n}\n' for n in (4, 8)]
    _pushing_during_each_pin(monkeypatch, tmp_path, list(pushes))
    outputs = pin_config_in_store(ctx, MODEL, _stable("1"), incident="inc-1")
    assert outputs["config_file"].startswith("NOT PINNED: ")
    assert "may let a restarted Triton load a quarantined version (2)" in outputs["warning"]
    assert (tmp_path / MODEL / "config.pbtxt").read_text() == pushes[1]
    assert [r["event"] for r in ctx.store.audit_of(MODEL, "inc-1")] == ["config-pinned-lost"]
