"""The drills' targets (I/O): the embedded stack, or the target the configuration names.

The embedded stack is what `healer drill` and `make demo` use by default: a real tritonserver over
a scratch copy of the example repository (the config's ``embedded.model_repository``), a
filesystem store beside it holding the same versions, every version promoted stable through the
real promote path, and the stable version served, pinned as a rollback pins it. Further Triton
replicas are started on demand (the storm, the killed Triton, the releases).

Where Triton reads its models follows ``repository_mode`` (`healer drill --repository`):

- shared: every replica reads one live repository beside the store (the store's copy is fetched into it);
- object-store: every replica's --model-repository is the filesystem store itself, nothing copied;
- per-pod: every replica reads a repository of its own, filled from the store as an init container
  fills a pod's emptyDir; the runner gives each replica's sidecar a listener that stages into it.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import tempfile
from pathlib import Path

import structlog

from healer.core.drill_catalog import EMBEDDED_CAPABILITIES
from healer.drills.traffic_signal import METRICS_URLS
from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import FilesystemBlobs, ModelStore, StoreError, store_from_settings
from healer.edges.triton import TritonError, TritonHttp
from healer.settings import (
    REPOSITORY_MODES,
    REPOSITORY_OBJECT_STORE,
    REPOSITORY_PER_POD,
    REPOSITORY_SHARED,
    Settings,
    SidecarSettings,
    StoreSettings,
)
from workflows.steps.drill_inject import DrillTarget, Injected, InjectionFailed, restore_stable, stable_record
from workflows.steps.promote import PromotionRefused, promote

log = structlog.get_logger(__name__)

DEFAULT_PERIOD_S = 0.5


class StackError(Exception):
    """The drill's target could not be set up."""


def drill_settings(
    base: Settings,
    *,
    model: str,
    url: str,
    store: StoreSettings | None,
    live: Path | None,
    state_dir: Path,
    period_s: float,
    repository_mode: str | None = None,
) -> Settings:
    """The configuration with only the drilled model, the drill's sidecar period and a scratch run state."""
    return dataclasses.replace(
        base,
        triton=dataclasses.replace(base.triton, url=url),
        models=(base.model(model),),
        store=store,
        repository_mode=repository_mode or base.repository_mode,
        live_repository=live,
        rollback=dataclasses.replace(base.rollback, state_dir=state_dir),
        sidecar=dataclasses.replace(base.sidecar, period_s=period_s, drain=None),
    )


def default_model(settings: Settings, broken: Path) -> str:
    """The first configured model with broken variants to inject."""
    for model in settings.models:
        if (broken / model.name).is_dir():
            return model.name
    raise StackError(f"no configured model has broken variants in {broken} (one folder per model name)")


