"""The one shape every probe returns: a frozen record of what was checked and what was seen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any


class Tier(StrEnum):
    LIVENESS = "liveness"
    READINESS = "readiness"
    BUSINESS = "business"


class Status(StrEnum):
    PASS = "pass"  # noqa: S105 - a probe status, not a password
    FAIL = "fail"  # the model is known to be wrong (or not served)
    ERROR = "error"  # inconclusive: nothing was learnt about the model (unreachable, timed out, skipped)


@dataclass(frozen=True)
class ProbeResult:
    tier: Tier
    status: Status
    model: str | None
    version: str | None
    latency_ms: float
    reason: str = ""
    details: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # Why a failure failed, as a short code set by the tier that decided it (business: wrong-answer,
    # non-finite, model-error, slow, timeout); "" when the result is not a failure.
    code: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.details, MappingProxyType):
            object.__setattr__(self, "details", MappingProxyType(dict(self.details)))

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    def to_dict(self) -> dict[str, Any]:
        result = {
            "model": self.model,
            "version": self.version,
            "tier": self.tier.value,
            "status": self.status.value,
            "latency_ms": round(self.latency_ms, 3),
            "reason": self.reason,
            "details": dict(self.details),
        }
        if self.code:  # failures only
            result["code"] = self.code
        return result
