"""Chaos drills: break a Triton target on purpose and check that healer heals it, in time.

* ``healer.drills.catalog`` (pure): the breakages, each with its expected outcome.
* ``healer.drills.verdict`` (pure): what a run observed → its outcome, passed or not, which budget missed.
* ``healer.drills.report`` (pure): the result table and the self-contained HTML report.
* ``healer.drills.inject`` and ``healer.drills.observe``: the I/O edge (push, tamper, kill; watch
  the sidecars and the golden request on every replica).
* ``healer.drills.stack`` and ``healer.drills.runner``: the embedded stack and the in-process runs
  (``healer drill``, ``make demo``); ``healer.drills.cluster``: what the Argo drill's pods run.
"""
