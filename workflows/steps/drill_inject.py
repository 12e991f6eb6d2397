"""The drills' injections (I/O): push a broken version, tamper with the store, delete files, and undo it all.

Every change an injection makes is recorded as an undo action on the ``Injected`` it returns;
``restore_stable`` runs them (newest first), removes the versions the drill pushed (from the live
repository, the store and the rollback's quarantine folder: the drill's own files), and leaves
every live replica serving the stable version, pinned as a rollback pins it, with its golden
request passing. Every call to Triton has a timeout, so a cleanup ends.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from healer.core.ledger import StableRecord, choose_restore_version
from healer.core.results import Status
from healer.edges.logs import iso_utc
from healer.edges.store import DISPLACED_DIR, QUARANTINE_DIR, FilesystemBlobs, ModelStore, StoreError, is_derived
from healer.edges.triton import TritonError, TritonHttp
from healer.settings import VERSION_PATTERN, GoldenRequest, ModelSettings, Settings
from probes.store_suite import StoreSuites
from probes.tiers import check_business

log = structlog.get_logger(__name__)

LOAD_TIMEOUT_S = 60.0
UNLOAD_WAIT_S = 30.0
RECOVERY_LOAD_TRIES = 2
SERVING_POLL_S = 0.01  # how often a push looks for its version among the served ones


class InjectionFailed(Exception):
    """The drill could not break the target as planned: the run proves nothing."""


@dataclass
class DrillTarget:
    """What a drill acts on: one model, the repository its Tritons read, the store, the replicas."""

    settings: Settings  # the drill's settings: this model only, the drill's sidecar period
    model: str
    live: Path  # the directory every replica's Triton reads
    store: ModelStore
    replicas: list[str]  # host:port of each Triton replica
    broken: Path  # the folder of broken variants: <broken>/<model base>/<variant>
    base: str = ""  # the example model the variants belong to (default: the model's own name)
    capabilities: frozenset[str] = frozenset()
    # repository_mode per-pod: every other replica's own repository by its host:port (a deploy reaches each)
    pods: dict[str, Path] = field(default_factory=dict)
    # A composing model's target (member_target): the configured pipeline whose suite judges it, through it.
    pipeline: str = ""
    # The suites with the store's requests (golden_in_store), read as the sidecar reads them: made on first use.
    suites: StoreSuites | None = field(default=None, compare=False, repr=False)

    @property
    def repositories(self) -> list[Path]:
        """Every directory a Triton of the target reads: ``live``, then each pod's own."""
        return list(dict.fromkeys([self.live, *self.pods.values()]))

    @property
    def model_settings(self) -> ModelSettings:
        return self.settings.model(self.pipeline or self.model)

    def suite(self, version: str | None = None) -> tuple[GoldenRequest, ...]:
        """The suite the sidecar judges ``version`` of the target's model (or its pipeline) by: the configured
        requests and, with golden_in_store, the store's (every version's, then ``version``'s own), remembered
        as the sidecar remembers them (probes/store_suite.py StoreSuites; a store that does not answer: the
        last suite read, the configured one before any)."""
        if self.suites is None:
            store = self.store
            self.suites = StoreSuites(lambda: store)
        return self.suites.suite_of(self.model_settings, version)

    def judged(self, triton: TritonHttp, version: str) -> Any:
        """The golden suite's verdict on ``version``: asked of the model, or of a member's pipeline through it
        (the version the pipeline serves now, judged by that version's suite)."""
        if not self.pipeline:
            return check_business(triton, self.model, version, self.suite(version))
        try:
            served = [v for v in triton.served_versions(self.pipeline) if v.isdigit()]
        except TritonError:
            served = []
        newest = max(served, key=int) if served else None
        return check_business(triton, self.pipeline, "", self.suite(newest))

    @property
    def store_root(self) -> Path | None:
        blobs = self.store.blobs
        return blobs.root if isinstance(blobs, FilesystemBlobs) else None

    def variant(self, name: str) -> Path:
        path = self.broken / (self.base or self.model) / name
        if not path.exists():
            raise InjectionFailed(f"no broken variant {name!r} for {self.model}: {path} does not exist")
        return path


def member_target(target: DrillTarget, member: str) -> DrillTarget:
    """``target`` (a pipeline) aimed at its composing model ``member``: pushes, cleanups and checks act on the
    member, its evidence the pipeline's suite through the pipeline (docs/pipelines.md)."""
    return dataclasses.replace(target, model=member, base=member, pipeline=target.model)