class EmbeddedStack:
    """A real Triton over a scratch repository, a filesystem store, stable versions promoted."""

    def __init__(
        self,
        settings: Settings,
        *,
        model: str,
        broken: Path,
        period_s: float = DEFAULT_PERIOD_S,
        workdir: Path | None = None,
        repository_mode: str = REPOSITORY_SHARED,
    ) -> None:
        if settings.embedded is None:
            raise StackError(f"{settings.source}: embedded: is required for the embedded stack")
        if repository_mode not in REPOSITORY_MODES:
            raise StackError(f"repository mode {repository_mode!r}: one of {', '.join(REPOSITORY_MODES)}")
        self.mode = repository_mode
        self.base = settings
        self.model = model
        self.broken = broken
        self.period_s = period_s
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="healer-drill-"))
        self.store_root = self.workdir / "store"
        # What the first Triton reads: its own directory, or the store itself (object-store).
        self.live = self.store_root if repository_mode == REPOSITORY_OBJECT_STORE else self.workdir / "models"
        # Every model the stack serves, the first the default target's; a scenario that breaks another
        # model adds it (target_for): copied into the store, loaded on every Triton, promoted.
        self.models: list[str] = [model]
        self._config_files: dict[str, bytes] = {}  # each model's config.pbtxt in the store as the drill found it
        self._targets: dict[str, DrillTarget] = {}
        self._pod_numbers = itertools.count(1)
        self.triton: EmbeddedTriton | None = None
        self.replicas: list[EmbeddedTriton] = []
        self.target: DrillTarget | None = None
        self.started_s = 0.0

    def __enter__(self) -> DrillTarget:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> DrillTarget:
        import time

        started = time.monotonic()
        self._copy_in(self.model)
        if self.live != self.store_root:
            self._fill(self.live)
        self.triton = self._triton(self.live, "triton")
        self.triton.start()
        METRICS_URLS[self.triton.url] = self.triton.metrics_url  # the fails-one-in-ten drill's sidecars read it
        self.target = self._aim(
            self.model, pods={self.triton.url: self.live} if self.mode == REPOSITORY_PER_POD else {}
        )
        promote_every_version(self.target)
        self.started_s = time.monotonic() - started
        return self.target

    def target_for(self, model: str) -> DrillTarget:
        """The target aimed at ``model`` (a scenario that breaks a model of its own): the first time, the
        model is copied from the example repository into the store and every repository a Triton reads,
        loaded on every running Triton, and its versions promoted, as ``start`` does for the first one.
        The stack's Tritons, repositories and store are shared; a replica started later loads it too."""
        assert self.target is not None and self.triton is not None
        if model in self._targets:
            return self._targets[model]
        # An ensemble comes with its composing models (its steps' model_name), which its load loads too.
        added = (
            [*composing_models(self.base.embedded.model_repository / model), model] if self.base.embedded else [model]
        )
        for name in added:
            self._copy_in(name)
        self.models += added
        self.triton.load_models = tuple(self.models)  # a restart (the cleanup's last resort) loads it too
        repositories = [] if self.live == self.store_root else [self.live]
        for repository in dict.fromkeys([*repositories, *self.target.pods.values()]):
            self._fill(repository, added)
        for url in self.target.replicas + [r.url for r in self.replicas]:
            triton = TritonHttp(url, timeout_s=10.0)
            try:
                triton.load_model(model, timeout_s=60)
            except TritonError as exc:
                raise StackError(f"loading {model} on Triton {url}: {exc}") from exc
            finally:
                triton.close()
        # Shared with the first target: its replica list and pods are the stack's (restart and per-pod
        # replicas update them), so every target sees the same Tritons.
        target = self._aim(model, pods=self.target.pods, replicas=self.target.replicas)
        promote_every_version(target)
        return target

    def _copy_in(self, model: str) -> None:
        """``model``'s folder from the example repository into the store, its config.pbtxt remembered."""
        assert self.base.embedded is not None
        source = self.base.embedded.model_repository / model
        if not source.is_dir():
            raise StackError(f"{model} is not in {self.base.embedded.model_repository}")
        shutil.copytree(source, self.store_root / model, ignore=shutil.ignore_patterns("__pycache__"))
        self._config_files[model] = (self.store_root / model / "config.pbtxt").read_bytes()

    def _aim(self, model: str, *, pods: dict[str, Path], replicas: list[str] | None = None) -> DrillTarget:
        assert self.triton is not None
        settings = drill_settings(
            self.base,
            model=model,
            url=self.triton.url,
            store=StoreSettings(filesystem=self.store_root),
            # object-store: Triton reads the store; per-pod: no repository where the rollback runs.
            live=self.live if self.mode == REPOSITORY_SHARED else None,
            state_dir=self.workdir / "runs",
            period_s=self.period_s,
            repository_mode=self.mode,
        )
        target = DrillTarget(
            settings=settings,
            model=model,
            live=self.live,
            store=ModelStore(FilesystemBlobs(self.store_root)),
            replicas=replicas if replicas is not None else [self.triton.url],
            broken=self.broken,
            capabilities=EMBEDDED_CAPABILITIES,
            pods=pods,
        )
        self._targets[model] = target
        return target

    def restart(self) -> list[str]:
        """The last resort of a cleanup that failed (a wedged Triton): a fresh Triton over the same
        repository, then the stable version pinned. Returns what still could not be done."""
        assert self.triton is not None and self.target is not None
        self.triton.stop()
        before = self.triton.url
        self.triton.start()
        METRICS_URLS[self.triton.url] = self.triton.metrics_url  # the fails-one-in-ten drill's sidecars read it
        self.target.replicas[0] = self.triton.url  # the list every target shares
        if before in self.target.pods:
            self.target.pods[self.triton.url] = self.target.pods.pop(before)
        problems = []
        for target in self._targets.values():
            target.settings = dataclasses.replace(
                target.settings, triton=dataclasses.replace(target.settings.triton, url=self.triton.url)
            )
            try:
                problems += restore_stable(target, Injected(stable_record(target)))
            except InjectionFailed as exc:
                problems.append(str(exc))
        return problems

    def start_replica(self, name: str) -> EmbeddedTriton:
        """Another Triton: over the same live repository (a second pod on the shared volume), the same
        store (object-store), or a repository of its own filled from the store (a new pod, per-pod)."""
        assert self.target is not None
        repository = self.live
        if self.mode == REPOSITORY_PER_POD:
            repository = self.workdir / f"models-{name}-{next(self._pod_numbers)}"  # a new pod: a new emptyDir
            self._fill(repository)
        replica = self._triton(repository, f"triton-{name}")
        self.replicas.append(replica)
        replica.start()
        METRICS_URLS[replica.url] = replica.metrics_url  # the fails-one-in-ten drill's sidecars read it
        if self.mode == REPOSITORY_PER_POD:
            self.target.pods[replica.url] = repository
        return replica

    def stop_replica(self, replica: EmbeddedTriton) -> None:
        url = replica.url
        replica.stop()
        if replica in self.replicas:
            self.replicas.remove(replica)
        if self.target is not None and url != self.target.replicas[0]:
            self.target.pods.pop(url, None)

    def reset_repository(self) -> None:
        """After a scenario (object-store, per-pod): the store's config.pbtxt as the drill found it. A heal
        pins it to the stable version so that a restarted or new replica never loads the quarantined one;
        the next scenario's push is a deploy, which writes the model's config as its owner wrote it. In
        per-pod mode each pod's own config.pbtxt too: the heal's set-aside pins it in every pod."""
        if self.mode == REPOSITORY_SHARED:
            return
        pods = self.target.pods.values() if self.target is not None else ()
        for root in [self.store_root, *pods]:
            for model, found in self._config_files.items():
                config = root / model / "config.pbtxt"
                if config.is_file() and config.read_bytes() != found:
                    config.write_bytes(found)

    def _fill(self, repository: Path, models: list[str] | None = None) -> None:
        """What a pod's init container does before Triton starts (a shared volume is filled once the
        same way): every file of each model in the store (default: every model the stack serves), never
        healer's own records."""
        for model in models if models is not None else self.models:
            shutil.copytree(
                self.store_root / model,
                repository / model,
                ignore=shutil.ignore_patterns("__pycache__", ".healer*"),
            )

    def _triton(self, repository: Path, name: str) -> EmbeddedTriton:
        assert self.base.embedded is not None
        return EmbeddedTriton(
            repository,
            tritonserver=self.base.embedded.tritonserver,
            load_models=list(self.models),
            startup_timeout_s=self.base.embedded.startup_timeout_s,
            workdir=self.workdir / name,
        )

    def close(self) -> None:
        for replica in list(self.replicas):
            replica.stop()
        self.replicas.clear()
        if self.triton is not None:
            self.triton.stop()
            self.triton = None
        if self._own_workdir:
            # The store's root may be renamed away by a drill cut short: remove that too.
            shutil.rmtree(self.workdir, ignore_errors=True)


