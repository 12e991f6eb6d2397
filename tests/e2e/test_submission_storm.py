"""A submission storm against the real Argo: 50 sidecars of one model detect the same incident at once
(issue 18). Each has its own ArgoEngine, built as the sidecar builds it (healer/compose.py
sidecar_engines: the projected token read per request, the CA file, the submit bound), and calls
submit_incident with the same RollbackRequest at the same instant. The deterministic workflow name
makes Argo answer 409 to all but one: exactly one "submitted", 49 "joined", and argo-server lists
one workflow for the incident.

The time from the start until all 50 returned is printed (shown with -s) and, when $HEALER_BENCH_OUT
is set, written to $HEALER_BENCH_OUT/submission_storm.json for benchmarks/scale_storm.py; it is not
asserted (it measures this machine as much as the code)::

    HEALER_BENCH_OUT=/tmp/healer-bench bash e2e/run.sh -k storm
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from healer.compose import sidecar_engines
from healer.core.labels import label_value
from healer.settings import ArgoSettings, RollbackSettings, Settings, SidecarSettings, TritonSettings
from healer.sidecar.handover import submit_incident
from healer.vocabulary import RollbackRequest, workflow_name
from tests.e2e.control_plane import ROOT, ControlPlane, http_get

pytestmark = pytest.mark.e2e

SIDECARS = 50
BENCH_OUT_ENV = "HEALER_BENCH_OUT"  # benchmarks/scale_storm.py reads $HEALER_BENCH_OUT/submission_storm.json
STORM_FILE = "submission_storm.json"


def listed_for(control_plane: ControlPlane, token: str, request: RollbackRequest) -> list[str]:
    """The workflows argo-server lists for the incident (its labels), as the Argo UI asks."""
    selector = f"healer.io/model={label_value(request.model)},healer.io/incident={label_value(request.incident)}"
    query = urllib.parse.urlencode({"listOptions.labelSelector": selector})
    answer: dict[str, Any] = http_get(
        f"{control_plane.argo_url}/api/v1/workflows/ml?{query}", context=control_plane.pki.ssl_context(), token=token
    )
    return [item["metadata"]["name"] for item in answer.get("items") or []]


def _commit() -> str | None:
    try:
        result = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


@pytest.mark.timeout(300)
def test_fifty_sidecars_detecting_at_once_make_one_workflow(
    control_plane: ControlPlane,
    rollback_template: dict[str, Any],
    sidecar_token: str,
    operator_token: str,
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(sidecar_token + "\n")
    settings = Settings(
        source="e2e",
        triton=TritonSettings(),
        models=(),
        rollback=RollbackSettings(
            engine="argo",
            argo=ArgoSettings(
                host=control_plane.argo_url,
                namespace="ml",
                token_file=token_file,
                verify_ssl=True,
                ca_file=control_plane.pki.ca,
            ),
        ),
        sidecar=SidecarSettings(fallback_to_local=False),
    )
    request = RollbackRequest(
        model="e2e_storm",
        from_version="3",
        incident="inc-storm-1",
        detail="output 'SCORE': 2/2 values off",
        pod="ml/triton-00",
    )
    make_engine, _fallback = sidecar_engines(settings)
    engines: list[Any] = [make_engine() for _ in range(SIDECARS)]  # one ArgoEngine per sidecar, built before
    outcomes: list[tuple[str, str, float] | None] = [None] * SIDECARS  # (how, workflow, seconds)
    errors: list[str] = []
    clock: dict[str, float] = {}

    def started() -> None:
        clock["start"] = time.monotonic()

    barrier = threading.Barrier(SIDECARS, action=started)

    def sidecar(index: int) -> None:
        try:
            barrier.wait(timeout=60)
            submission, how = submit_incident(engines[index], request)
            outcomes[index] = (how, submission.name, time.monotonic() - clock["start"])
        except Exception as exc:
            errors.append(f"sidecar {index}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=sidecar, args=(i,), name=f"storm-{i}") for i in range(SIDECARS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(240)
    finally:
        for engine in engines:
            engine.close()
    returned = [o for o in outcomes if o is not None]
    calls = sorted(seconds for _how, _name, seconds in returned)
    hows = [how for how, _name, _seconds in returned]
    names = {name for _how, name, _seconds in returned}
    listed = listed_for(control_plane, operator_token, request)
    submit_bound = min(settings.rollback.argo.request_timeout_s, settings.sidecar.argo_submit_timeout_s)
    figures = {
        "sidecars": SIDECARS,
        "submitted": hows.count("submitted"),
        "joined": hows.count("joined"),
        "failed": len(errors),
        "errors": errors[:5],
        "workflow": sorted(names),
        "workflows_listed": len(listed),
        "all_returned_s": round(calls[-1], 3) if len(calls) == SIDECARS else None,
        "call_s_median": round(statistics.median(calls), 3) if calls else None,
        "call_s_max": round(calls[-1], 3) if calls else None,
        "request_timeout_s": submit_bound,
        "over_argo_submit_timeout_s": sum(1 for s in calls if s > settings.sidecar.argo_submit_timeout_s),
        "over_engine_call_timeout_s": sum(1 for s in calls if s > settings.sidecar.engine_call_timeout_s),
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "isolated": os.environ.get("HEALER_E2E_ISOLATED") == "1",
    }
    print(f"\nsubmission storm: {json.dumps(figures)}")
    out = os.environ.get(BENCH_OUT_ENV)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / STORM_FILE).write_text(json.dumps(figures, indent=2) + "\n")

    assert not errors, errors
    assert len(returned) == SIDECARS, f"{SIDECARS - len(returned)} sidecar(s) did not return within 240 s"
    assert hows.count("submitted") == 1, hows
    assert hows.count("joined") == SIDECARS - 1, hows
    assert names == {workflow_name(request)}, names
    assert listed == [workflow_name(request)], listed