@dataclass
class Injected:
    """What an injection did: the version it pushed, the stable version to end on, how to undo it."""

    stable: StableRecord
    version: str | None = None  # the version pushed (None: nothing pushed)
    wall: float = 0.0  # when the breakage took effect (time.time())
    at: float = 0.0  # the same moment, time.monotonic()
    undo: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    pushed: list[str] = field(default_factory=list)  # every version the drill put in place
    aimed: DrillTarget | None = None  # what the push breaks when not the drill's target (a pipeline's member)

    def mark_now(self) -> None:
        self.wall, self.at = time.time(), time.monotonic()

    def mark(self, moment: tuple[float, float] | None) -> None:
        """The injection took effect at ``moment`` (time.time(), time.monotonic()), or now."""
        if moment is None:
            self.mark_now()
        else:
            self.wall, self.at = moment


# ---- what the target serves now ------------------------------------------------------------------------


def stable_record(target: DrillTarget) -> StableRecord:
    """The version a rollback would restore now: the newest stable one present and not quarantined."""
    try:
        ledger = target.store.ledger(target.model)
        available = target.store.versions(target.model)
    except (StoreError, OSError, ValueError) as exc:
        raise InjectionFailed(f"store {target.store.location}: {exc}") from exc
    choice = choose_restore_version(ledger, failing_version="", available=available, requested=None)
    if choice.record is None:
        raise InjectionFailed(f"{target.model}: {choice.reason}; promote a stable version before drilling")
    return choice.record


def injected_for(target: DrillTarget) -> Injected:
    """An injection into ``target``, to end on its stable version now."""
    return Injected(stable_record(target), aimed=target)


def healed_back(golden: Any, scenario: Any, urls: Sequence[str], injected: Injected) -> bool:
    """The drill's target restored (``golden``: its GoldenWatch), and the composing model of a pipeline the
    scenario's push broke (``scenario.member``) no longer serving the injected version on any replica."""
    member = getattr(scenario, "member", "")
    restored = bool(golden.restored(injected.version))
    return restored and (not member or member_restored(urls, member, injected.version))


def next_version(target: DrillTarget) -> str:
    """A version number never used for this model: past every version in the store, the live repository
    (quarantined and displaced copies included) and the ledger."""
    seen: set[int] = set()
    model_dir = target.live / target.model
    for folder in (model_dir, model_dir / QUARANTINE_DIR, model_dir / DISPLACED_DIR):
        if folder.is_dir():
            for entry in folder.iterdir():
                head = entry.name.split("-", 1)[0]
                if head.isdigit():
                    seen.add(int(head))
    try:
        seen.update(int(v) for v in target.store.versions(target.model))
        ledger = target.store.ledger(target.model)
    except (StoreError, OSError, ValueError) as exc:
        raise InjectionFailed(f"store {target.store.location}: {exc}") from exc
    for version in [r.version for r in ledger.stable] + [q.version for q in ledger.quarantined]:
        if version.isdigit():
            seen.add(int(version))
    return str(max(seen, default=0) + 1)


def served(url: str, model: str, timeout_s: float = 5.0) -> list[str]:
    triton = TritonHttp(url, timeout_s=timeout_s)
    try:
        return triton.served_versions(model)
    finally:
        triton.close()


# ---- pushing versions ----------------------------------------------------------------------------------


def member_restored(urls: Sequence[str], member: str, injected_version: str | None) -> bool:
    """No replica serves the injected version of a pipeline's composing model ``member`` any more."""
    for url in urls:
        try:
            if injected_version in served(url, member, timeout_s=2.0):
                return False
        except TritonError:
            return False
    return True


def put_version(target: DrillTarget, version: str, source: Path, injected: Injected) -> None:
    """A new version directory, as a deploy puts it: into the store, then where Triton reads it."""
    files = sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    if not files:
        raise InjectionFailed(f"{source} has no files")
    try:
        for path in files:
            key = f"{target.model}/{version}/{path.relative_to(source).as_posix()}"
            if not target.store.blobs.create(key, path.read_bytes()):
                raise InjectionFailed(f"store {target.store.location}: {key} exists already")
    except (StoreError, OSError) as exc:
        raise InjectionFailed(f"push {target.model} v{version} to the store: {exc}") from exc
    injected.pushed.append(version)
    for repository in target.repositories:
        live_dir = repository / target.model / version
        if not live_dir.exists():  # a store that is also the live repository has it already
            shutil.copytree(source, live_dir, ignore=shutil.ignore_patterns("__pycache__"))


