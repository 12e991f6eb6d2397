"""The blast radius up to the restore, as the rollback measures it (pure; docs/traffic-signal.md).

The sidecar that submits a rollback knows, from its own pod's Triton metrics, the failing version's
failure counter at the first failure (``Baseline``: Triton's ``nv_inference_request_failure``, BACKEND and
OTHER summed, at the newest sample at or before the first failure) and how many of healer's own requests
to that version failed since then, up to the decision. The request carries it (``blast-baseline``). The
rollback's heal step, once the stable version is restored, reads that replica's metrics once: the failing
version's counter no longer moves (it is unloaded; Triton 2.51 keeps an unloaded version's failure
counter), so the counter then minus the baseline, less healer's own failures known, is the failed requests
between the first failure and the restore (``radius_at_restore``). Healer's own requests after the
decision (the rollback's confirmation, the sidecar's probes while it heals) are not known to the rollback
and may be among them: said in the words. A counter lower than the baseline (Triton restarted, the
version reloaded), a version gone from the metrics, an endpoint not read: not measured, never a guess.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from healer.core.traffic import Counters, Key, Sample, since_reset

BASELINE_PARAMETER = "blast-baseline"  # the workflow parameter that carries it ("" : none)
MAX_BASELINE_CHARS = 1000


class BadBaseline(ValueError):
    """The ``blast-baseline`` parameter is not one healer wrote."""


@dataclass(frozen=True)
class Baseline:
    """What the detecting sidecar read of the failing version at its first failure, and where."""

    model: str
    version: str
    replica: str  # the Triton the counters are of, as the request names it ("": the rollback's triton.url)
    metrics_port: int  # its metrics endpoint (the sidecar's metrics URL's port and path, on the replica's host)
    metrics_path: str
    failure: int  # Triton's failure counter of the version (BACKEND + OTHER) at the first failure
    own_failed: int  # healer's own requests to it that failed, from the first failure to the decision

    def encode(self) -> str:
        return json.dumps(
            {
                "model": self.model,
                "version": self.version,
                "replica": self.replica,
                "metrics_port": self.metrics_port,
                "metrics_path": self.metrics_path,
                "failure": self.failure,
                "own_failed": self.own_failed,
            },
            separators=(",", ":"),
        )


_FIELDS = {
    "model": str,
    "version": str,
    "replica": str,
    "metrics_port": int,
    "metrics_path": str,
    "failure": int,
    "own_failed": int,
}


def decode_baseline(text: str) -> Baseline | None:
    """The parameter's text as a Baseline ("" : None); BadBaseline naming the parameter and what is wrong."""
    if not text.strip():
        return None
    if len(text) > MAX_BASELINE_CHARS:
        raise BadBaseline(f"{BASELINE_PARAMETER}: over {MAX_BASELINE_CHARS} characters")
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise BadBaseline(f"{BASELINE_PARAMETER}: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise BadBaseline(f"{BASELINE_PARAMETER}: not a JSON object")
    values: dict[str, object] = {}
    for key, kind in _FIELDS.items():
        value = raw.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise BadBaseline(f"{BASELINE_PARAMETER}: key {key!r} must be a {kind.__name__}, got {value!r}")
        values[key] = value
    baseline = Baseline(**values)  # type: ignore[arg-type]
    if baseline.failure < 0 or baseline.own_failed < 0:
        raise BadBaseline(f"{BASELINE_PARAMETER}: counts must not be negative")
    if not 0 < baseline.metrics_port < 65536:
        raise BadBaseline(f"{BASELINE_PARAMETER}: key 'metrics_port' {baseline.metrics_port} is not a port")
    if not baseline.metrics_path.startswith("/"):
        raise BadBaseline(f"{BASELINE_PARAMETER}: key 'metrics_path' {baseline.metrics_path!r} must start with /")
    return baseline


@dataclass(frozen=True)
class RestoreRadius:
    """The failed requests between the first failure and the restore on ``replica`` (``failed`` None: not
    measured, ``why`` says why)."""

    failed: int | None = None
    replica: str = ""
    why: str = ""
    counted: int = 0  # Triton's failures of the version between the baseline and the restore
    own_failed: int = 0  # healer's own known failures taken out

    @property
    def measured(self) -> bool:
        return self.failed is not None

    def words(self) -> str:
        if self.failed is None:
            return f"not measured: {self.why}"
        return (
            f"{self.failed} failed request(s) between the first failure and the restore on {self.replica} "
            f"(Triton's metrics: {self.counted} failures counted, healer's own {self.own_failed} taken out; "
            "healer's requests after the decision may be among them)"
        )

    def record(self) -> dict[str, object]:
        """For the audit record and the step's outputs."""
        if self.failed is None:
            return {"measured": False, "why": self.why}
        return {
            "measured": True,
            "failed_requests": self.failed,
            "replica": self.replica,
            "counted": self.counted,
            "own_failed": self.own_failed,
            "words": self.words(),
        }


def not_measured(why: str) -> RestoreRadius:
    return RestoreRadius(why=why)


def baseline_of(
    key: Key, samples: Sequence[Sample], since: float, own_failed_now: int, *, replica: str, metrics: tuple[int, str]
) -> Baseline | None:
    """The baseline a sidecar puts in its rollback request: the newest sample at or before ``since`` (the first
    failure; the oldest kept after the last counter reset when none is that old: the radius then errs low),
    and healer's own failed requests since it (``own_failed_now``: its count now). ``metrics``: the port and
    path of the metrics URL the samples were read from. None: no sample."""
    kept = since_reset(samples)
    if not kept:
        return None
    base = next((s for s in reversed(kept) if s.at <= since), kept[0])
    return Baseline(
        model=key[0],
        version=key[1],
        replica=replica,
        metrics_port=metrics[0],
        metrics_path=metrics[1],
        failure=round(base.counters.failure),
        own_failed=max(0, own_failed_now - base.own_failed),
    )


def radius_at_restore(baseline: Baseline, counters: dict[Key, Counters], replica: str) -> RestoreRadius:
    """The failed requests of the baseline's version on ``replica`` from its counters read after the restore."""
    after = counters.get((baseline.model, baseline.version))
    if after is None:
        return not_measured(f"{baseline.model} v{baseline.version} is not in {replica}'s Triton metrics any more")
    if after.failure < baseline.failure:
        return not_measured(
            f"{baseline.model} v{baseline.version}'s failure counter went down on {replica} "
            f"({baseline.failure:g} at the first failure, {after.failure:g} after the restore: Triton restarted "
            "or the version was reloaded)"
        )
    counted = round(after.failure - baseline.failure)
    failed = max(0, counted - baseline.own_failed)
    return RestoreRadius(failed=failed, replica=replica, counted=counted, own_failed=baseline.own_failed)


__all__ = [
    "BASELINE_PARAMETER",
    "BadBaseline",
    "Baseline",
    "RestoreRadius",
    "baseline_of",
    "decode_baseline",
    "not_measured",
    "radius_at_restore",
]
