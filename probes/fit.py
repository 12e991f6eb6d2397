"""Does the golden request fit the version Triton serves? The I/O around probes/contract.py: the
version's metadata from Triton, the stable version's contract from the ledger's record, and (for the
sidecar) each answer remembered per model and version, so a version costs one metadata call when
it is first seen, not one per probe cycle.

Nothing here ever makes a probe fail: a golden request that does not fit is either a configuration
error (an ``error`` result: nothing learnt, never acted on) or the new version's changed contract (the
golden request is then sent as usual, and Triton's refusal fails the version as any wrong answer).
When the metadata cannot be read, nothing is concluded and the probe goes on as before.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from healer.core.ledger import Ledger, StableRecord
from healer.core.results import ProbeResult, Status, Tier
from healer.edges.triton import TritonAPI, TritonError
from healer.settings import Settings
from probes.contract import (
    Fit,
    FitVerdict,
    ModelContract,
    contract_from_config,
    contract_from_metadata,
    judge_fit,
    misfit_reason,
    suite_misfits,
)
from probes.suite import Golden, suite_hash

# A configuration error is asked again this often (one metadata call): a Triton config fixed under the
# same version number is noticed without restarting the sidecar. A version that fits is never asked again.
RECHECK_MISFIT_S = 60.0

StableOf = Callable[[str], StableRecord | None]  # model -> its stable version's record; raises when unreadable


def golden_key(settings: Settings, model: str) -> str:
    """The golden request's key in healer.yaml: ``models[2].golden``."""
    index = next((i for i, m in enumerate(settings.models) if m.name == model), None)
    return f"models[{index}].golden" if index is not None else f"{model}.golden"


def newest_stable(ledger: Ledger) -> StableRecord | None:
    """The stable version the golden request is told apart with: the newest one not quarantined."""
    candidates = [r for r in ledger.stable if not ledger.is_quarantined(r.version)]
    return max(candidates, key=lambda r: int(r.version), default=None)


def served_contract(triton: TritonAPI, model: str, version: str, *, what: str = "") -> ModelContract | None:
    """A served version's contract from Triton (its metadata, and the model's config for max_batch_size
    and optional inputs when that answers); None when Triton does not say (not served, unreachable)."""
    try:
        metadata = triton.model_metadata(model, version)
    except TritonError:
        return None
    config: Mapping[str, Any] | None
    try:
        config = triton.model_config(model)
    except TritonError:
        config = None
    return contract_from_metadata(metadata, config, what=what or f"{model} v{version}")


def stable_contract(triton: TritonAPI, model: str, record: StableRecord) -> ModelContract | None:
    """The stable version's contract: the config the ledger recorded when it was promoted (what a rollback
    loads it with; Triton's config is the model's, shared by every version it serves, so a served stable
    version may already show the new version's contract). Without a recorded config: Triton's metadata
    of the stable version while Triton serves it; else None (unknown)."""
    recorded = contract_from_config(record.config, what=f"stable v{record.version} (the ledger's record)")
    if recorded is not None:
        return recorded
    try:
        if record.version not in triton.served_versions(model):
            return None
    except TritonError:
        return None
    return served_contract(triton, model, record.version, what=f"stable {model} v{record.version}")


def check_fit(
    triton: TritonAPI,
    model: str,
    version: str,
    golden: Golden,
    *,
    key: str,
    stable: StableRecord | None,
) -> FitVerdict | None:
    """The golden request against the version served and, when it does not fit, the stable version
    (``stable``: the ledger's newest stable record, None when there is none or it is not known).
    None: not checked (Triton did not give the version's metadata)."""
    contract = served_contract(triton, model, version)
    if contract is None:
        return None
    return judged(triton, model, version, golden, suite_misfits(golden, contract, key=key), key=key, stable=stable)


