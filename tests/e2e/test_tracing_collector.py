"""One incident, one trace, through a real OpenTelemetry Collector (e2e/otelcol: the OTLP receiver and
contrib's file exporter, built by e2e/build.sh) from two processes.

The sidecar (this process: healer.sidecar.Sidecar over a scripted Triton that answers wrong) opens
the incident's span and hands its traceparent to the rollback (RollbackRequest.traceparent). The
rollback runs in a second Python process, as a step pod would: HEALER_CONFIG names a healer.yaml
with tracing on, a LocalEngine runs the real healer-rollback template, its heal step (a real heal:
lease, fetch-stable, restore, record, on a filesystem store) continues the trace. Both export over
OTLP/HTTP to the Collector on a loopback port; the Collector's file then holds one trace with both
processes' spans joined (the heal span a child of the sidecar's incident span).

What stands in: the Tritons (tests/support/sidecar_fleet.py ScriptedTriton for the sidecar,
tests/support/fleet_triton.py FleetTriton for the heal's two replicas; this tier has no Triton) and the
hand-over of the request to the step's process (Argo's part: the e2e tier has no kubelet, so a
workflow's step pods do not run here).

Run alone: ``PYTEST=.venv/bin/pytest bash e2e/run.sh -k tracing -q``; prints the span tree with -s.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from healer.core.trace_tree import render_tree, spans_from_otlp_lines
from healer.edges import tracing
from healer.settings import Settings, SidecarSettings, TierThresholds, TracingSettings, load_settings
from healer.sidecar import Sidecar
from tests.e2e.conftest import OtelCollector
from tests.e2e.control_plane import ROOT
from tests.support.sidecar_fleet import FakeClock, ScriptedEngine, ScriptedTriton

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

MODEL = "linear_scorer"
EXAMPLE_CONFIG = ROOT / "examples" / "healer.yaml"
STEP_SERVICE = "healer-heal-step"
SIDECAR_SERVICE = "healer-sidecar"
STEP_TIMEOUT_S = 90
MILLISECOND = 1_000_000


def step_config(directory: Path, traces_url: str) -> Path:
    """examples/healer.yaml with tracing on, as a step pod's HEALER_CONFIG (its relative paths resolve
    against its folder: the example's files are linked in beside it)."""
    for entry in EXAMPLE_CONFIG.parent.iterdir():
        if entry != EXAMPLE_CONFIG:
            (directory / entry.name).symlink_to(entry)
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    config["tracing"] = {"enabled": True, "otlp_endpoint": traces_url, "service_name": STEP_SERVICE, "timeout_s": 5}
    path = directory / "healer.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_the_sidecars_spans_and_the_heal_steps_process_make_one_trace_in_a_real_collector(
    otel_collector: OtelCollector, example_settings: Settings, tmp_path: Path
) -> None:
    started = time.monotonic()
    settings = dataclasses.replace(
        example_settings,
        models=(example_settings.model(MODEL),),
        sidecar=SidecarSettings(period_s=1.0, business=TierThresholds(failure_threshold=1, success_threshold=1)),
        tracing=TracingSettings(
            enabled=True, otlp_endpoint=otel_collector.traces_url, service_name=SIDECAR_SERVICE, timeout_s=5
        ),
    )
    tracing.reset()  # the real OTLP exporter, not a test one
    try:
        engine, triton, clock = ScriptedEngine(), ScriptedTriton(settings), FakeClock(now=time.time())
        sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock, pod="ml/triton-0")
        triton.wrong = True
        sidecar.cycle()  # detected, decided, submitted: the incident and submit spans
        [request] = engine.requests
        trace_id = tracing.trace_id_of(request.traceparent)
        assert trace_id

        # The rollback in a process of its own, as a step pod: the request's fields, HEALER_CONFIG.
        step_dir = tmp_path / "step"
        step_dir.mkdir()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(step_dir),
            "PYTHONPATH": str(ROOT),
            "HEALER_CONFIG": str(step_config(step_dir, otel_collector.traces_url)),
        }
        step = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.e2e.test_tracing_collector",
                json.dumps(dataclasses.asdict(request)),
                str(step_dir),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT_S,
            check=False,
        )
        assert step.returncode == 0, (
            f"the step's process exited {step.returncode}:\n{step.stdout}\n{step.stderr[-4000:]}"
        )
        run = json.loads(step.stdout.strip().splitlines()[-1])
        assert run["phase"] == "Succeeded" and run["pid"] != os.getpid()

        # The sidecar sees the model answer right again: the restored span closes the trace.
        engine.phase, triton.wrong = "Succeeded", False
        for _ in range(3):
            clock.now = max(clock.now + 1, time.time())
            sidecar.cycle()
        tracing.flush()
    finally:
        tracing.reset()
    otel_collector.stop()  # a clean shutdown flushes and closes the file

    spans = spans_from_otlp_lines(otel_collector.spans_file.read_text())
    print(f"\nspans the Collector exported ({time.strftime('%Y-%m-%d')}):\n{render_tree(spans)}")
    print(f"test ran in {time.monotonic() - started:.1f} s (the Collector's start-up not included)")

    assert {s.trace_id for s in spans} == {trace_id}, "one trace"
    by_name = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    [incident], [submit], [restored], [heal] = (
        by_name["incident"],
        by_name["submit"],
        by_name["restored"],
        by_name["heal"],
    )
    assert {incident.service, submit.service, restored.service} == {SIDECAR_SERVICE}
    assert incident.parent_span_id == ""
    assert submit.parent_span_id == restored.parent_span_id == incident.span_id
    # The other process's span, joined to the sidecar's: the heal is a child of the span whose
    # traceparent the request carried, the incident's (the sidecar takes it before the submit span).
    assert request.traceparent.split("-")[2] == incident.span_id
    assert heal.service == STEP_SERVICE and heal.parent_span_id == incident.span_id
    assert heal.attributes["healer.incident"] == request.incident and heal.attributes["healer.to_version"] == "1"
    for phase in ("lease", "fetch-stable", "restore", "record"):
        [span] = by_name[phase]
        assert span.service == STEP_SERVICE and span.parent_span_id == heal.span_id, phase
        # Inside the heal, to the millisecond: a phase's start is its report's ISO text (milliseconds).
        assert heal.start_ns - MILLISECOND <= span.start_ns and span.end_ns <= heal.end_ns + MILLISECOND, phase
    [restore] = by_name["restore"]
    assert len(by_name["swap"]) == 2 and len(by_name["verify"]) == 2  # two replicas
    assert all(s.parent_span_id == restore.span_id for s in by_name["swap"] + by_name["verify"])
    # In time: the submission before the heal, the heal before the sidecar saw it restored.
    assert submit.start_ns <= heal.start_ns and heal.end_ns <= restored.start_ns


def _heal_in_this_process(request_json: str, workdir: Path) -> int:
    """The step's process: the real healer-rollback template run by a LocalEngine, its context the
    settings from HEALER_CONFIG (tracing on) over two stand-in replicas and a filesystem store."""
    from healer.engines.local import LocalEngine
    from healer.vocabulary import RollbackRequest
    from tests.edges.test_tracing import heal_context
    from workflows.rollback import build_rollback_template

    settings = load_settings(os.environ["HEALER_CONFIG"])
    assert settings.tracing.enabled
    ctx = heal_context(settings, workdir, pytest.MonkeyPatch())
    engine = LocalEngine(build_rollback_template(), lambda: ctx, workdir / "runs")
    request = RollbackRequest(**json.loads(request_json))
    submission = engine.submit(request)
    status = engine.wait(submission.name, timeout_s=STEP_TIMEOUT_S - 30)
    print(json.dumps({"workflow": submission.name, "phase": status.phase, "pid": os.getpid()}))
    return 0 if status.succeeded else 1


if __name__ == "__main__":
    sys.exit(_heal_in_this_process(sys.argv[1], Path(sys.argv[2])))
