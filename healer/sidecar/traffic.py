"""Triton's own numbers as the sidecar sees them (docs/traffic-signal.md; healer/core/traffic.py decides).

Once per full cycle the sidecar scrapes its own pod's Triton metrics endpoint (healer/edges/
triton_metrics.py: a total timeout, a 4 MiB cap) and keeps, per model and version, samples of Triton's
counters beside healer's own requests to that version so far: every golden request goes through
``counting`` (a TritonAPI that counts the inference calls it passes on), so Triton's counts minus
healer's are the real traffic. With ``sidecar.traffic.enabled`` a version whose real traffic fails more
than ``max_failure_ratio`` (or is slower than ``max_mean_latency_ms``) over one window, and again over a
second window wholly after it, is a business failure of that version: ``merged`` turns the model's
cycle verdict into a wrong answer for it (the golden request passing does not clear it), and the
existing path (failure_threshold, the incident key, one rollback fleet-wide) follows. Nothing learnt
(no traffic, the endpoint unreachable or unreadable, a counter reset) never fails a version.

With the endpoint read at all (enabled, or ``metrics_url`` set), every incident gets its blast radius:
the real requests the failing version failed (and served) between the first failure seen and the
restore; in the incident line, ``healer_incident_failed_requests_total``, the ModelRestored Event, and
(the part up to the decision) the rollback request's detail, which its Argo page shows. The request also
carries the version's failure counter at the first failure (``baseline``): the rollback measures the
radius up to the restore from it (healer/core/blast.py, workflows/steps/blast.py).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import structlog

from healer.core.blast import baseline_of
from healer.core.decisions import stall_after_s
from healer.core.state import Incident, Probed, Verdict, incident_key
from healer.core.traffic import (
    FAILURE_RATIO,
    LATENCY,
    BlastRadius,
    Counters,
    Judged,
    Key,
    Limits,
    Overrides,
    Sample,
    Signal,
    TrafficState,
    Window,
    blast_radius,
    judge_window,
    limits_for,
    since_reset,
    step,
)
from healer.edges.metrics import Registry
from healer.edges.triton import TritonAPI
from healer.edges.triton_metrics import MetricsUnavailable, metrics_url_for, port_and_path, scrape
from healer.settings import Settings
from healer.sidecar.clock import Clock
from healer.sidecar.notify import Notifier
from healer.sidecar.observe import PLAN_READS_S
from healer.vocabulary import MODEL_ERROR, SLOW, TRAFFIC, RollbackRequest

log = structlog.get_logger("healer.sidecar")

HISTORY_S = 600.0  # samples kept this long at least (an incident's blast radius reaches back this far)
SAMPLES_PER_WINDOW = 10  # a sample is kept every window_s / this (the newest always) ...
RECENT_WINDOWS = 3  # ... over the last windows; older ones (the blast radius's) thinned to at most ...
OLD_SAMPLES = 120  # ... this many over HISTORY_S: about 150 samples (~50 KiB) per version at most
TRAFFIC_CONTENT = "traffic"  # the incident key's content for a traffic failure: the same on every replica

Scrape = Callable[[str, float], Mapping[Key, Counters]]


def _scrape(url: str, timeout_s: float) -> Mapping[Key, Counters]:
    return scrape(url, timeout_s=timeout_s)


def declare(metrics: Registry) -> None:
    """The traffic signal's metrics (docs/traffic-signal.md)."""
    metrics.counter("healer_traffic_scrapes_total", "Scrapes of Triton's metrics endpoint by result (ok, error).")
    metrics.gauge("healer_traffic_failure_ratio", "Real requests failed / real requests over the last window.")
    metrics.gauge("healer_traffic_requests", "Real requests (healer's own subtracted) over the last window.")
    metrics.gauge("healer_traffic_signal", "1 for a model version's traffic signal (quiet, suspect, confirmed).")
    metrics.counter(
        "healer_incident_failed_requests_total",
        "Real requests the failing version failed between an incident's first failure and its restore.",
    )
    metrics.counter(
        "healer_incident_served_requests_total",
        "Real requests the failing version answered between an incident's first failure and its restore.",
    )


