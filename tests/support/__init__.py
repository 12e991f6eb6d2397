"""What the tests share besides fixtures (those are in tests/conftest.py and each folder's conftest.py):
stand-ins and helpers that more than one test module imports. Real servers and programs started for a
test (``s3_server``: SeaweedFS; ``tls``: openssl's certificates; ``browser``: headless Chromium; ``helm``:
the pinned helm; ``argo_expr``: Argo's own expr, run by Go), scripted ones in their place
(``argo_faults``: the Argo Server's failures; ``sidecar_fleet``: Tritons, engines, a clock and a fleet of
sidecars; ``fleet_triton``: a Triton replica in memory; ``step_context``: the steps' context for the
engines; ``flood``: a slowloris), scenario builders (``rollback_stack``: a store, a live repository, a
ledger on the real Triton; ``kill_points``: a run SIGKILLed at a chosen point; ``drill_results``: a
catalog run's results), and readers of the repository (``prometheus_rules``: the chart's alert rules
rendered; ``rbac_scan``: the calls healer makes against what its Roles grant)."""