def promote_every_version(target: DrillTarget) -> None:
    """Serve every version in the store, promote each through the real promote path (golden request,
    hashes, ledger), then serve the newest stable one, pinned."""
    triton = TritonHttp(target.replicas[0], timeout_s=10.0)
    try:
        versions = target.store.versions(target.model)
        config = triton.model_config(target.model)
        config["version_policy"] = {"specific": {"versions": [int(v) for v in versions]}}
        import json

        triton.load_model(target.model, config=json.dumps(config), timeout_s=60)
        for version in versions:
            promote(target.settings, triton, target.store, target.model, version, by="healer-drill")
    except (TritonError, PromotionRefused, StoreError, ValueError) as exc:
        raise StackError(f"promoting {target.model}: {exc}") from exc
    finally:
        triton.close()
    problems = restore_stable(target, Injected(stable_record(target)))
    if problems:
        raise StackError("; ".join(problems))


def configured_target(settings: Settings, *, model: str, broken: Path, period_s: float, state_dir: Path) -> DrillTarget:
    """The target the configuration names: Triton at triton.url, its store and live repository. The
    stable versions must have been promoted already (`healer promote`)."""
    if settings.repository_mode != REPOSITORY_SHARED:
        # The injections write where Triton reads (a live directory): a bucket or each pod's own copy is not one.
        raise StackError(
            f"{settings.source}: repository_mode {settings.repository_mode}: --target config drills a shared live "
            f"repository; drill this mode on the embedded stack (--repository {settings.repository_mode})"
        )
    if settings.store is None or settings.live_repository_path is None:
        raise StackError(f"{settings.source}: store: (and with S3, live_repository:) is required to drill a target")
    store = store_from_settings(settings.store)
    capabilities = frozenset({"filesystem-store"}) if settings.store.filesystem is not None else frozenset()
    drilled = drill_settings(
        settings,
        model=model,
        url=settings.triton.url,
        store=settings.store,
        live=settings.live_repository_path,
        state_dir=state_dir,
        period_s=period_s,
    )
    target = DrillTarget(
        settings=drilled,
        model=model,
        live=settings.live_repository_path,
        store=store,
        replicas=[settings.triton.url],
        broken=broken,
        capabilities=capabilities,
    )
    try:
        stable_record(target)
    except InjectionFailed as exc:
        raise StackError(str(exc)) from exc
    return target


def sidecar_settings_for(settings: Settings, *, url: str, listen: str, max_rollbacks: int | None = None) -> Settings:
    """One sidecar's settings: its replica's Triton, its own listen address, the scenario's breaker."""
    sidecar: SidecarSettings = dataclasses.replace(
        settings.sidecar,
        listen=listen,
        max_rollbacks=max_rollbacks if max_rollbacks is not None else settings.sidecar.max_rollbacks,
    )
    return dataclasses.replace(settings, triton=dataclasses.replace(settings.triton, url=url), sidecar=sidecar)


def composing_models(folder: Path) -> list[str]:
    """An ensemble's composing models from its config.pbtxt (its steps' model_name), each once; [] for any
    other model (docs/pipelines.md)."""
    import re

    text = (folder / "config.pbtxt").read_text() if (folder / "config.pbtxt").is_file() else ""
    if "ensemble_scheduling" not in text:
        return []
    return list(dict.fromkeys(re.findall(r'model_name:\s*"([^"]+)"', text)))
