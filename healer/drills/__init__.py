"""Chaos drills: break a Triton target on purpose and check that healer heals it, in time.

* ``healer.core.drill_catalog`` (pure): the breakages, each with its expected outcome.
* ``healer.core.drill_verdict`` (pure): what a run observed → its outcome, passed or not, which budget missed.
* ``healer.core.drill_report`` (pure): the result table and the self-contained HTML report.
* ``workflows.steps.drill_inject`` and ``workflows.steps.drill_observe``: the I/O edge (push, tamper, kill; watch
  the sidecars and the golden request on every replica).
* ``healer.drills.stack`` and ``healer.drills.runner``: the embedded stack and the in-process runs
  (``healer drill``, ``make demo``); ``workflows.steps.drill``: what the Argo drill's pods run.
"""
