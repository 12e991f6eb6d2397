"""The traffic signal per model, as /status and ``healer status`` show it (docs/traffic-signal.md).

For each version of the model Triton's metrics list: the last window's real requests, failures and failure
ratio (healer's own requests subtracted), its verdict (``over``, ``within``, ``nothing-learnt``), the
version's signal (quiet, suspect, confirmed) and the window's why; ``nothing learnt: <why>`` in
``learnt`` when the window decided nothing (too little traffic, a reset) or the endpoint could not be read.
None when the signal is off (``sidecar.traffic`` not enabled and no ``metrics_url``): nothing to show.
"""

from __future__ import annotations

from typing import Any, Protocol

from healer.core.traffic import Judged, Key, Window


class Watched(Protocol):
    """What this reads of healer/sidecar/traffic.py ``TrafficWatch``."""

    reading: bool
    judging: bool
    error: str
    last_windows: dict[Key, Window]

    def view(self) -> dict[str, Any]: ...


def nothing_learnt(why: str) -> str:
    return f"nothing learnt: {why}"


def model_traffic(watch: Watched, model: str) -> dict[str, Any] | None:
    """The model's traffic entry in /status (None: the signal is off)."""
    if not watch.reading:
        return None
    view = watch.view()
    signals: dict[str, str] = {
        key.split("/", 1)[1]: signal for key, signal in view["versions"].items() if key.split("/", 1)[0] == model
    }
    entry: dict[str, Any] = {"judging": watch.judging, "error": watch.error, "versions": {}}
    if watch.error:
        entry["learnt"] = nothing_learnt(f"Triton's metrics not read: {watch.error}")
    elif not signals:
        entry["learnt"] = nothing_learnt("Triton's metrics list no version of this model")
    for version, signal in sorted(signals.items()):
        window = watch.last_windows.get((model, version))
        if window is None:
            entry["versions"][version] = {
                "signal": signal,
                "verdict": Judged.NOTHING.value,
                "learnt": nothing_learnt("not judged yet" if watch.judging else "sidecar.traffic is not enabled"),
            }
            continue
        entry["versions"][version] = {
            "signal": signal,
            "verdict": window.judged.value,
            "requests": window.requests,
            "failures": window.failures,
            "ratio": round(window.ratio, 4),
            "window_s": round(window.end - window.start, 3),
            "why": window.why,
            **({"learnt": nothing_learnt(window.why)} if window.judged is Judged.NOTHING else {}),
        }
    return entry
