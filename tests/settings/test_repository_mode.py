"""repository_mode (issue 29): shared (today's), object-store (Triton reads the store itself) and
per-pod (each pod's own copy), tied to store and live_repository by the loader, each bad file
failing with the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.settings import ConfigError, Settings, load_settings
from tests.support.settings_files import minimal_model

S3 = {"s3": {"bucket": "models", "endpoint_url": "http://127.0.0.1:8333"}}


def _path(tmp_path: Path, **keys: Any) -> Path:
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump({"models": [minimal_model()], **keys}), encoding="utf-8")
    return path


def _load(tmp_path: Path, **keys: Any) -> Settings:
    return load_settings(_path(tmp_path, **keys))


def _error(tmp_path: Path, **keys: Any) -> str:
    path = _path(tmp_path, **keys)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value).replace(str(path), "<file>")


def test_the_default_is_shared_and_keeps_todays_rule(tmp_path: Path) -> None:
    settings = _load(tmp_path, store=S3, live_repository=str(tmp_path / "live"))
    assert settings.repository_mode == "shared"
    assert not settings.object_store_mode
    assert settings.live_repository_path == tmp_path / "live"
    assert _error(tmp_path, store=S3) == (
        "<file>: live_repository: is required with an S3 store (the directory Triton reads)"
    )


def test_object_store_reads_the_bucket_without_a_live_repository(tmp_path: Path) -> None:
    settings = _load(tmp_path, store=S3, repository_mode="object-store")
    assert settings.object_store_mode
    assert settings.live_repository_path is None


def test_object_store_with_a_filesystem_store_reads_its_root(tmp_path: Path) -> None:
    root = tmp_path / "store"
    settings = _load(tmp_path, store={"filesystem": {"root": str(root)}}, repository_mode="object-store")
    assert settings.object_store_mode
    assert settings.live_repository_path == root


def test_object_store_needs_a_store(tmp_path: Path) -> None:
    assert _error(tmp_path, repository_mode="object-store") == (
        "<file>: store: is required with repository_mode 'object-store' (the store Triton reads)"
    )


def test_object_store_refuses_a_live_repository(tmp_path: Path) -> None:
    live = str(tmp_path / "live")
    assert _error(tmp_path, store=S3, repository_mode="object-store", live_repository=live) == (
        "<file>: live_repository: must not be set with repository_mode 'object-store': Triton reads the store "
        f"itself, nothing is copied (got {live!r})"
    )


def test_per_pod_needs_no_live_repository(tmp_path: Path) -> None:
    settings = _load(tmp_path, store=S3, repository_mode="per-pod")
    assert settings.repository_mode == "per-pod"
    assert not settings.object_store_mode


def test_an_unknown_mode_names_the_key_and_the_choices(tmp_path: Path) -> None:
    assert _error(tmp_path, store=S3, repository_mode="nfs") == (
        "<file>: repository_mode: must be one of shared, object-store, per-pod, got 'nfs'"
    )
