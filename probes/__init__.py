"""The three probe tiers: liveness, readiness and business (golden requests).

Import what you need from its module (probes.tiers, healer.core.results, ...): the package itself imports
nothing, so a pure module that needs ``healer.core.results`` does not pull in the tiers and their Triton edge.
"""
