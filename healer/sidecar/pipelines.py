"""The pipelines as the sidecar sees them (healer/core/pipeline.py decides): each configured model's
composing models (healer.yaml's ``calls``, an ensemble's steps from Triton's config), the version each
runs before and after every probe of the pipeline, the versions it ran when the pipeline last passed,
and whom an incident blames. Only the probe loop writes it; /status reads it under its lock."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from healer.core.pipeline import Blame, Member, blame, config_members, nobody, pipeline_members, running_version
from healer.core.state import Incident, Probed, Verdict
from healer.edges.triton import IndexEntry, TritonAPI, TritonError, TritonUnavailable
from healer.settings import ModelSettings
from healer.sidecar.clock import REAL_CLOCK, Clock

log = structlog.get_logger("healer.sidecar")

CONFIG_REREAD_S = 60.0  # a model's config (is it an ensemble, of what) read again this often
NOT_PIPELINE_READS = 2  # reads in a row (CONFIG_REREAD_S apart) before a known pipeline is taken for a plain model
MAX_BLAMES = 64  # incidents whose blame is kept (one per pipeline at a time, in practice)
UNREAD = "\0unread"  # a baseline the store did not give (its trouble): nothing learnt, never "no stable version"


@dataclass
class _Pipeline:
    members: tuple[Member, ...] = ()
    read_at: float | None = None  # when Triton's config was last read whole (None: never)
    known: bool = False  # its config was read whole at least once: whether it is a pipeline is known
    not_pipeline_reads: int = 0  # reads in a row that said a known pipeline is not one
    nested: tuple[str, ...] = ()  # members that are ensembles themselves: not expanded, nobody blamed
    before: dict[str, str | None] = field(default_factory=dict)  # at the start of the probe
    now: dict[str, str | None] = field(default_factory=dict)  # after the probe
    passed: dict[str, str] = field(default_factory=dict)  # when the pipeline last passed
    passed_own: str | None = None
    blamed: str = ""  # the member (or the pipeline) the latest incident blamed, for /status
    blamed_why: str = ""
    blamed_incident: str = ""


class PipelineWatch:
    """Every configured model that is a pipeline (one with members), watched for blame."""

    def __init__(
        self,
        models: Sequence[ModelSettings],
        triton: TritonAPI,
        *,
        clock: Clock = REAL_CLOCK,
        stable_of: Callable[[str], str | None] | None = None,
    ) -> None:
        self._models = {m.name: m for m in models}
        # A member's newest stable version (its ledger; None: not known): the baseline of a member never seen
        # passing here (the sidecar started with the pipeline failing), read only when an incident is blamed.
        self._stable_of = stable_of
        self._triton = triton
        self._clock = clock
        self._lock = threading.Lock()
        self._pipelines = {m.name: _Pipeline() for m in models}
        self._blames: dict[str, Blame] = {}  # incident key -> whom it blames (decided once)
        # Triton did not answer a config read this cycle: no more are tried until the next cycle, so a hung
        # Triton costs one read's timeout per cycle, not one per model.
        self._configs_down = False
        self._index_down = False  # likewise for the repository index the members' versions are read from

    # ---- each probe cycle (the loop's thread and its workers) -------------------------------------------------
    def before_probe(self, names: Collection[str]) -> None:
        """The members' versions before the pipelines are probed: a pass counts only for what ran."""
        self._configs_down = False
        self._index_down = False
        index: list[IndexEntry] | None = None
        read = False
        for name in names:
            members = self.members(name)
            if members:
                if not read:  # one repository index for every pipeline's members
                    index, read = self._index(), True
                versions = _versions(members, index)
                with self._lock:
                    self._pipelines[name].before = versions

    def after_probe(self, name: str, probed: Probed) -> None:
        """The members' versions after the pipeline's probe; a pass on unchanged members is recorded."""
        members = self.members(name)
        if not members:
            return
        versions = _versions(members, self._index())
        with self._lock:
            pipeline = self._pipelines[name]
            pipeline.now = dict(versions)
            if probed.version is not None:
                pipeline.now[name] = probed.version
            steady = pipeline.before == versions and None not in versions.values()
            if probed.verdict is Verdict.GOOD and steady:
                pipeline.passed = {m: str(v) for m, v in versions.items()}
                pipeline.passed_own = probed.version

    # ---- an incident ------------------------------------------------------------------------------------------
    def blame(self, incident: Incident) -> Blame | None:
        """Whom ``incident`` (of a pipeline) blames (None: not a pipeline), decided once per incident: a model,
        or nobody with ``escalate`` (a person decides: the sidecar escalates at once). Nobody without
        ``escalate``: nothing learnt yet (a member's version, or a baseline in the store, not read), asked again
        at the next submission."""
        with self._lock:
            decided = self._blames.get(incident.key)
        if decided is not None:  # decided once: never read again (the ledger included)
            return decided
        members = self.members(incident.model)
        model = self._models.get(incident.model)
        if not self.known(incident.model) and (model is None or not model.calls):
            # Configured without ``calls`` and its config never read: most likely a plain model whose config
            # read fails (not a pipeline known to be one): nothing learnt, asked again at the next submission,
            # as any model's failure waits; the healing timeout escalates it. Never its own version rolled
            # back on a guess, never escalated at once on one.
            why = (
                f"{incident.model}'s config not read yet (it has no calls): whether it is a pipeline is unknown; "
                "nobody blamed yet (asked again)"
            )
            log.warning("pipeline_blame_undecided", model=incident.model, incident=incident.key, why=why)
            return Blame(None, why=why)
        undecidable = self._undecidable(incident.model)
        if undecidable is not None:
            return self._decided(incident, undecidable)
        if not members:
            return None
        return self._weigh(incident)

    def _undecidable(self, name: str) -> Blame | None:
        """Nobody blamed whatever changed, a person decides: ``name`` (a pipeline by its ``calls``) with its config
        never read whole (whether it is also an ensemble, of what, is unknown: rolling back its own version could
        undo the wrong model; the read was tried every cycle of the bad streak), or an ensemble nested in it.
        None: the members are weighed."""
        if not self.known(name):
            return nobody(
                f"{name}'s config not read whole (Triton refused it, did not answer or answered part of it) in "
                "any cycle of this incident: whether it is a pipeline is unknown; nobody blamed, a person decides"
            )
        with self._lock:
            nested = self._pipelines[name].nested
        if nested:  # an ensemble inside it: blaming its members (or the outer ensemble) would be a guess
            return nobody(
                f"{', '.join(nested)}: an ensemble inside {name}; nested pipelines are not expanded: "
                "nobody blamed, a person decides"
            )
        return None

    def _weigh(self, incident: Incident) -> Blame:
        """What changed since the pipeline last passed (or since the stable versions), decided (core.pipeline)."""
        with self._lock:
            pipeline = self._pipelines[incident.model]
            names = [m.name for m in pipeline.members]
            passed = dict(pipeline.passed)
            passed_own = pipeline.passed_own
        # Never seen passing here: each one's newest stable version in its ledger is its baseline (none: no
        # evidence, nobody blamed). The pipeline's own too, so that its own change is never missed.
        baseline = {m: self._stable(m) for m in [*names, incident.model] if m not in passed}
        if passed_own is not None:
            baseline.pop(incident.model, None)
        unread = [m for m, v in baseline.items() if v is UNREAD]
        if unread:  # the store's trouble: nothing learnt (not "no evidence"), asked again at the next submission
            why = f"{', '.join(unread)}: stable version in the ledger not read; nobody blamed yet (nothing learnt)"
            log.warning("pipeline_blame_undecided", model=incident.model, incident=incident.key, why=why)
            return Blame(None, why=why)
        with self._lock:
            decided = blame(
                incident.model,
                incident.version,
                members=names,
                now={m: pipeline.now.get(m) for m in names},
                passed={**{m: v for m, v in baseline.items() if v is not None and m in names}, **passed},
                passed_own=passed_own if passed_own is not None else baseline.get(incident.model),
            )
            from_ledger = sorted(m for m, v in baseline.items() if v is not None)
            if decided.model is not None and from_ledger:
                note = f"; {', '.join(from_ledger)}: its stable version ({incident.model} not seen passing here)"
                decided = dataclasses.replace(decided, why=decided.why + note)
        if decided.model is not None or decided.escalate:
            return self._decided(incident, decided)
        log.warning("pipeline_blame_undecided", model=incident.model, incident=incident.key, why=decided.why)
        return decided

    def _decided(self, incident: Incident, decided: Blame) -> Blame:
        """``incident``'s blame, decided for good: kept (never decided again) and shown in /status."""
        with self._lock:
            self._blames[incident.key] = decided
            while len(self._blames) > MAX_BLAMES:
                del self._blames[next(iter(self._blames))]
            pipeline = self._pipelines[incident.model]
            pipeline.blamed, pipeline.blamed_why = decided.model or "", decided.why
            pipeline.blamed_incident = incident.key
        log.warning(
            "pipeline_blamed" if decided.model else "pipeline_blamed_nobody",
            model=incident.model,
            incident=incident.key,
            blamed=decided.model,
            version=decided.version,
            why=decided.why,
        )
        return decided

    # ---- what it knows ----------------------------------------------------------------------------------------
    def members(self, name: str) -> tuple[Member, ...]:
        """``name``'s members: its declared calls and, read from Triton at most every CONFIG_REREAD_S, its
        ensemble steps. A read that fails or is partial (core.pipeline.config_members) is not a read: what
        was known is kept and it is tried again; a known pipeline is dropped only after NOT_PIPELINE_READS
        reads in a row say it is not one."""
        model = self._models.get(name)
        if model is None:
            return ()
        with self._lock:
            pipeline = self._pipelines[name]
            read_at = pipeline.read_at
        now = self._clock.monotonic()
        if (read_at is None or now - read_at >= CONFIG_REREAD_S) and not self._configs_down:
            read: tuple[Member, ...] | None
            try:
                config = self._triton.model_config(name)
                config_members(name, config)  # a partial answer, or another model's, raises: not read
                read = pipeline_members(model.calls, config)
                nested = self._nested(read)
            except (TritonError, ValueError) as exc:
                self._configs_down = isinstance(exc, TritonUnavailable)
                log.warning("pipeline_config_unread", model=name, error=str(exc)[:300])
                read = None
            with self._lock:
                if read is None:
                    if not pipeline.members:
                        pipeline.members = pipeline_members(model.calls, None)
                elif not read and pipeline.members and pipeline.known:
                    pipeline.not_pipeline_reads += 1
                    pipeline.read_at = now
                    if pipeline.not_pipeline_reads >= NOT_PIPELINE_READS:
                        log.warning("pipeline_dropped", model=name, reads=pipeline.not_pipeline_reads)
                        pipeline.members, pipeline.not_pipeline_reads = (), 0
                else:
                    pipeline.members, pipeline.read_at, pipeline.known = read, now, True
                    pipeline.not_pipeline_reads, pipeline.nested = 0, nested
        return pipeline.members

    def _nested(self, members: Sequence[Member]) -> tuple[str, ...]:
        """The members that are ensembles themselves (their configs read now; one that cannot be read
        raises, and the pipeline's read does not count: whether it nests is unknown)."""
        return tuple(m.name for m in members if config_members(m.name, self._triton.model_config(m.name)))

    def known(self, name: str) -> bool:
        """Whether ``name``'s config has been read whole at least once (False: whether it is a pipeline,
        and of what, is unknown)."""
        with self._lock:
            pipeline = self._pipelines.get(name)
            return pipeline is not None and pipeline.known

    def view(self, name: str) -> dict[str, Any] | None:
        """/status's ``pipeline`` of a model (None: not a pipeline): its members with the versions they run
        now and ran at the last pass, and whom the latest incident blamed (and which incident)."""
        with self._lock:
            pipeline = self._pipelines.get(name)
            if pipeline is None or not pipeline.members:
                return None
            return {
                "members": [
                    {
                        "model": m.name,
                        "step_version": m.version,
                        "serving": pipeline.now.get(m.name),
                        "passed": pipeline.passed.get(m.name),
                    }
                    for m in pipeline.members
                ],
                "passed_version": pipeline.passed_own,
                "blamed": pipeline.blamed,  # the latest incident's (its key beside it), kept once healed
                "blamed_why": pipeline.blamed_why,
                "blamed_incident": pipeline.blamed_incident,
            }

    def _stable(self, member: str) -> str | None:
        """``member``'s newest stable version from its ledger (None: no store or none; UNREAD: not read)."""
        if self._stable_of is None:
            return None
        try:
            return self._stable_of(member)
        except Exception as exc:  # the store's trouble: nothing learnt about this member's baseline
            log.warning("pipeline_baseline_unread", model=member, error=str(exc)[:300])
            return UNREAD

    def _index(self) -> list[IndexEntry] | None:
        """Triton's repository index (None: not read). After a TritonUnavailable no more are asked this
        cycle: a hung Triton costs one read's timeout per cycle, not one per member or per pipeline."""
        if self._index_down:
            return None
        try:
            return self._triton.repository_index()
        except TritonUnavailable:
            self._index_down = True
            return None
        except TritonError:
            return None


def _versions(members: Sequence[Member], index: Sequence[IndexEntry] | None) -> dict[str, str | None]:
    """The version each member runs, from one repository index: its READY versions (None: not read)."""
    out: dict[str, str | None] = {}
    for member in members:
        if index is None:
            out[member.name] = None
            continue
        ready = [str(r.version) for r in index if r.name == member.name and r.state == "READY" and r.version]
        out[member.name] = running_version(member, ready)
    return out


def ledger_stable(store_factory: Callable[[], Any] | None) -> Callable[[str], str | None] | None:
    """A member's newest stable version, not quarantined, from its ledger in the store ``store_factory``
    opens (None: no store configured). Raises what the store raises."""
    if store_factory is None:
        return None
    factory = store_factory

    def newest(model: str) -> str | None:
        ledger = factory().ledger(model)
        versions = [int(r.version) for r in ledger.stable if not ledger.is_quarantined(r.version)]
        return str(max(versions)) if versions else None

    return newest
