"""The drills' targets (I/O): the embedded stack, or the target the configuration names.

The embedded stack is what `healer drill` and `make demo` use by default: a real tritonserver over
a scratch copy of the example repository (the config's ``embedded.model_repository``), a
filesystem store beside it holding the same versions, every version promoted stable through the
real promote path, and the stable version served, pinned as a rollback pins it. Further Triton
replicas over the same live repository are started on demand (the storm, the killed Triton).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import structlog

from healer.core.drill_catalog import EMBEDDED_CAPABILITIES
from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import FilesystemBlobs, ModelStore, StoreError, store_from_settings
from healer.edges.triton import TritonError, TritonHttp
from healer.settings import Settings, SidecarSettings, StoreSettings
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
) -> Settings:
    """The configuration with only the drilled model, the drill's sidecar period and a scratch run state."""
    return dataclasses.replace(
        base,
        triton=dataclasses.replace(base.triton, url=url),
        models=(base.model(model),),
        store=store,
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
    ) -> None:
        if settings.embedded is None:
            raise StackError(f"{settings.source}: embedded: is required for the embedded stack")
        self.base = settings
        self.model = model
        self.broken = broken
        self.period_s = period_s
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="healer-drill-"))
        self.live = self.workdir / "models"
        self.store_root = self.workdir / "store"
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
        assert self.base.embedded is not None
        source = self.base.embedded.model_repository / self.model
        if not source.is_dir():
            raise StackError(f"{self.model} is not in {self.base.embedded.model_repository}")
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(source, self.live / self.model, ignore=ignore)
        shutil.copytree(source, self.store_root / self.model, ignore=ignore)
        self.triton = EmbeddedTriton(
            self.live,
            tritonserver=self.base.embedded.tritonserver,
            load_models=[self.model],
            startup_timeout_s=self.base.embedded.startup_timeout_s,
            workdir=self.workdir / "triton",
        )
        self.triton.start()
        settings = drill_settings(
            self.base,
            model=self.model,
            url=self.triton.url,
            store=StoreSettings(filesystem=self.store_root),
            live=self.live,
            state_dir=self.workdir / "runs",
            period_s=self.period_s,
        )
        store = ModelStore(FilesystemBlobs(self.store_root))
        self.target = DrillTarget(
            settings=settings,
            model=self.model,
            live=self.live,
            store=store,
            replicas=[self.triton.url],
            broken=self.broken,
            capabilities=EMBEDDED_CAPABILITIES,
        )
        promote_every_version(self.target)
        self.started_s = time.monotonic() - started
        return self.target

    def restart(self) -> list[str]:
        """The last resort of a cleanup that failed (a wedged Triton): a fresh Triton over the same
        repository, then the stable version pinned. Returns what still could not be done."""
        assert self.triton is not None and self.target is not None
        self.triton.stop()
        self.triton.start()
        self.target.replicas[0] = self.triton.url
        self.target.settings = dataclasses.replace(
            self.target.settings, triton=dataclasses.replace(self.target.settings.triton, url=self.triton.url)
        )
        try:
            return restore_stable(self.target, Injected(stable_record(self.target)))
        except InjectionFailed as exc:
            return [str(exc)]

    def start_replica(self, name: str) -> EmbeddedTriton:
        """Another Triton over the same live repository (a second pod on the shared volume)."""
        assert self.base.embedded is not None
        replica = EmbeddedTriton(
            self.live,
            tritonserver=self.base.embedded.tritonserver,
            load_models=[self.model],
            startup_timeout_s=self.base.embedded.startup_timeout_s,
            workdir=self.workdir / f"triton-{name}",
        )
        self.replicas.append(replica)
        replica.start()
        return replica

    def stop_replica(self, replica: EmbeddedTriton) -> None:
        replica.stop()
        if replica in self.replicas:
            self.replicas.remove(replica)

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