def replace_file(path: Path, text: str, injected: Injected, what: str) -> None:
    """Overwrite a file, keeping its old bytes for the undo."""
    old = path.read_bytes() if path.exists() else None

    def undo() -> None:
        if old is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(old)

    path.write_text(text)
    injected.undo.append((what, undo))


def load_everywhere(
    target: DrillTarget,
    urls: Sequence[str],
    *,
    config: dict[str, object] | None = None,
    serving: str | None = None,
) -> tuple[float, float] | None:
    """Load (or reload) the model on every replica at once, as a deploy reaching them together does.
    Raises InjectionFailed naming the replicas whose load failed.

    ``serving``: a version to watch for while the loads run. Triton serves a new version before its
    load call returns (it releases the old one first), so the moment it first answers in the model's
    metadata is the moment of injection. Returns that moment (time.time(), time.monotonic()), the
    earliest over the replicas; None when not asked for or never seen."""
    errors: dict[str, str] = {}
    seen: list[tuple[float, float]] = []
    done = threading.Event()

    def load(url: str) -> None:
        triton = TritonHttp(url, timeout_s=10.0)
        try:
            triton.load_model(target.model, config=json.dumps(config) if config else None, timeout_s=LOAD_TIMEOUT_S)
        except TritonError as exc:
            errors[url] = str(exc)
        finally:
            triton.close()

    def watch(url: str) -> None:
        triton = TritonHttp(url, timeout_s=2.0)
        try:
            while not done.is_set():
                try:
                    if serving in triton.served_versions(target.model):
                        seen.append((time.time(), time.monotonic()))
                        return
                except TritonError:
                    pass
                done.wait(SERVING_POLL_S)
        finally:
            triton.close()

    loads = [threading.Thread(target=load, args=(url,), daemon=True) for url in urls]
    watchers = [threading.Thread(target=watch, args=(url,), daemon=True) for url in urls] if serving else []
    for thread in watchers + loads:
        thread.start()
    for thread in loads:
        thread.join(LOAD_TIMEOUT_S + 10)
    done.set()
    for thread in watchers:
        thread.join(5)
    if errors:
        raise InjectionFailed("; ".join(f"load on {url}: {error}" for url, error in errors.items()))
    return min(seen, key=lambda s: s[1]) if seen else None


def pinned(record: StableRecord, model: str, versions: Sequence[int]) -> dict[str, object]:
    """The stable version's config (from the ledger) serving exactly ``versions``, as a rollback pins it."""
    from workflows.steps.versions import pinned_config

    return pinned_config(record, model, list(versions))


def push_and_serve(target: DrillTarget, source: Path, injected: Injected, urls: Sequence[str] | None = None) -> str:
    """Push ``source`` as the next version and load it on every replica: the broken version serves."""
    version = next_version(target)
    put_version(target, version, source, injected)
    replicas = list(urls or target.replicas)
    moment = load_everywhere(target, replicas, serving=version)
    injected.mark(moment)
    injected.version = version
    log.info(
        "drill_version_serving",
        model=target.model,
        version=version,
        serving_at=iso_utc(injected.wall),
        seen_serving=moment is not None,
        load_returned_after_s=round(time.monotonic() - injected.at, 3),
    )
    for url in replicas:
        now = served(url, target.model)
        if version not in now:
            raise InjectionFailed(f"pushed {target.model} v{version} but Triton {url} serves {now}")
    return version


def retrain_source(target: DrillTarget, injected: Injected) -> Path:
    """A "retrain" whose answers are within tolerance: the oldest other stable version's files (it passed
    its golden request when it was promoted), else the stable version's own."""
    ledger = target.store.ledger(target.model)
    others = [r.version for r in ledger.stable if r.version != injected.stable.version]
    for version in [*sorted(others, key=int), injected.stable.version]:
        path = target.live / target.model / version
        if path.is_dir():
            return path
    raise InjectionFailed(f"no stable version of {target.model} in {target.live} to push again")


def push_again(target: DrillTarget, source: Path, injected: Injected) -> None:
    """The same broken version deployed again (the rollback moved its files aside): back in place, loaded."""
    assert injected.version is not None
    for repository in target.repositories:
        live_dir = repository / target.model / injected.version
        if not live_dir.exists():
            shutil.copytree(source, live_dir, ignore=shutil.ignore_patterns("__pycache__"))
    load_everywhere(target, target.replicas)
    for url in target.replicas:
        now = served(url, target.model)
        if injected.version not in now:
            raise InjectionFailed(f"pushed {target.model} v{injected.version} again but Triton {url} serves {now}")


