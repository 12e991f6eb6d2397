"""healer/sidecar/notify.py: the alert of an escalated incident keeps firing until the model is
restored, then is resolved (fake time, a scripted Triton and engine)."""

from __future__ import annotations

import dataclasses
from typing import Any

from healer.core.state import Phase
from healer.settings import Settings
from healer.sidecar import Sidecar
from tests.support.sidecar_fleet import (
    FakeClock,
    ScriptedEngine,
    ScriptedTriton,
)


def test_a_failed_run_alerts_and_the_alert_keeps_firing_until_restored(settings: Settings) -> None:
    sent: list[dict[str, Any]] = []
    primary = ScriptedEngine()
    triton = ScriptedTriton(settings)
    clock = FakeClock()
    settings = dataclasses.replace(
        settings,
        rollback=dataclasses.replace(
            settings.rollback, alert=dataclasses.replace(settings.rollback.alert, webhook_url="http://am:9093")
        ),
    )
    sidecar = Sidecar(
        settings,
        triton,
        engine_factory=lambda: primary,
        clock=clock,
        send_alert=lambda url, alerts, timeout: sent.extend(alerts),
    )
    triton.wrong = True
    sidecar.cycle()
    primary.phase = "Failed"
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED
    assert len(sent) == 1 and "endsAt" not in sent[0]
    clock.now += 121
    sidecar.cycle()
    assert len(sent) == 2  # re-sent: Alertmanager would resolve a silent alert
    triton.wrong = False
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.HEALTHY
    assert "endsAt" in sent[-1]  # resolved
