"""The traffic signal in /status and ``healer status`` (healer/sidecar/traffic_view.py, healer/edges/fleet.py
``traffic_line``): per model and version the last window's real requests, failures, ratio and verdict, or
``nothing learnt: <why>``. Triton's metrics endpoint is a stand-in here (tests/sidecar/test_traffic_watch.py's
StandInTriton, fake time); the real one is judged in tests/sidecar/test_traffic_triton.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from healer.edges.fleet import FleetPod, fleet_view, format_fleet, traffic_line
from healer.settings import Settings, TrafficSettings, load_settings
from healer.sidecar import Sidecar
from healer.sidecar.traffic_view import model_traffic
from tests.sidecar.conftest import write_config
from tests.sidecar.test_traffic_watch import FakeClock, StandInTriton, run, watch
from tests.support.sidecar_fleet import ScriptedTriton

MODEL = "linear_scorer"


def test_the_last_windows_numbers_and_verdict_per_version(example_settings: Settings) -> None:
    clock = FakeClock()
    triton = StandInTriton(clock, rate=20.0, failing=0.1)
    w = watch(example_settings, triton, clock)
    run(w, clock, 8.0)
    entry = model_traffic(w, MODEL)
    assert entry is not None and entry["error"] == ""
    v3 = entry["versions"]["3"]
    assert v3["verdict"] == "over" and v3["signal"] == "confirmed"
    assert v3["requests"] > 0 and v3["failures"] > 0
    assert abs(v3["ratio"] - 0.1) < 0.03 and abs(v3["ratio"] - v3["failures"] / v3["requests"]) < 1e-3
    assert "learnt" not in v3
    line = traffic_line(entry)
    assert line.startswith("traffic: v3 ") and f"{v3['failures']} failed of {v3['requests']} real requests" in line
    assert "over" in line and "confirmed" in line
    # Another model: Triton lists none of its versions.
    other = model_traffic(w, "tiny_classifier")
    assert other is not None and other["learnt"].startswith("nothing learnt: ") and other["versions"] == {}


def test_too_little_traffic_and_an_unreachable_endpoint_say_nothing_learnt_and_why(
    example_settings: Settings,
) -> None:
    clock = FakeClock()
    triton = StandInTriton(clock, rate=0.0)
    w = watch(example_settings, triton, clock)
    run(w, clock, 8.0)
    v3 = model_traffic(w, MODEL)["versions"]["3"]  # type: ignore[index]
    assert v3["verdict"] == "nothing-learnt" and v3["requests"] == 0
    assert v3["learnt"].startswith("nothing learnt: ") and len(v3["learnt"]) > len("nothing learnt: ")
    assert traffic_line(model_traffic(w, MODEL)) == f"traffic: v3 {v3['learnt']}"
    triton.down = True
    run(w, clock, 1.0)
    entry = model_traffic(w, MODEL)
    assert entry is not None and entry["learnt"] == "nothing learnt: Triton's metrics not read: refused"
    assert traffic_line(entry) == "traffic: nothing learnt: Triton's metrics not read: refused"
    # The signal off: nothing in /status, nothing in `healer status`.
    off = dataclasses.replace(example_settings.sidecar, traffic=TrafficSettings())
    assert (
        model_traffic(
            watch(dataclasses.replace(example_settings, sidecar=off), triton, clock, enabled=False, metrics_url=None),
            MODEL,
        )
        is None
    )
    assert traffic_line(None) == ""


def test_the_sidecars_status_and_healer_status_show_it(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"period_s": 0.5})
    settings = load_settings(path)
    traffic = TrafficSettings(enabled=True, metrics_url="http://127.0.0.1:1/metrics", window_s=4.0)
    settings = dataclasses.replace(settings, sidecar=dataclasses.replace(settings.sidecar, traffic=traffic))
    clock = FakeClock()
    sidecar = Sidecar(settings, ScriptedTriton(settings), engine_factory=lambda: None, clock=clock, pod="ml/t-0")
    stand_in = StandInTriton(clock, rate=20.0, failing=0.0)
    sidecar.traffic._scrape = stand_in.scrape  # the stand-in for Triton's metrics endpoint
    for _ in range(12):
        clock.now += 0.5
        sidecar.traffic.observe()
    status = sidecar.status()
    v3 = status["models"][MODEL]["traffic"]["versions"]["3"]
    assert v3["verdict"] == "within" and v3["failures"] == 0 and v3["requests"] > 0
    view = fleet_view([FleetPod("ml", "t-0", "Running", True, sidecar_port=8080)], {"ml/t-0": status}, [])
    text = format_fleet(view)
    assert f"  ml/t-0 {MODEL}: traffic: v3 0 failed of {v3['requests']} real requests (0.0%)" in text
    assert view.to_dict()["rows"][0]["traffic"].startswith("traffic: v3 ")