def push_with_config(target: DrillTarget, config_source: Path, injected: Injected) -> str:
    """A new version of the stable version's own files, with a broken config.pbtxt, loaded."""
    stable_dir = target.live / target.model / injected.stable.version
    text = config_source.read_text().replace(f'name: "{target.base or target.model}"', f'name: "{target.model}"')
    live_config = target.live / target.model / "config.pbtxt"
    for repository in target.repositories:
        replace_file(repository / target.model / "config.pbtxt", text, injected, f"config.pbtxt in {repository}")
    root = target.store_root
    if root is not None and (root / target.model / "config.pbtxt").resolve() != live_config.resolve():
        replace_file(root / target.model / "config.pbtxt", text, injected, "config.pbtxt in the store")
    return push_and_serve(target, stable_dir, injected)


# Left in place when the served version's files are deleted: without its model.py, Triton 2.51's Python
# backend never finishes the load ("Failed to preinitialize Python stub") and its HTTP API stops
# answering, so the drill would test a wedged server instead of a missing model.
KEEP_WHEN_DELETING = frozenset({"model.py"})


def delete_served_files(target: DrillTarget, injected: Injected, backup: Path) -> None:
    """Delete the served (stable) version's files where Triton reads it (its weights; the Python
    backend's model.py stays, see KEEP_WHEN_DELETING), then reload the model as a restarted Triton
    would: unload, wait, load. The load fails; the model is not served."""
    version_dir = target.live / target.model / injected.stable.version
    saved = backup / f"{target.model}-{injected.stable.version}"
    shutil.copytree(version_dir, saved, dirs_exist_ok=True)

    def put_back() -> None:
        for path in saved.rglob("*"):
            if path.is_file():
                destination = version_dir / path.relative_to(saved)
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, destination)

    injected.undo.append(("the deleted files", put_back))
    doomed = [p for p in version_dir.rglob("*") if p.is_file() and p.name not in KEEP_WHEN_DELETING]
    if not doomed:
        raise InjectionFailed(f"{version_dir} has no files to delete besides {', '.join(KEEP_WHEN_DELETING)}")
    for path in doomed:
        path.unlink()
    for url in target.replicas:
        triton = TritonHttp(url, timeout_s=10.0)
        try:
            injected.mark_now()  # the model stops serving from the unload on
            triton.unload_model(target.model)
            wait_unloaded(triton, target.model)
            try:
                triton.load_model(target.model, timeout_s=LOAD_TIMEOUT_S)
            except TritonError as exc:
                log.info("drill_reload_failed_as_planned", model=target.model, error=str(exc))
        finally:
            triton.close()


