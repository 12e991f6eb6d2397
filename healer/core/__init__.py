"""The core: pure rules and the data they judge (the sidecar's state machine, the decisions beside it,
the stable ledger, the labels, a probe's result, the drills' catalog and verdicts). No I/O, no client,
no clock read here: the contract "Decisions are pure" in pyproject.toml holds it to that."""
