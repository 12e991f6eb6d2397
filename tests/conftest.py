"""Shared fixtures. Triton tests run against the real tritonserver from the embedded extra."""

from __future__ import annotations

import dataclasses
import itertools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from healer.embedded import EmbeddedTriton
from healer.settings import ModelSettings, Settings, load_settings
from healer.triton import TritonHttp

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
EXAMPLE_CONFIG = EXAMPLES / "healer.yaml"
EXAMPLE_MODELS = ("linear_scorer", "tiny_classifier")


def example_config_document() -> dict[str, Any]:
    """The example healer.yaml as data, for a test to change and write elsewhere: without the
    embedded block, golden files by absolute path."""
    document: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    document.pop("embedded")
    for model in document["models"]:
        for tensor in model["golden"]["inputs"]:
            if "file" in tensor:
                tensor["file"] = str(EXAMPLES / tensor["file"])
    return document


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Commands under test configure logging (level, stream); no test sees another's configuration."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture(scope="session")
def example_settings() -> Settings:
    return load_settings(EXAMPLE_CONFIG)


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A writable copy of the example repository: tests push new (often broken) models into it."""
    repository = tmp_path_factory.mktemp("model_repository")
    shutil.copytree(EXAMPLES / "model_repository", repository, dirs_exist_ok=True)
    return repository


@pytest.fixture(scope="session")
def triton_server(model_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    server = EmbeddedTriton(
        model_repository, load_models=EXAMPLE_MODELS, workdir=tmp_path_factory.mktemp("triton-workdir")
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def triton(triton_server: EmbeddedTriton) -> Iterator[TritonHttp]:
    client = TritonHttp(triton_server.url, timeout_s=5.0)
    try:
        yield client
    finally:
        client.close()


_model_names = itertools.count(1)

# A version's source: ("good", "1") copies examples/model_repository/<base>/1,
# ("broken", "nan") copies examples/broken/<base>/nan.
VersionSource = tuple[str, str]


@pytest.fixture
def deploy(model_repository: Path, triton: TritonHttp, example_settings: Settings) -> Callable[..., ModelSettings]:
    """Push a new model (a renamed copy of an example, with chosen versions) and load it on Triton."""

    def deploy(
        base: str, versions: dict[int, VersionSource], *, load: bool = True, pin: int | None = None
    ) -> ModelSettings:
        name = f"{base}_t{next(_model_names)}"
        target = model_repository / name
        config = (EXAMPLES / "model_repository" / base / "config.pbtxt").read_text()
        target.mkdir()
        (target / "config.pbtxt").write_text(config.replace(f'name: "{base}"', f'name: "{name}"'))
        for version, (kind, which) in versions.items():
            source = EXAMPLES / ("model_repository" if kind == "good" else "broken") / base / which
            shutil.copytree(source, target / str(version))
        if load:
            triton.load_model(name, timeout_s=60)
        golden = example_settings.model(base).golden
        return ModelSettings(name=name, golden=golden, version=str(pin) if pin is not None else None)

    return deploy


def settings_for(base: Settings, *models: ModelSettings, url: str) -> Settings:
    return dataclasses.replace(base, models=tuple(models), triton=dataclasses.replace(base.triton, url=url))