def wait_unloaded(triton: TritonHttp, model: str, timeout_s: float = UNLOAD_WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = {r.state for r in triton.repository_index() if r.name == model}
        if not states & {"READY", "LOADING", "UNLOADING"}:
            return
        time.sleep(0.05)
    raise InjectionFailed(f"{model} still loaded on {triton.url} after {timeout_s:g} s")


def unmount_store(target: DrillTarget, injected: Injected) -> None:
    """The filesystem store disappears (an NFS mount gone): its root is renamed away until the undo."""
    root = target.store_root
    if root is None:
        raise InjectionFailed("only a filesystem store can be taken away by the drill")
    away = root.with_name(root.name + ".drill-unmounted")
    root.rename(away)

    def mount_again() -> None:
        away.rename(root)

    injected.undo.append(("the store's mount", mount_again))


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def tamper_stable(target: DrillTarget, injected: Injected) -> None:
    """Corrupt the stable version's largest file in the store (bit rot, a bad sync) and, when Triton
    reads another copy, that copy too: its sha256 no longer matches the ledger anywhere. (A copy
    staged where Triton reads it and still intact is restored from, by design: corrupting the store's
    alone proves nothing since staged copies are checked from their stamps.)"""
    root = target.store_root
    if root is None:
        raise InjectionFailed("only a filesystem store can be tampered with by the drill")
    folders = [root / target.model / injected.stable.version, target.live / target.model / injected.stable.version]
    for folder in dict.fromkeys(f.resolve() for f in folders if f.is_dir()):
        # The version's own files only: Triton's Python backend writes __pycache__ there, which no
        # check reads.
        own = [p for p in folder.rglob("*") if not is_derived(p.relative_to(folder).parts)]
        files = sorted((p for p in own if p.is_file()), key=lambda p: p.stat().st_size)
        if not files:
            raise InjectionFailed(f"{folder} has no files")
        victim = files[-1]
        original = victim.read_bytes()
        victim.write_bytes(original + b"\n")
        injected.undo.append((str(victim), functools.partial(_write, victim, original)))


# ---- back to stable --------------------------------------------------------------------------------------


def remove_pushed(target: DrillTarget, injected: Injected) -> list[str]:
    """Remove what the drill pushed: its version directories in the live repository (and the copies a
    rollback moved aside), and in a filesystem store. A rollback never deletes; the drill removes its own."""
    problems: list[str] = []
    for version in injected.pushed:
        if not VERSION_PATTERN.match(version):
            continue
        candidates = []
        for model_dir in (repository / target.model for repository in target.repositories):
            candidates.append(model_dir / version)
            for folder in (model_dir / QUARANTINE_DIR, model_dir / DISPLACED_DIR):
                if folder.is_dir():
                    candidates += [p for p in folder.iterdir() if p.name == version or p.name.startswith(f"{version}-")]
        root = target.store_root
        if root is not None:
            candidates.append(root / target.model / version)
        for path in candidates:
            try:
                if path.is_dir():
                    shutil.rmtree(path)
            except OSError as exc:
                problems.append(f"remove {path}: {exc}")
    return problems


def after_restart(target: DrillTarget, url: str, injected_version: str) -> str:  # noqa: PLR0911 (one return per finding)
    """Load the model on ``url`` from its files, without the rollback's override, as a restarted
    Triton or a new replica does; then every served version must answer its golden request and the
    injected version must not be among them. Returns "" when so, else what is wrong."""
    triton = TritonHttp(url, timeout_s=5.0)
    try:
        try:
            if not triton.server_live():
                return ""  # a replica the drill killed: nothing to restart here
            if not target.pipeline:  # a pipeline's member is loaded again in place: its pipeline keeps serving
                triton.unload_model(target.model)
            deadline = time.monotonic() + LOAD_TIMEOUT_S
            while not target.pipeline and any(
                r.state in {"READY", "UNLOADING"} for r in triton.repository_index() if r.name == target.model
            ):
                if time.monotonic() > deadline:
                    return f"{url}: {target.model} not unloaded within {LOAD_TIMEOUT_S:g} s"
                time.sleep(SERVING_POLL_S)
            triton.load_model(target.model, timeout_s=LOAD_TIMEOUT_S)
            served = triton.served_versions(target.model)
        except TritonError as exc:
            return f"{url}: reloading {target.model} from its files: {exc}"
        if not served:
            return f"{url}: {target.model} serves no version after a reload from its files"
        if injected_version in served:
            return f"{url}: a reload from its files serves the injected v{injected_version} again"
        for version in served:
            result = target.judged(triton, version)
            if result.status is not Status.PASS:  # the first answer after a load may be slow
                result = target.judged(triton, version)
            if result.status is not Status.PASS:
                return f"{url}: after a reload from its files v{version} fails its golden request: {result.reason}"
        return ""
    finally:
        triton.close()


def restore_stable(target: DrillTarget, injected: Injected, urls: Sequence[str] | None = None) -> list[str]:
    """Undo the injection and leave every live replica serving the stable version, verified by its
    golden request. Returns what could not be done (empty: the target is back on its stable version)."""
    problems: list[str] = []
    for what, undo in reversed(injected.undo):
        try:
            undo()
        except OSError as exc:
            problems.append(f"undo {what}: {exc}")
    injected.undo.clear()
    problems += remove_pushed(target, injected)
    stable = injected.stable
    config = pinned(stable, target.model, [int(stable.version)])
    for url in urls or target.replicas:
        problems += _settle(target, url, stable.version, config)
    return problems


def _settle(target: DrillTarget, url: str, version: str, config: dict[str, object]) -> list[str]:
    triton = TritonHttp(url, timeout_s=5.0)
    try:
        try:
            if not triton.server_live():
                return []  # a replica the drill killed: nothing serves there to restore
        except TritonError:
            return []
        last = ""
        for _attempt in range(RECOVERY_LOAD_TRIES):
            try:
                triton.load_model(target.model, config=json.dumps(config), timeout_s=LOAD_TIMEOUT_S)
                if triton.served_versions(target.model) == [version]:
                    result = target.judged(triton, version)
                    if result.status is not Status.PASS:  # the first answer after a load may be slow
                        result = target.judged(triton, version)
                    if result.status is Status.PASS:
                        return []
                    last = f"golden request: {result.reason}"
                else:
                    last = f"serves {triton.served_versions(target.model)}"
            except TritonError as exc:
                last = str(exc)
        return [f"{url}: {target.model} not back on v{version}: {last}"]
    finally:
        triton.close()
