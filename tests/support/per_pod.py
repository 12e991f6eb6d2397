"""Per-pod repositories in tests (issue 29 item 2): Tritons that each read a directory of their own (the
``emptyDir`` of a pod), filled from the store as an init container fills it, and beside each the
sidecar's real HTTP listener with its staging endpoints over that directory."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from healer.core.ledger import StableRecord
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.edges.triton import TritonHttp
from healer.settings import ModelSettings, Settings, StoreSettings
from healer.sidecar.stage import Stager
from healer.sidecar.views import SidecarServer
from tests.sidecar.test_sidecar_http import fake_sidecar
from tests.support.rollback_stack import SETUP_LOAD_TIMEOUT_S


def init_container_copy(store_root: Path, model: str, repository: Path) -> None:
    """What a pod's init container does before Triton starts: every file of ``model`` in the store
    (every version, the config.pbtxt) copied into the pod's empty repository. A repository that had
    the model already (the same test reusing one Triton for a "new pod") gets a fresh folder."""
    target = repository / model
    if target.exists():
        shutil.move(target, repository.parent / f"{repository.name}-old-{model}-{time.monotonic_ns()}")
    shutil.copytree(store_root / model, target, ignore=shutil.ignore_patterns(".healer*"))


class PodSidecar:
    """The sidecar's listener in one pod, its stager writing into ``repository`` (the pod's own)."""

    def __init__(self, settings: Settings, repository: Path, store: StoreSettings) -> None:
        pod_settings = dataclasses.replace(settings, repository_mode="per-pod", store=store, live_repository=repository)

        def open_store() -> ModelStore:
            from healer.edges.store import store_from_settings

            return store_from_settings(store)

        self.repository = repository
        self.stager = Stager(pod_settings, repository, open_store)
        self.server = SidecarServer(fake_sidecar(), "127.0.0.1:0", stager=self.stager)
        self.server.start()
        self.address = self.server.address

    def post(self, path: str, body: dict[str, str]) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            f"http://{self.address}{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self) -> None:
        self.server.stop()


def record_stable(
    store: ModelStore, triton: TritonHttp, model: str, version: str, config_file: str, *, by: str = "test"
) -> StableRecord:
    """``version`` recorded stable as promote records it: its files' sha256 in the store, the config
    Triton serves it with, the config.pbtxt it was read from."""
    record = StableRecord(
        version=version,
        files=store.version_files(model, version),
        promoted_at="2026-12-03T00:00:00Z",
        promoted_by=by,
        config=triton.model_config(model),
        config_file=config_file,
    )
    store.update_ledger(model, lambda ledger: ledger.with_stable(record))
    return record


def serve_pinned(triton: TritonHttp, model: str, config: dict[str, Any], version: int) -> None:
    pinned = dict(config, version_policy={"specific": {"versions": [version]}})
    triton.load_model(model, config=json.dumps(pinned), timeout_s=SETUP_LOAD_TIMEOUT_S)


def per_pod_settings(
    base: Settings,
    model: ModelSettings,
    *,
    store: StoreSettings,
    replicas: list[tuple[str, str]],
    state_dir: Path,
    alert_url: str,
    load_timeout_s: float = 60.0,
) -> Settings:
    """What the rollback reads in per-pod mode: no live repository of its own, each Triton with its sidecar."""
    from healer.settings import AlertSettings, ReplicaSettings, RollbackSettings

    tritons, sidecars = zip(*replicas, strict=True)
    return dataclasses.replace(
        base,
        triton=dataclasses.replace(base.triton, url=tritons[0], timeout_s=5.0),
        models=(model,),
        store=store,
        repository_mode="per-pod",
        live_repository=None,
        rollback=RollbackSettings(
            deadline_s=120,
            unload_timeout_s=20,
            load_timeout_s=load_timeout_s,
            state_dir=state_dir,
            alert=AlertSettings(webhook_url=alert_url, timeout_s=2.0),
            replicas=ReplicaSettings(addresses=tuple(tritons), sidecars=tuple(sidecars)),
        ),
    )


class StoreSide:
    """The store a per-pod test's models live in: files written under ``root`` (a folder of this machine),
    ``publish`` puts a model's files where the store keeps them, ``init_copy`` fills a pod's repository from
    the store as an init container does (every version, the model's config.pbtxt, never .healer)."""

    def __init__(self, root: Path, store: ModelStore, settings: StoreSettings) -> None:
        self.root, self.store, self.settings = root, store, settings

    def publish(self, model: str) -> None:
        """A filesystem store is ``root`` itself: nothing to do."""

    def init_copy(self, model: str, repository: Path) -> None:
        init_container_copy(self.root, model, repository)


class S3Side(StoreSide):
    """A bucket prefix on a real S3 (SeaweedFS): ``publish`` uploads with plain PutObject, as a CI pipeline
    does; ``init_copy`` downloads every object of the model, as KServe's storage initializer does."""

    def __init__(self, root: Path, client: Any, bucket: str, prefix: str, settings: StoreSettings) -> None:
        from healer.edges.store import S3Blobs

        super().__init__(root, ModelStore(S3Blobs(bucket, prefix, client=client)), settings)
        self.client, self.bucket, self.prefix = client, bucket, prefix

    def publish(self, model: str) -> None:
        for path in sorted((self.root / model).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                key = f"{self.prefix}/{path.relative_to(self.root).as_posix()}"
                self.client.put_object(Bucket=self.bucket, Key=key, Body=path.read_bytes())

    def init_copy(self, model: str, repository: Path) -> None:
        download = self.root.parent / f"download-{time.monotonic_ns()}"
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=f"{self.prefix}/{model}/"):
            for item in page.get("Contents", []):
                target = download / item["Key"][len(self.prefix) + 1 :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(self.client.get_object(Bucket=self.bucket, Key=item["Key"])["Body"].read())
        init_container_copy(download, model, repository)


def filesystem_side(root: Path) -> StoreSide:
    return StoreSide(root, ModelStore(FilesystemBlobs(root)), StoreSettings(filesystem=root))
