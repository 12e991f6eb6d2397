"""sidecar.traffic.timeout_s's bound (healer/settings/sections.py's TrafficSettings): one scrape runs on the
probe loop's thread once per period, so it is at most TRAFFIC_MAX_TIMEOUT_S, the rollback's own read's
deadline; over it the file, the key and the bound are named (review of issue 31 item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from healer.settings import ConfigError, load_settings
from healer.settings.sections import TRAFFIC_MAX_TIMEOUT_S
from tests.support.settings_files import minimal_model
from workflows.steps.blast import MAX_READ_S


def write(tmp_path: Path, timeout_s: float) -> Path:
    document = {"models": [minimal_model()], "sidecar": {"traffic": {"enabled": True, "timeout_s": timeout_s}}}
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def test_the_bound_is_the_rollbacks_read_deadline() -> None:
    assert TRAFFIC_MAX_TIMEOUT_S == MAX_READ_S


@pytest.mark.parametrize("timeout_s", [5.5, 60, 1e300])
def test_a_timeout_over_the_bound_is_refused_naming_the_key(tmp_path: Path, timeout_s: float) -> None:
    path = write(tmp_path, timeout_s)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value) == (
        f"{path}: sidecar.traffic.timeout_s: must be at most 5 s (one scrape per probe period, on the probe loop's "
        f"thread; the rollback's blast radius read waits 5 s at most), got {timeout_s:g}"
    )


@pytest.mark.parametrize("timeout_s", [0.001, 1, 5])
def test_a_timeout_within_the_bound_is_kept(tmp_path: Path, timeout_s: float) -> None:
    assert load_settings(write(tmp_path, timeout_s)).sidecar.traffic.timeout_s == timeout_s
