"""Golden requests kept in the store beside the model, so a pipeline versions them with it
(``models[].golden_in_store``).

Layout, in the store, one golden request per file (``.yaml``, ``.yml`` or ``.json``):

* ``<model>/golden/<NAME>.yaml``: requests **every** version must pass, the stable ones included (a
  rollback's verify of the version it restores judges it by them too): a request that only a new
  version answers right belongs beside that version instead;
* ``<model>/<version>/golden/<NAME>.yaml``: requests for that version alone. They are files of the
  version: hashed when it is promoted, staged, checked and copied with it (one written into a stable
  version's folder afterwards makes its files differ from the ledger: its restore is refused). Triton
  ignores a folder in a version directory that its backend does not read (a Python backend's too:
  tests/probes/test_suite_triton.py).

Each file is written as under healer.yaml's ``golden`` (``name`` defaults to the file's stem; values
inline with ``data``: a ``file`` would be read from this machine's disk, so it is refused). They come
after the configuration's requests: the model's, then the version's, each in the order of their keys.
A file that does not load is skipped and told (an ``error`` log line naming the store key, the key in
the file and what is wrong); the rest of the suite is judged. A name the configuration or another file
already uses is skipped the same way.

Read by the sidecar through ``StoreSuites``: once per model and version, then again after
``refresh_s`` (a pipeline's change is judged within a minute); a store that does not answer keeps the
last suite read (the configuration's alone before any). The check after a load (verify, promote, the
release's gate) reads them afresh (``suite_with_store``): a rollback is rare and must judge what the
store holds now.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml

from healer.settings import VERSION_PATTERN, ConfigError, GoldenRequest, ModelSettings, parse_section
from healer.settings.yaml12 import load_yaml

log = structlog.get_logger("healer.probes")

SUFFIXES = (".yaml", ".yml", ".json")
REFRESH_S = 60.0
MAX_FILES = 64  # a suite is judged every cycle: more requests than this is a mistake, not a suite
MAX_FILE_BYTES = 1 << 20


def golden_prefix(model: str, version: str | None = None) -> str:
    """Where the store keeps ``model``'s golden requests: every version's, or ``version``'s own."""
    return f"{model}/golden/" if version is None else f"{model}/{version}/golden/"


def read_store_requests(
    store: Any, model: ModelSettings, version: str | None = None
) -> tuple[tuple[GoldenRequest, ...], tuple[str, ...]]:
    """The requests in the store for ``model`` (after its configured ones: the model's, then
    ``version``'s own when one is named) and what was skipped, each problem naming the store key.
    Raises the store's errors (unreachable: nothing concluded)."""
    taken = {r.name for r in model.suite}
    requests: list[GoldenRequest] = []
    problems: list[str] = []
    prefixes = [golden_prefix(model.name)]
    if version is not None and VERSION_PATTERN.match(version):  # a name from Triton, never a path
        prefixes.append(golden_prefix(model.name, version))
    keys: list[str] = []
    for prefix in prefixes:
        found = sorted(k for k in store.blobs.keys(prefix) if k.endswith(SUFFIXES))
        keys += found
        if len(keys) > MAX_FILES:
            problems.append(
                f"{store.location}/{prefix}: {len(keys)} files in the suite, only the first {MAX_FILES} read"
            )
            break
    for key in keys[:MAX_FILES]:
        where = f"{store.location}/{key}"
        try:
            request = _parse(where, store.blobs.read(key), Path(key).stem)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        if request.name in taken:
            problems.append(f"{where}: name: golden request {request.name!r} is already in the suite: skipped")
            continue
        taken.add(request.name)
        requests.append(request)
    return tuple(requests), tuple(problems)


def _parse(where: str, raw: bytes, stem: str) -> GoldenRequest:
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(where, "", f"larger than {MAX_FILE_BYTES} bytes")
    try:
        document = load_yaml(raw.decode("utf-8"), where)
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(where, "", f"not valid YAML: {exc}") from None
    if isinstance(document, dict):
        for side in ("inputs", "outputs"):
            for i, tensor in enumerate(document.get(side) or []):
                if isinstance(tensor, dict) and "file" in tensor:
                    raise ConfigError(where, f"{side}[{i}].file", "not read from a store: write the values as data")
        document = {"name": stem, **document}
    request: GoldenRequest = parse_section(GoldenRequest, document, source=where, base_dir=Path("/nonexistent"))
    return request


def suite_with_store(store: Any, model: ModelSettings, version: str | None = None) -> tuple[GoldenRequest, ...]:
    """``model``'s whole suite now for ``version`` (None: the requests every version must pass): its
    configured requests, then the store's (read afresh); problems are told. Raises the store's errors."""
    if not model.golden_in_store:
        return model.suite
    extra, problems = read_store_requests(store, model, version)
    for problem in problems:
        log.error("golden_store_request_skipped", model=model.name, problem=problem)
    return (*model.suite, *extra)


@dataclass(frozen=True)
class _Read:
    suite: tuple[GoldenRequest, ...]
    at: float
    problems: tuple[str, ...]


class StoreSuites:
    """Each model's suite with its requests from the store, remembered ``refresh_s`` (the sidecar's probe
    workers call ``suite_of``; safe across threads). ``store_factory`` opens the configured store."""

    def __init__(
        self,
        store_factory: Callable[[], Any] | None,
        *,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store_factory = store_factory
        self._store: Any = None
        self._refresh_s = refresh_s
        self._clock = clock
        self._read: dict[tuple[str, str | None], _Read] = {}
        self._lock = threading.Lock()

    def suite_of(self, model: ModelSettings, version: str | None = None) -> tuple[GoldenRequest, ...]:
        """``model``'s suite for ``version`` (its own requests too), remembered per model and version."""
        if not model.golden_in_store or self._store_factory is None:
            return model.suite
        now = self._clock()
        key = (model.name, version)
        with self._lock:
            last = self._read.get(key)
        if last is not None and now - last.at < self._refresh_s:
            return last.suite
        try:
            with self._lock:
                if self._store is None:
                    self._store = self._store_factory()
                store = self._store
            extra, problems = read_store_requests(store, model, version)
            suite = (*model.suite, *extra)
        except Exception as exc:  # the store, whatever its trouble: the last suite read stands, asked again later
            log.warning(
                "golden_store_unread",
                model=model.name,
                version=version,
                error=f"{type(exc).__name__}: {str(exc)[:300]}",
            )
            suite, problems = (last.suite if last is not None else model.suite), ()
        if last is None or problems != last.problems:
            for problem in problems:  # told once per change, not every refresh
                log.error("golden_store_request_skipped", model=model.name, version=version, problem=problem)
        if last is None or [r.name for r in suite] != [r.name for r in last.suite]:
            log.info("golden_suite", model=model.name, version=version, requests=[r.name for r in suite])
        with self._lock:
            self._read[key] = _Read(suite, now, problems)
        return suite
