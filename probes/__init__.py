"""The three probe tiers: liveness, readiness and business (golden requests)."""

from probes.result import ProbeResult, Status, Tier
from probes.tiers import check_business, check_liveness, check_readiness

__all__ = ["ProbeResult", "Status", "Tier", "check_business", "check_liveness", "check_readiness"]
