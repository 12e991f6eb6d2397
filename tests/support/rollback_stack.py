"""Helpers to build a rollback scenario on the real Triton: a store, a live repository, a ledger."""

from __future__ import annotations

import itertools
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.edges.triton import TritonHttp
from healer.engines.factory import local_engine
from healer.engines.local import LocalEngine
from healer.settings import AlertSettings, ModelSettings, ReplicaSettings, RollbackSettings, Settings, StoreSettings
from healer.vocabulary import RollbackRequest
from tests.conftest import EXAMPLES
from workflows.steps.base import StepContext
from workflows.steps.promote import promote

_names = itertools.count(1)
# Setting a test up is not what is measured: on a busy 2-core machine a Python-backend stub has been
# seen to take 65 s to initialise (tritonserver.log: ModelInstanceInitialize to "successfully loaded").
SETUP_LOAD_TIMEOUT_S = 180

VersionSource = tuple[str, str]  # ("good", "1") or ("broken", "nan")


def relaxed_slo(settings: Settings) -> Settings:
    """``settings`` with every golden latency SLO at least 2 s. For tests about restoring, not latency:
    on a busy 2-core CI box the first request after a load can take longer than the examples' 100 ms
    SLO, which would fail promote or verify for the wrong reason (the SLO has its own tests in
    tests/probes/test_probes_triton.py)."""
    return replace(
        settings,
        models=tuple(
            replace(m, golden=replace(m.golden, latency_slo_ms=max(m.golden.latency_slo_ms, 2000.0)))
            for m in settings.models
        ),
    )


def with_replicas(settings: Settings, urls: list[str]) -> Settings:
    """``settings`` healing these Tritons, as a healer.yaml without Kubernetes lists them
    (rollback.replicas.addresses)."""
    return replace(settings, rollback=replace(settings.rollback, replicas=ReplicaSettings(addresses=tuple(urls))))


def version_source(base: str, source: VersionSource) -> Path:
    kind, which = source
    return EXAMPLES / ("model_repository" if kind == "good" else "broken") / base / which


def write_model(root: Path, base: str, name: str, versions: dict[int, VersionSource]) -> None:
    target = root / name
    target.mkdir(parents=True, exist_ok=True)
    config = (EXAMPLES / "model_repository" / base / "config.pbtxt").read_text()
    (target / "config.pbtxt").write_text(config.replace(f'name: "{base}"', f'name: "{name}"'))
    for version, source in versions.items():
        shutil.copytree(version_source(base, source), target / str(version), dirs_exist_ok=True)


def serve_versions(triton: TritonHttp, model: str, versions: list[int]) -> None:
    """Make Triton serve exactly these versions (a config override, as an operator would)."""
    config = triton.model_config(model)
    config["version_policy"] = {"specific": {"versions": versions}}
    triton.load_model(model, config=json.dumps(config), timeout_s=SETUP_LOAD_TIMEOUT_S)


def serve_latest(triton: TritonHttp, model: str, timeout_s: float = 30) -> None:
    """Back to config.pbtxt (newest version). Triton keeps a pinned override across a plain load of
    unchanged files, so unload first, as an operator redeploying would."""
    import time

    triton.unload_model(model)
    deadline = time.monotonic() + timeout_s
    while any(r.state in {"READY", "UNLOADING"} for r in triton.repository_index() if r.name == model):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{model} not unloaded within {timeout_s} s")
        time.sleep(0.05)
    triton.load_model(model, timeout_s=SETUP_LOAD_TIMEOUT_S)


def engine_with(stack: RollbackStack, tmp_path: Path, **rollback: object) -> LocalEngine:
    """A LocalEngine for the stack with other rollback settings (e.g. the order) or replica targets."""
    from workflows.rollback import build_rollback_template
    from workflows.steps.context import context_from_settings

    targets = rollback.pop("targets", None)
    settings = replace(stack.settings, rollback=replace(stack.settings.rollback, **rollback))  # type: ignore[arg-type]

    def context() -> StepContext:
        ctx = context_from_settings(settings)
        return ctx if targets is None else replace(ctx, list_replicas=lambda: targets)

    return LocalEngine(build_rollback_template(), context, tmp_path / f"runs-{id(settings)}")