class CountingTriton:
    """A TritonAPI passing every call on, counting the inference requests (infer, generate,
    generate_stream) per (model, version): healer's own requests, which Triton's metrics count too."""

    def __init__(self, inner: TritonAPI, count: Callable[[str, str, bool, float], None], clock: Clock) -> None:
        self._inner = inner
        self._count = count
        self._clock = clock
        self.url = inner.url

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _counted(self, model: str, version: str, call: Callable[[], Any]) -> Any:
        started = self._clock.monotonic()
        failed = True
        try:
            answer = call()
            failed = False
            return answer
        finally:
            self._count(model, version, failed, (self._clock.monotonic() - started) * 1000.0)

    def infer(self, model: str, version: str, *args: Any, **kwargs: Any) -> Any:
        return self._counted(model, version, lambda: self._inner.infer(model, version, *args, **kwargs))

    def generate(self, model: str, version: str, *args: Any, **kwargs: Any) -> Any:
        return self._counted(model, version, lambda: self._inner.generate(model, version, *args, **kwargs))

    def generate_stream(self, model: str, version: str, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self._count(model, version, False, 0.0)  # one request; its time is not Triton's request duration
        return self._inner.generate_stream(model, version, *args, **kwargs)


def _count_own(counts: dict[Any, tuple[int, int, float]], key: Any, failed: bool, ms: float) -> None:
    own, own_failed, own_ms = counts.get(key, (0, 0, 0.0))
    counts[key] = (own + 1, own_failed + int(failed), own_ms + (0.0 if failed else ms))


def watch_traffic(
    settings: Settings, triton: TritonAPI, metrics: Registry, clock: Clock, notify: Notifier
) -> tuple[TrafficWatch, TritonAPI]:
    """The sidecar's TrafficWatch, and ``triton`` counting healer's own requests; every incident the
    Notifier closes gets its blast radius."""
    watch = TrafficWatch(settings, metrics=metrics, clock=clock)
    notify.blast_of = watch.restored
    return watch, watch.counting(triton)


def is_traffic_incident(incident: Incident, codes: tuple[str, ...] = (FAILURE_RATIO, LATENCY, "")) -> bool:
    """Whether the traffic signal made this incident (``merged``'s content), not a check's wrong answer;
    ``codes``: only for these window codes."""
    return incident.key in {
        incident_key(incident.model, incident.version, f"{TRAFFIC_CONTENT}:{code}") for code in codes
    }


class TrafficWatch:
    def __init__(self, settings: Settings, *, metrics: Registry, clock: Clock, scrape: Scrape = _scrape) -> None:
        traffic = settings.sidecar.traffic
        self.judging = traffic.enabled
        self.reading = traffic.enabled or traffic.metrics_url is not None
        self.url = traffic.metrics_url or metrics_url_for(settings.triton.url)
        self.timeout_s = traffic.timeout_s
        self._limits = Limits(
            window_s=traffic.window_s,
            min_requests=traffic.min_requests,
            max_failure_ratio=traffic.max_failure_ratio,
            max_mean_latency_ms=traffic.max_mean_latency_ms,
        )
        self._overrides = {
            o.model: Overrides(o.min_requests, o.max_failure_ratio, o.max_mean_latency_ms) for o in traffic.models
        }
        self._models = frozenset(m.name for m in settings.models)
        self._scrape = scrape
        self._clock = clock
        self._metrics = metrics
        self._lock = threading.Lock()  # healer's own counts come from the probe workers
        self._own: dict[Key, tuple[int, int, float]] = {}
        # healer's calls to a pipeline count on each of its members too (Triton counts the members' requests):
        # per member model, every version of it (``follow``); the members as last seen, read without I/O.
        self._own_member: dict[str, tuple[int, int, float]] = {}
        self._members: dict[str, tuple[str, ...]] = {}
        self._pipelines: Any = None
        self._samples: dict[Key, deque[Sample]] = {}
        self._states: dict[Key, TrafficState] = {}
        self._signals: dict[Key, Signal] = {}
        self._since: dict[Key, float] = {}  # when a version's traffic began failing (kept across a reset)
        self._present: frozenset[Key] = frozenset()  # the versions in the last scrape (loaded)
        self._gap = False  # a scrape failed since the last one read: the next samples start anew
        self.last_windows: dict[Key, Window] = {}  # each version's last judged window (/status: traffic_view.py)
        self.error = ""  # why the last scrape learnt nothing ("" when it was read)
        if self.reading:  # declared only when the endpoint is read: no empty series otherwise
            declare(metrics)

    # ---- healer's own requests ------------------------------------------------------------------------
    def counting(self, triton: TritonAPI) -> TritonAPI:
        """``triton`` counting healer's own inference requests (as it is when the endpoint is not read)."""
        if not self.reading:
            return triton
        counted: TritonAPI = CountingTriton(triton, self._own_request, self._clock)
        return counted

    def follow(self, pipelines: Any) -> None:
        """Know the pipelines' members (healer/sidecar/pipelines.py PipelineWatch ``view``, no I/O): healer's
        requests to a pipeline are subtracted from each member's numbers as well (docs/traffic-signal.md)."""
        self._pipelines = pipelines

    def _own_request(self, model: str, version: str, failed: bool, ms: float) -> None:
        with self._lock:
            _count_own(self._own, (model, version), failed, ms)
            for member in self._members.get(model, ()):  # the pipeline's members answered it too
                _count_own(self._own_member, member, failed, ms)

    # ---- one scrape per full cycle ----------------------------------------------------------------------
    def observe(self) -> None:
        """Scrape once, keep the samples, judge each configured model's versions (when judging). Never
        raises: a bug here is logged and nothing is learnt this period."""
        if not self.reading:
            return
        try:
            self._observe()
        except Exception:
            log.exception("traffic_not_observed")

    def _observe(self) -> None:
        now = self._clock.monotonic()
        try:
            counters = self._scrape(self.url, self.timeout_s)
        except MetricsUnavailable as exc:
            self._metrics.inc("healer_traffic_scrapes_total", {"result": "error"})
            if str(exc) != self.error:
                log.warning("triton_metrics_unavailable", url=self.url, error=str(exc), learnt=False)
            self.error = str(exc)
            self._gap = True  # the next samples may be of a restarted Triton: no window across this
            return
        self._metrics.inc("healer_traffic_scrapes_total", {"result": "ok"})
        self.error = ""
        self._read_members()
        with self._lock:
            own, own_member = dict(self._own), dict(self._own_member)
        present = frozenset(k for k in counters if k[0] in self._models)
        for key in present:
            o, m = own.get(key, (0, 0, 0.0)), own_member.get(key[0], (0, 0, 0.0))
            gap = self._gap or (key in self._samples and key not in self._present)
            self._keep(key, Sample(now, counters[key], o[0] + m[0], o[1] + m[1], o[2] + m[2], gap=gap))
        self._gap = False
        for key in set(self._samples) - present:  # unloaded: kept for the blast radius, until too old
            if self._samples[key][-1].at < now - self._horizon_s:
                del self._samples[key]
                self._states.pop(key, None)
                self._signals.pop(key, None)
                self._since.pop(key, None)
                self.last_windows.pop(key, None)
        self._present = present
        if self.judging:
            for key in present:
                self._judge(key, now)

    def _read_members(self) -> None:
        """Each pipeline's members as the pipeline watch last read them; a member once known stays counted (its
        own requests only grow: a member dropped would make the subtraction go back, over-counting real ones)."""
        if self._pipelines is None:
            return
        for name in self._models:
            view = self._pipelines.view(name) or {}
            members = {m["model"] for m in view.get("members", ())} - {name}
            with self._lock:
                self._members[name] = tuple(sorted(members | set(self._members.get(name, ()))))

    @property
    def _horizon_s(self) -> float:
        return max(HISTORY_S, 3 * self._limits.window_s)

    def _keep(self, key: Key, sample: Sample) -> None:
        samples = self._samples.setdefault(key, deque())
        if samples and len(since_reset([samples[-1], sample])) == 1:
            self._states.pop(key, None)  # a counter went down: the version's judgement starts anew
        fine = self._limits.window_s / SAMPLES_PER_WINDOW
        # The newest sample replaces the previous one when that one is closer than ``fine`` to the one before.
        if len(samples) >= 2 and samples[-1].at - samples[-2].at < fine and not samples[-1].gap:
            samples.pop()
        samples.append(sample)
        while samples and samples[0].at < sample.at - self._horizon_s:
            samples.popleft()
        # Older than RECENT_WINDOWS windows (the blast radius's part only), one sample per ``coarse`` is kept.
        coarse = max(fine, self._horizon_s / OLD_SAMPLES)
        cutoff = sample.at - RECENT_WINDOWS * self._limits.window_s
        kept: list[Sample] = []
        for each in samples:
            if len(kept) >= 2 and each.at < cutoff and each.at - kept[-2].at < coarse:
                kept[-1] = each  # the one before is dropped: its neighbours are closer than coarse
            else:
                kept.append(each)
        if len(kept) < len(samples):
            self._samples[key] = deque(kept)

    def _judge(self, key: Key, now: float) -> None:
        limits = limits_for(self._limits, self._overrides, key[0])
        window = judge_window(list(self._samples[key]), now, limits)
        self.last_windows[key] = window
        before = self._signals.get(key, Signal.QUIET)
        self._states[key], signal = step(self._states.get(key, TrafficState()), window)
        self._signals[key] = signal
        if signal is Signal.QUIET and window.judged is Judged.WITHIN:
            self._since.pop(key, None)
        elif signal is not Signal.QUIET and key not in self._since and self._states[key].since is not None:
            self._since[key] = self._states[key].since  # type: ignore[assignment]
        labels = {"model": key[0], "version": key[1]}
        if window.requests:
            self._metrics.set("healer_traffic_failure_ratio", labels, window.ratio)
        self._metrics.set("healer_traffic_requests", labels, float(window.requests))
        for each in Signal:
            self._metrics.set("healer_traffic_signal", {**labels, "signal": each.value}, float(each is signal))
        if signal is not before:
            log.info("traffic_signal", model=key[0], version=key[1], signal=signal.value, why=window.why)

    # ---- what the loop asks ----------------------------------------------------------------------------
    def merged(self, model: str, probed: Probed) -> Probed:
        """The cycle's verdict with the traffic signal: the version the golden request found served (a
        GOOD verdict's), its traffic confirmed over a limit, makes it a wrong answer of that version.
        A wrong or not-ready verdict stands; an inconclusive one (no version known served) is left so."""
        if not self.judging or probed.verdict is not Verdict.GOOD or probed.version is None:
            return probed
        key = (model, probed.version)
        state = self._states.get(key)
        if key not in self._present or self._signals.get(key) is not Signal.CONFIRMED or state is None:
            return probed
        window = state.window
        latency = window is not None and window.code != FAILURE_RATIO
        return Probed(
            probed.at,
            Verdict.WRONG,
            version=probed.version,
            reason_code=SLOW if latency else MODEL_ERROR,
            detail=f"real traffic: {window.why if window is not None else 'over its limit'}",
            content=f"{TRAFFIC_CONTENT}:{window.code if window is not None else ''}",
        )

    def first_seen(self, model: str, version: str) -> float | None:
        """When the traffic of this version began failing, as its first window over a limit says."""
        return self._since.get((model, version))

    def blast(self, incident: Incident, until: float) -> BlastRadius:
        """The failing version's real failed and served requests from the first failure seen to ``until``."""
        samples = list(self._samples.get((incident.model, incident.version), ()))
        seen = self.first_seen(incident.model, incident.version)
        since = incident.first_bad_at if seen is None else min(seen, incident.first_bad_at)
        return blast_radius(samples, since, until)

    def with_blast(self, request: RollbackRequest, incident: Incident) -> RollbackRequest:
        """The rollback's request with the blast radius up to now in its detail (the audit record and the
        Argo page show it); unchanged when the endpoint is not read. An incident of the traffic signal (its
        key's content is ``traffic:<code>``: ``merged``) judged on latency asks with reason ``traffic``: restored
        as any detection, quarantined only if a golden request fails on it (workflows/plan.py decide_rollback):
        a slow window may be the node or the load. One judged on its failure ratio keeps its reason: the
        version's own errors (BACKEND, OTHER; never a full queue or a cancelled client), over two windows,
        are evidence, and without the quarantine a restarted Triton would load the failing version again."""
        if not self.reading:
            return request
        if is_traffic_incident(incident, (LATENCY, "")):
            request = dataclasses.replace(request, reason=TRAFFIC)
        words = f"; blast radius at the decision: {self.blast(incident, self._clock.monotonic()).words()}"
        request = dataclasses.replace(request, detail=request.detail[: 500 - len(words)] + words)
        return dataclasses.replace(request, blast_baseline=self.baseline(incident, request.triton_url))

    def baseline(self, incident: Incident, replica: str) -> str:
        """The failing version's failure counter at the first failure, for the rollback to measure the blast
        radius up to the restore (healer/core/blast.py); "" with no sample of it."""
        key = (incident.model, incident.version)
        seen = self.first_seen(*key)
        with self._lock:
            own_failed = self._own.get(key, (0, 0, 0.0))[1] + self._own_member.get(key[0], (0, 0, 0.0))[1]
        since = incident.first_bad_at if seen is None else min(seen, incident.first_bad_at)
        metrics = port_and_path(self.url)
        samples = list(self._samples.get(key, ()))
        found = (
            None if metrics is None else baseline_of(key, samples, since, own_failed, replica=replica, metrics=metrics)
        )
        return "" if found is None else found.encode()

    def restored(self, incident: Incident, at: float) -> BlastRadius:
        """The incident is closed: its blast radius counted in the metrics and returned (for the line, the Event)."""
        if not self.reading:
            return BlastRadius()
        radius = self.blast(incident, at)
        if radius.measured:
            labels = {"model": incident.model}
            self._metrics.inc("healer_incident_failed_requests_total", labels, float(radius.failed))
            self._metrics.inc("healer_incident_served_requests_total", labels, float(radius.served))
        return radius

    def view(self) -> dict[str, Any]:
        """For /status: each version's signal and the last scrape's trouble (per model: traffic_view.py)."""
        return {
            "metrics_url": self.url,
            "error": self.error,
            "versions": {f"{m}/{v}": self._signals.get((m, v), Signal.QUIET).value for m, v in sorted(self._present)},
        }


def loop_stall_after_s(settings: Settings) -> float:
    """The sidecar's /healthz bound (healer/core/decisions.py ``stall_after_s``) for these settings: the
    golden requests, Triton's calls, every model's observe plan reads and the metrics scrape when read."""
    traffic = settings.sidecar.traffic
    reading = traffic.enabled or traffic.metrics_url is not None
    return stall_after_s(
        period_s=settings.sidecar.period_s,
        golden_timeouts_s=[sum(g.timeout_s for g in m.suite) for m in settings.models],
        triton_timeout_s=settings.triton.timeout_s,
        scrape_timeout_s=traffic.timeout_s if reading else 0.0,
        plan_reads_s=PLAN_READS_S,
    )
