"""Shared fixtures. Triton tests run against the real tritonserver from the embedded extra.

Tiers: a test that starts a server or another program carries a marker saying which (registered in
pyproject.toml); `make check` runs the unmarked rest, `make test` everything. A test using one of the
fixtures in FIXTURE_MARKS is marked here, so a new test cannot forget; one that starts something
itself is marked in its module, and `--no-processes` (set by `make check`) fails an unmarked test
that starts any other program.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from healer.edges.embedded import EmbeddedTriton
from healer.edges.triton import TritonHttp
from healer.settings import ModelSettings, Settings, load_settings
from tests.support import slow_first

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
        suite = model["golden"] if isinstance(model["golden"], list) else [model["golden"]]
        for tensor in (t for request in suite for t in request["inputs"]):
            if "file" in tensor:
                tensor["file"] = str(EXAMPLES / tensor["file"])
    return document


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Commands under test configure logging (level, stream); no test sees another's configuration.
    Between them, structlog's defaults, but for exceptions written as plain tracebacks: with rich
    installed (import-linter brings it) each one took about 0.3 s to render, and the sidecar's tests
    log dozens on purpose (a bug in a step must not stop the loop)."""
    structlog.reset_defaults()
    *processors, _console = structlog.get_config()["processors"]
    structlog.configure(
        processors=[*processors, structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)]
    )
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
    # Every model examples/healer.yaml configures (EXAMPLE_MODELS and the models of their own: the LLM
    # stand-in, ...), so the example configuration probes healthy against it.
    configured = tuple(m.name for m in load_settings(EXAMPLE_CONFIG).models)
    server = EmbeddedTriton(
        model_repository,
        load_models=tuple(dict.fromkeys([*EXAMPLE_MODELS, *configured])),
        workdir=tmp_path_factory.mktemp("triton-workdir"),
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


# ---- tiers ---------------------------------------------------------------------------------------------

# The markers of tests that start a server or another program; a test with none of them starts nothing.
TIER_MARKERS = frozenset({"triton", "s3", "browser", "promtool", "hadolint", "subprocess", "e2e"})

# Fixtures that start a server or a program, and the marks every test using one (directly or through
# another fixture) gets.
FIXTURE_MARKS: dict[str, tuple[pytest.MarkDecorator, ...]] = {
    "triton_server": (pytest.mark.triton,),  # the shared real tritonserver: triton, deploy, the stacks
    "cluster_like": (pytest.mark.triton,),  # test_drills_triton: an embedded stack behind the Argo API
    # test_drills_triton: `healer demo` as a process, under its own 600 s limit
    "demo_run": (pytest.mark.triton, pytest.mark.subprocess, pytest.mark.timeout(660)),
    "seaweed": (pytest.mark.s3,),  # test_store, test_rollback_s3: the shared SeaweedFS (tests/support/s3_server.py)
    "tls_server": (pytest.mark.subprocess,),  # test_webhook: openssl makes its certificate (tests/support/tls.py)
    # tests/e2e (marked e2e there): the control plane's start, bounded step by step, takes up to 7 min
    "control_plane": (pytest.mark.timeout(600),),
}
# Each a probe a library makes on import, not a program a test starts.
LIBRARY_PROBES = frozenset({"lscpu"})  # numpy.testing: does the CPU have SVE
_CALL_FAILED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-processes",
        action="store_true",
        help="fail a test that starts another program and has no tier marker (make check sets it)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            for mark in FIXTURE_MARKS.get(fixture, ()):
                if mark.name != "timeout" or item.get_closest_marker("timeout") is None:
                    item.add_marker(mark)
    slow_first.reorder(items)


# ---- the slowest files first in xdist's workers (tests/support/slow_first.py, tests/durations.json) --------


def pytest_configure(config: pytest.Config) -> None:
    slow_first.disable_xdist_reorder(config)
    slow_first.Recorder.register(config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


@pytest.fixture(autouse=True)
def _no_unmarked_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """With --no-processes, a test without a tier marker that starts a program fails, naming it."""
    if not request.config.getoption("no_processes") or any(
        request.node.get_closest_marker(name) is not None for name in TIER_MARKERS
    ):
        yield
        return
    started: list[str] = []
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def refuse(popen: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        argv = [str(args)] if isinstance(args, str | bytes | Path) else [str(a) for a in args]
        if Path(argv[0]).name in LIBRARY_PROBES:
            return execute_child(popen, args, *rest, **options)  # type: ignore[no-any-return]
        started.append(" ".join(argv)[:200])
        pytest.fail(unmarked(started), pytrace=False)

    subprocess.Popen._execute_child = refuse  # type: ignore[attr-defined]
    try:
        yield
    finally:
        subprocess.Popen._execute_child = execute_child  # type: ignore[attr-defined]
    if started and not request.node.stash.get(_CALL_FAILED, False):  # the failure was caught, or in a thread
        pytest.fail(unmarked(started), pytrace=False)


def unmarked(started: list[str]) -> str:
    markers = ", ".join(sorted(TIER_MARKERS - {"e2e"}))
    return (
        f"this test has no tier marker and starts {started}: mark it with what it starts ({markers}; "
        "pyproject.toml says what each means), or add the fixture that starts it to FIXTURE_MARKS in tests/conftest.py"
    )


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