class AlertReceiver:
    """A stand-in Alertmanager: records what POST /api/v2/alerts receives."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        received = self.alerts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/api/v2/alerts":
                    received.extend(json.loads(body))
                    self.send_response(200)
                else:
                    self.send_response(404)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> AlertReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class RollbackStack:
    settings: Settings
    triton: TritonHttp
    store: ModelStore
    live: Path
    model: str
    engine: LocalEngine
    alerts: AlertReceiver
    requests: list[RollbackRequest] = field(default_factory=list)

    def request(self, from_version: str, incident: str | None = None) -> RollbackRequest:
        return RollbackRequest(
            model=self.model,
            from_version=from_version,
            incident=incident or f"inc-{self.model}-{from_version}".replace("_", "-"),
            reason="wrong-answer",
            detail="golden request failed",
            pod="triton-0",
        )


def make_settings(
    base: Settings,
    *,
    url: str,
    model: ModelSettings,
    store: StoreSettings,
    live: Path,
    state_dir: Path,
    alert_url: str,
    deadline_s: float = 90.0,
) -> Settings:
    return replace(
        base,
        triton=replace(base.triton, url=url, timeout_s=5.0),
        models=(model,),
        store=store,
        live_repository=live,
        rollback=RollbackSettings(
            deadline_s=deadline_s,
            unload_timeout_s=20,
            load_timeout_s=60,
            state_dir=state_dir,
            alert=AlertSettings(webhook_url=alert_url, timeout_s=2.0),
        ),
    )


@contextmanager
def rollback_stack(
    *,
    base: Settings,
    triton_url: str,
    live: Path,
    store: ModelStore,
    store_settings: StoreSettings,
    store_root_for_files: Path | None,
    tmp: Path,
    model_base: str,
    versions: dict[int, VersionSource],
    stable: list[int],
    deadline_s: float = 90.0,
    populate_store: Callable[[str, dict[int, VersionSource]], None] | None = None,
) -> Iterator[RollbackStack]:
    """A new model on the running Triton, its versions in the store and the live repository,
    ``stable`` promoted through the real promote path, then the newest version served."""
    name = f"rb_{model_base}_{next(_names)}"
    write_model(live, model_base, name, versions)
    if populate_store is not None:  # e.g. upload the versions to S3 once the model's name is chosen
        populate_store(name, versions)
    if store_root_for_files is not None:
        write_model(store_root_for_files, model_base, name, versions)
    triton = TritonHttp(triton_url, timeout_s=5.0)
    golden = base.model(model_base).golden
    model = ModelSettings(name=name, golden=golden)
    with AlertReceiver() as alerts:
        settings = make_settings(
            base,
            url=triton_url,
            model=model,
            store=store_settings,
            live=live,
            state_dir=tmp / "runs",
            alert_url=alerts.url,
            deadline_s=deadline_s,
        )
        try:
            triton.load_model(name, timeout_s=SETUP_LOAD_TIMEOUT_S)
            if stable:
                serve_versions(triton, name, stable)
                for version in stable:
                    promote(settings, triton, store, name, str(version), by="test")
                triton.load_model(name, timeout_s=SETUP_LOAD_TIMEOUT_S)  # back to config.pbtxt: the newest version
            engine = local_engine(settings)
            yield RollbackStack(settings, triton, store, live, name, engine, alerts)
        finally:
            triton.close()


def filesystem_stack(
    base: Settings,
    triton: EmbeddedTriton,
    store_root: Path,
    tmp: Path,
    *,
    versions: dict[int, VersionSource],
    stable: list[int],
    model_base: str = "linear_scorer",
    store: ModelStore | None = None,
    **options: Any,
) -> AbstractContextManager[RollbackStack]:
    """``rollback_stack`` on the running ``triton`` (its model repository the live one) with a filesystem
    store in ``store_root``, the versions' files written there too."""
    return rollback_stack(
        base=base,
        triton_url=triton.url,
        live=triton.model_repository,
        store=store if store is not None else ModelStore(FilesystemBlobs(store_root)),
        store_settings=StoreSettings(filesystem=store_root),
        store_root_for_files=store_root,
        tmp=tmp,
        model_base=model_base,
        versions=versions,
        stable=stable,
        **options,
    )
