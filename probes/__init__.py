"""The three probe tiers: liveness, readiness and business (golden requests).

Import what you need from its module (probes.tiers, probes.result, ...): the package itself imports
nothing, so a pure module that needs ``probes.result`` does not pull in the tiers and their Triton edge.
"""
