"""What the tests share besides fixtures (those are in tests/conftest.py and each folder's conftest.py):
stand-ins and helpers that more than one test folder imports. Real servers started for a test
(``s3_server``: SeaweedFS; ``tls``: openssl's certificates; ``browser``: headless Chromium; ``helm``: the
pinned helm), scripted ones in their place (``argo_faults``: the Argo Server's failures;
``sidecar_fleet``: Tritons, engines, a clock and a fleet of sidecars; ``flood``: a slowloris), scenario
builders (``rollback_stack``: a store, a live repository, a ledger on the real Triton;
``drill_results``: a catalog run's results), and readers of the repository (``prometheus_rules``: the
chart's alert rules rendered; ``rbac_scan``: the calls healer makes against what its Roles grant)."""
