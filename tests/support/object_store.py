"""The object-store mode on the embedded stack (repository_mode: object-store): a real Triton reading a
prefix of a real SeaweedFS bucket itself (``--model-repository=s3://http://127.0.0.1:PORT/bucket/prefix``),
models uploaded there as a CI pipeline would (plain PutObject), and the healer settings for it."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from healer.edges.embedded import EmbeddedTriton, triton_repository_url
from healer.edges.store import DERIVED_DIRS, ModelStore, S3Blobs
from healer.edges.triton import TritonHttp
from healer.settings import AlertSettings, ModelSettings, RollbackSettings, S3Settings, Settings, StoreSettings
from healer.vocabulary import RollbackRequest
from tests.conftest import EXAMPLES
from tests.support.rollback_stack import SETUP_LOAD_TIMEOUT_S, VersionSource, version_source
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY, SeaweedS3

_names = itertools.count(1)

# What Triton's S3 client reads (and boto3, in this process, through the environment).
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    "AWS_DEFAULT_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass
class Bucket:
    """A prefix of a SeaweedFS bucket that Tritons read as their model repository."""

    seaweed: SeaweedS3
    bucket: str
    prefix: str

    @property
    def client(self) -> Any:
        return self.seaweed.client()

    @property
    def triton_url(self) -> str:
        return triton_repository_url(self.bucket, self.prefix, self.seaweed.endpoint_url)

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}"

    def put(self, relative: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.key(relative), Body=data)

    def get(self, relative: str) -> bytes:
        body: bytes = self.client.get_object(Bucket=self.bucket, Key=self.key(relative))["Body"].read()
        return body

    def objects(self, under: str) -> dict[str, str]:
        """relative key -> ETag of every object under ``under`` (one listing page is plenty here)."""
        page = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.key(under.rstrip("/") + "/"))
        strip = len(self.prefix) + 1
        return {o["Key"][strip:]: o["ETag"].strip('"') for o in page.get("Contents", [])}

    def store(self) -> ModelStore:
        return ModelStore(S3Blobs(self.bucket, self.prefix, client=self.client))

    def upload_version(self, model: str, version: int, source: Path) -> None:
        for path in sorted(source.rglob("*")):
            if path.is_file() and not DERIVED_DIRS.intersection(path.relative_to(source).parts):
                self.put(f"{model}/{version}/{path.relative_to(source).as_posix()}", path.read_bytes())

    def upload_config(self, model: str, base: str, text: str | None = None) -> None:
        text = text if text is not None else (EXAMPLES / "model_repository" / base / "config.pbtxt").read_text()
        self.put(f"{model}/config.pbtxt", text.replace(f'name: "{base}"', f'name: "{model}"').encode())

    def settings(self, base: Settings, model: ModelSettings, *, url: str, state_dir: Path, alert_url: str) -> Settings:
        """healer.yaml for this bucket in the object-store mode: the store is what Triton reads."""
        s3 = S3Settings(
            bucket=self.bucket,
            prefix=self.prefix,
            endpoint_url=self.seaweed.endpoint_url,
            connect_timeout_s=1.0,
            read_timeout_s=5.0,
        )
        return replace(
            base,
            triton=replace(base.triton, url=url, timeout_s=5.0),
            models=(model,),
            store=StoreSettings(s3=s3),
            live_repository=None,
            repository_mode="object-store",
            rollback=RollbackSettings(
                deadline_s=90.0,
                unload_timeout_s=20,
                load_timeout_s=60,
                state_dir=state_dir,
                alert=AlertSettings(webhook_url=alert_url, timeout_s=2.0),
            ),
        )


def triton_on(bucket: Bucket, load_models: list[str], workdir: Path) -> EmbeddedTriton:
    """A Triton reading the bucket itself (not started)."""
    return EmbeddedTriton(bucket.triton_url, load_models=load_models, workdir=workdir, environment=AWS_ENV)


@contextmanager
def restarted(bucket: Bucket, model: str, workdir: Path) -> Iterator[TritonHttp]:
    """A Triton started again on the same repository with ``--load-model=model``: what it serves is what a
    restarted replica would (its client)."""
    with triton_on(bucket, [model], workdir) as server:
        client = TritonHttp(server.url, timeout_s=5.0)
        try:
            yield client
        finally:
            client.close()


def new_model(bucket: Bucket, base: str, versions: Mapping[int, VersionSource], *, config: str | None = None) -> str:
    """A fresh model in the bucket (its config and ``versions``), named for the test."""
    name = f"os_{base}_{next(_names)}"
    bucket.upload_config(name, base, config)
    for version, source in versions.items():
        bucket.upload_version(name, version, version_source(base, source))
    return name


def serve_exactly(triton: TritonHttp, model: str, versions: list[int], config: Mapping[str, Any]) -> None:
    """Serve exactly these versions with ``config`` (an operator's override)."""
    pinned = dict(config, name=model, version_policy={"specific": {"versions": versions}})
    triton.load_model(model, config=json.dumps(pinned), timeout_s=SETUP_LOAD_TIMEOUT_S)


def wait_served(triton: TritonHttp, model: str, versions: list[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while triton.served_versions(model) != versions:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{model} serves {triton.served_versions(model)}, not {versions}")
        time.sleep(0.05)


def request(model: str, version: str, incident: str) -> RollbackRequest:
    return RollbackRequest(
        model=model,
        from_version=version,
        incident=incident,
        reason="wrong-answer",
        detail="golden request failed",
        pod="triton-0",
    )