def judged(
    triton: TritonAPI,
    model: str,
    version: str,
    golden: Golden,
    served: tuple[str, ...],
    *,
    key: str,
    stable: StableRecord | None,
) -> FitVerdict:
    """``served`` (the golden request's misfits with the version served) judged: when it does not fit,
    the stable version's contract is read (only then) and the request checked against it too."""
    if not served or stable is None:
        return judge_fit(version, served, stable_version=stable.version if stable else None, stable=None)
    if stable.version == version:
        # The stable version itself: only the ledger's record of its contract tells a config pushed since
        # it was verified (a failure: a rollback writes the recorded config back) from a wrong request.
        reference = contract_from_config(stable.config, what=f"stable v{stable.version} (the ledger's record)")
    else:
        reference = stable_contract(triton, model, stable)
    against = suite_misfits(golden, reference, key=key) if reference is not None else None
    return judge_fit(version, served, stable_version=stable.version, stable=against)


def misfit_result(model: str, version: str, golden: Golden, verdict: FitVerdict, elapsed_s: float = 0.0) -> ProbeResult:
    """The business tier's result for a golden request that does not fit and says nothing about the model
    (a configuration error, or undecided): ``error``, never sent."""
    return ProbeResult(
        Tier.BUSINESS,
        Status.ERROR,
        model,
        version,
        elapsed_s * 1000,
        misfit_reason(model, version, verdict),
        {"input_hash": suite_hash(golden), "fit": verdict.fit.value, "findings": list(verdict.findings)},
    )


def explained(result: ProbeResult, verdict: FitVerdict | None) -> ProbeResult:
    """A failure of a version whose contract changed, with the reason saying so (Triton's refusal alone
    reads as the model failing for no reason a person can see)."""
    if verdict is None or verdict.fit is not Fit.CONTRACT_CHANGE or result.status is not Status.FAIL:
        return result
    return dataclasses.replace(
        result,
        reason=f"{verdict.why} ({'; '.join(verdict.findings)}): {result.reason}",
        details={**result.details, "fit": verdict.fit.value, "findings": list(verdict.findings)},
    )


@dataclass(frozen=True)
class _Seen:
    verdict: FitVerdict
    at: float


class GoldenFit:
    """Each model version's fit, remembered (the sidecar's probe loop; safe across its probe workers).
    ``stable_of``: the model's stable record from the store (None: no store, nothing recorded); it may
    raise, and the answer is then undecided and asked again next time."""

    def __init__(
        self,
        settings: Settings,
        *,
        stable_of: StableOf | None,
        clock: Callable[[], float] = time.monotonic,
        recheck_misfit_s: float = RECHECK_MISFIT_S,
    ) -> None:
        self._keys = {m.name: golden_key(settings, m.name) for m in settings.models}
        self._stable_of = stable_of
        self._clock = clock
        self._recheck_s = recheck_misfit_s
        # Per model, version and suite (its hash): a request a pipeline adds to the store is checked too.
        self._seen: dict[tuple[str, str, str], _Seen] = {}
        self._lock = threading.Lock()

    def check(self, triton: TritonAPI, model: str, version: str, golden: Golden) -> FitVerdict | None:
        now = self._clock()
        with self._lock:
            seen = self._seen.get((model, version, suite_hash(golden)))
        if seen is not None and (seen.verdict.fit is not Fit.CONFIG_ERROR or now - seen.at < self._recheck_s):
            return seen.verdict
        verdict = self._check(triton, model, version, golden)
        if verdict is not None and verdict.fit is not Fit.UNDECIDED:
            with self._lock:
                self._seen[(model, version, suite_hash(golden))] = _Seen(verdict, now)
        return verdict

    def _check(self, triton: TritonAPI, model: str, version: str, golden: Golden) -> FitVerdict | None:
        key = self._keys.get(model, f"{model}.golden")
        contract = served_contract(triton, model, version)
        if contract is None:
            return None
        served = suite_misfits(golden, contract, key=key)
        if not served:
            return FitVerdict(Fit.FITS)
        try:
            stable = self._stable_of(model) if self._stable_of is not None else None
        except Exception as exc:  # the store, whatever its trouble: nothing concluded, asked again
            return FitVerdict(
                Fit.UNDECIDED,
                served,
                f"the golden request does not fit v{version}, and the stable version could not be read to tell "
                f"a changed contract from a wrong golden request ({type(exc).__name__}: {str(exc)[:200]})",
            )
        return judged(triton, model, version, golden, served, key=key, stable=stable)
