"""Whether each model's golden request fits the version Triton serves, as the sidecar sees it.

The check itself is probes/fit.py's, remembered per model and version (one metadata call when a
version is first seen: at start-up, that is the first cycle). The stable version, which tells a
changed contract from a wrong golden request, is read from the store's ledger only when a request
does not fit. A configuration error is told loudly, once per version and findings: an ``error`` log
line ``golden_request_misfit`` naming each key of healer.yaml, a Warning Event
``GoldenRequestMisfit`` on the pod, and the ``healer_golden_request_misfit`` gauge at 1 while it
lasts. It is never acted on: its probe result is ``error`` (nothing learnt), which moves no streak.

It also holds each model's golden suite with the requests a pipeline keeps in the store beside the
model (``models[].golden_in_store``; probes/store_suite.py), read once a minute.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from healer.core.ledger import StableRecord
from healer.core.results import ProbeResult, Status, Tier
from healer.edges.metrics import Registry
from healer.settings import Settings
from healer.sidecar.clock import Clock
from probes.contract import Fit
from probes.fit import GoldenFit, newest_stable
from probes.store_suite import StoreSuites

log = structlog.get_logger("healer.sidecar")

MISFIT_GAUGE = "healer_golden_request_misfit"


class GoldenWatch:
    """Whether each model's golden request fits the version Triton serves, as the sidecar sees it.
    ``store_factory`` opens the store whose ledger names the stable version (the Sidecar passes the
    configured one, healer/sidecar/loop.py lazy_store); None: no store, the stable version unknown."""

    def __init__(
        self,
        settings: Settings,
        *,
        store_factory: Callable[[], Any] | None,
        metrics: Registry,
        event: Callable[[str, str, str], None],
        clock: Clock,
    ) -> None:
        self._store_factory = store_factory
        self._store: Any = None
        self._store_lock = threading.Lock()
        self.fit = GoldenFit(
            settings, stable_of=self._stable_of if store_factory is not None else None, clock=clock.monotonic
        )
        # Each model's suite with its requests kept in the store (models[].golden_in_store), re-read each minute.
        self.suites = StoreSuites(self._opened_store if store_factory is not None else None, clock=clock.monotonic)
        self._metrics = metrics
        self._event = event
        self._told: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}  # (model, version) -> (fit, findings)
        for model in settings.models:
            metrics.set(MISFIT_GAUGE, {"model": model.name}, 0.0)

    def _opened_store(self) -> Any:
        """The store, opened on first use (on a probe worker; may raise)."""
        with self._store_lock:
            if self._store is None:
                assert self._store_factory is not None
                self._store = self._store_factory()
            return self._store

    def _stable_of(self, model: str) -> StableRecord | None:
        """The model's newest stable record in the store's ledger (on a probe worker; may raise)."""
        return newest_stable(self._opened_store().ledger(model))

    def seen(self, model: str, results: Sequence[ProbeResult]) -> None:
        """A model's results of one cycle (the loop's thread): a configuration error or a changed
        contract not told yet for that version is told; the gauge follows what was judged."""
        business = [r for r in results if r.tier is Tier.BUSINESS and r.version]
        misfit = False
        for result in business:
            fit = str(result.details.get("fit", ""))
            if fit == Fit.CONFIG_ERROR.value:
                misfit = True
            if fit in (Fit.CONFIG_ERROR.value, Fit.CONTRACT_CHANGE.value):
                self._tell(model, result, fit)
        if misfit:
            self._metrics.set(MISFIT_GAUGE, {"model": model}, 1.0)
        elif any(r.status is not Status.ERROR for r in business):  # judged: the request fits (or failed)
            self._metrics.set(MISFIT_GAUGE, {"model": model}, 0.0)

    def _tell(self, model: str, result: ProbeResult, fit: str) -> None:
        version = str(result.version)
        findings = tuple(str(f) for f in result.details.get("findings", ()))
        if self._told.get((model, version)) == (fit, findings):
            return
        self._told[(model, version)] = (fit, findings)
        if fit == Fit.CONFIG_ERROR.value:
            log.error(
                "golden_request_misfit",
                model=model,
                version=version,
                findings=list(findings),
                reason=result.reason,
                acted_on=False,
            )
            self._event("GoldenRequestMisfit", f"{model} v{version}: {result.reason}"[:1000], "Warning")
        else:
            log.warning("golden_request_contract_change", model=model, version=version, findings=list(findings))
