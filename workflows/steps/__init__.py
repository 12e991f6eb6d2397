"""The steps as plain, typed, idempotent functions over a StepContext, run inside an Argo pod (through
Hera's runner, see workflows/rollback.py) and in-process in the LocalEngine.

The rollback's, top to bottom (each module imports only from those below it):

* ``rollback``: heal (lease -> fetch-stable -> restore each replica: swap and verify -> record) and
  escalate when any of it fails or the deadline passes
* ``replicas``: which Tritons to heal, one replica restored, the canary then waves, the put-back
* ``lease`` | ``versions`` | ``records``: the model's lease; one version on one Triton (stage, unload,
  load, verify); what a rollback writes (quarantine, audit, evidence, the live repository's files)
* ``base``: the step errors and the StepContext

Beside them: ``context`` (how a step gets its StepContext), and the release's, the promotion's, the
staging's and the drill's steps (``release``, ``promote``, ``stage``, ``drill``, ``drill_inject``,
``drill_observe``). A test that replaces a function replaces it in the module that calls it.
"""

from workflows.steps.base import GoldenFailed, PermanentStepError, StepContext, StepError, TransientStepError
from workflows.steps.lease import LeaseKeeper, lease_hold_limit_s
from workflows.steps.records import quarantine_files, record, why_not_quarantined
from workflows.steps.replicas import (
    on_replica,
    put_back_unloaded,
    replica_targets_for,
    restore_replica,
    restore_replicas,
    swap_replicas,
)
from workflows.steps.rollback import PHASES, HealFailed, PhaseReport, confirm_failing, escalate, heal
from workflows.steps.versions import (
    choose_stable,
    fetch_stable,
    load,
    pinned_config,
    stage_version,
    unload,
    verify,
)

__all__ = [
    "PHASES",
    "GoldenFailed",
    "HealFailed",
    "LeaseKeeper",
    "PermanentStepError",
    "PhaseReport",
    "StepContext",
    "StepError",
    "TransientStepError",
    "choose_stable",
    "confirm_failing",
    "escalate",
    "fetch_stable",
    "heal",
    "lease_hold_limit_s",
    "load",
    "on_replica",
    "pinned_config",
    "put_back_unloaded",
    "quarantine_files",
    "record",
    "replica_targets_for",
    "restore_replica",
    "restore_replicas",
    "stage_version",
    "swap_replicas",
    "unload",
    "verify",
    "why_not_quarantined",
]
