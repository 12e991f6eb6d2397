"""A SIMULATED Triton for benchmarks/scale_restore.py: many replicas, one port each, served by one
asyncio loop in one thread. It is not Triton: it answers exactly the HTTP calls a rollback makes
through healer/edges/triton_rest.py (and `healer promote`), with a load time that is a model, not a measure.

    GET  /v2/health/live                          200
    GET  /v2/models/{m}                           {"versions": [...served]}; 400 when none is served
    GET  /v2/models/{m}/versions/{v}/ready        200 when v is served, else 400
    GET  /v2/models/{m}/config                    the served config (Triton's JSON form)
    POST /v2/repository/index                     [{"name", "version", "state"}] per version known
    POST /v2/repository/models/{m}/load           {"parameters": {"config": "<json>"}} pins the versions of its
                                                  version_policy; answers when the load is done (a swap: the
                                                  old versions serve until then); without a config: the newest
    POST /v2/repository/models/{m}/unload         serves nothing at once; UNLOADING, then UNAVAILABLE
    POST /v2/models/{m}/versions/{v}/infer        the expected outputs (JSON "data") for a good version,
                                                  wrong values (+5) for any other; 400 when v is not served

The load model: each load first reads ``model_bytes`` from ONE shared store of ``bandwidth_bps``
bytes per second, shared fairly by the loads reading at that moment (processor sharing, advanced
in ticks of ``tick_s``), then spends ``load_s`` (the fixed part: backend start, weights to device).
Alone on an unsaturated store (``bandwidth_bps=math.inf``) a load takes ``load_s``; k loads started
together take ``load_s + k * model_bytes / bandwidth_bps``. A load that the client gave up on
(its timeout) goes on to the end, as Triton's does. Loads on one replica run one after another.

    from benchmarks.sim_triton import SimulatedTriton
    with SimulatedTriton(100, model="m", good_versions={"2"}, outputs=..., serving=["3"], load_s=1.5) as sim:
        sim.urls  # ["127.0.0.1:41234", ...]

    .venv/bin/python -m benchmarks.sim_triton --replicas 3 --load-s 1.5    # serve until Ctrl-C
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import re
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
WRONG_OFFSET = 5.0  # what a broken version adds to every expected value


@dataclass(frozen=True)
class OutputSpec:
    """One expected output tensor of the golden request: its datatype, shape and values (flat)."""

    datatype: str
    shape: tuple[int, ...]
    data: tuple[Any, ...]

    def answer(self, name: str, *, good: bool) -> dict[str, Any]:
        data = list(self.data) if good else [_wrong(v) for v in self.data]
        return {"name": name, "datatype": self.datatype, "shape": list(self.shape), "data": data}


def _wrong(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + (int(WRONG_OFFSET) if isinstance(value, int) else WRONG_OFFSET)
    return f"wrong-{value}"


@dataclass
class LoadRecord:
    replica: int
    versions: list[str]
    started: float  # the simulation's clock (time.monotonic)
    read_s: float  # waiting for the shared store
    seconds: float  # the whole load
    readers_at_start: int  # loads reading the store when this one began (itself included)


@dataclass
class _Replica:
    index: int
    port: int = 0
    served: list[str] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class _Read:
    def __init__(self, nbytes: float, done: asyncio.Future[None]) -> None:
        self.remaining = nbytes
        self.done = done


class SharedStore:
    """The store every replica loads from: ``bandwidth_bps`` shared fairly by the reads in progress."""

    def __init__(self, bandwidth_bps: float, tick_s: float) -> None:
        if bandwidth_bps <= 0 or tick_s <= 0:
            raise ValueError("bandwidth and tick must be positive")
        self.bandwidth_bps = bandwidth_bps
        self.tick_s = tick_s
        self.readers: list[_Read] = []
        self.peak_readers = 0
        self._ticker: asyncio.Task[None] | None = None

    async def read(self, nbytes: float) -> None:
        if nbytes <= 0 or math.isinf(self.bandwidth_bps):
            return
        loop = asyncio.get_running_loop()
        reader = _Read(nbytes, loop.create_future())
        self.readers.append(reader)
        self.peak_readers = max(self.peak_readers, len(self.readers))
        if self._ticker is None or self._ticker.done():
            self._ticker = loop.create_task(self._tick())
        await reader.done

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while self.readers:
            await asyncio.sleep(self.tick_s)
            now = loop.time()
            # What the store delivered since the last tick, split evenly among the readers.
            share = self.bandwidth_bps * (now - last) / len(self.readers)
            last = now
            still = []
            for reader in self.readers:
                reader.remaining -= share
                if reader.remaining <= 0:
                    if not reader.done.done():
                        reader.done.set_result(None)
                else:
                    still.append(reader)
            self.readers = still


class SimulatedTriton:
    """``replicas`` simulated Tritons serving one model, each on its own loopback port, in one thread."""

    def __init__(
        self,
        replicas: int,
        *,
        model: str,
        good_versions: Collection[str],
        outputs: Mapping[str, OutputSpec],
        serving: Sequence[str],
        load_s: float,
        model_bytes: float = 0.0,
        bandwidth_bps: float = math.inf,
        unload_s: float = 0.1,
        tick_s: float = 0.01,
        config: Mapping[str, Any] | None = None,
        versions_present: Collection[str] | None = None,
        live_repository: Path | None = None,
    ) -> None:
        if replicas < 1:
            raise ValueError("at least one replica")
        self.model = model
        self.good_versions = {str(v) for v in good_versions}
        self.outputs = dict(outputs)
        self.load_s = load_s
        self.model_bytes = model_bytes
        self.unload_s = unload_s
        self.base_config = dict(config or {"name": model, "backend": "python", "max_batch_size": 8})
        self.versions_present = None if versions_present is None else {str(v) for v in versions_present}
        self.live_repository = live_repository
        self._initial = [str(v) for v in serving]
        self._count = replicas
        self._bandwidth_bps, self._tick_s = bandwidth_bps, tick_s
        self.store: SharedStore | None = None
        self.replicas: list[_Replica] = []
        self.loads: list[LoadRecord] = []
        self.loading = 0
        self.peak_loading = 0
        self.requests = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.Server] = []
        self._ready = threading.Event()
        self._failed: BaseException | None = None

    # ---- lifecycle (from any thread) -----------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        return [f"127.0.0.1:{r.port}" for r in self.replicas]

    def start(self) -> SimulatedTriton:
        self._thread = threading.Thread(target=self._run, name="simulated-triton", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failed is not None:
            raise RuntimeError(f"the simulated Triton did not start: {self._failed}") from self._failed
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):  # the loop already stopped
                asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=30)
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

    def __enter__(self) -> SimulatedTriton:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` in the simulation's thread (its state is only touched there)."""
        assert self._loop is not None

        async def inside() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(inside(), self._loop).result(timeout=30)

    def set_serving(self, versions: Sequence[str]) -> None:
        """Make every replica serve exactly these versions, at once (the set-up, not a load)."""
        self.call(self._set_serving, [str(v) for v in versions])

    def served(self) -> list[list[str]]:
        return list(self.call(lambda: [list(r.served) for r in self.replicas]))

    def reset_stats(self) -> None:
        def reset() -> None:
            self.loads.clear()
            self.peak_loading = self.loading
            self.requests = 0
            if self.store is not None:
                self.store.peak_readers = len(self.store.readers)

        self.call(reset)

    def stats(self) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            seconds = sorted(x.seconds for x in self.loads)
            return {
                "loads": len(seconds),
                "load_s_min": round(seconds[0], 3) if seconds else None,
                "load_s_max": round(seconds[-1], 3) if seconds else None,
                "peak_concurrent_loads": self.peak_loading,
                "peak_concurrent_readers": self.store.peak_readers if self.store else 0,
                "requests": self.requests,
            }

        return dict(self.call(read))

    # ---- inside the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._open())
        except BaseException as exc:  # an unusable port range, too many files: say so to start()
            self._failed = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _open(self) -> None:
        self.store = SharedStore(self._bandwidth_bps, self._tick_s)
        for index in range(self._count):
            replica = _Replica(index)
            self._set_one(replica, self._initial)
            server = await asyncio.start_server(
                functools.partial(self._connection, replica), "127.0.0.1", 0, backlog=256
            )
            replica.port = server.sockets[0].getsockname()[1]
            self.replicas.append(replica)
            self._servers.append(server)

    async def _close(self) -> None:
        """Stop listening, then end what is still going on (a load a client gave up on, a connection)."""
        for server in self._servers:
            server.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def _set_serving(self, versions: list[str]) -> None:
        for replica in self.replicas:
            self._set_one(replica, versions)

    def _set_one(self, replica: _Replica, versions: list[str]) -> None:
        replica.served = sorted(versions, key=int)
        replica.states = {v: "UNAVAILABLE" for v in replica.states} | {v: "READY" for v in versions}
        replica.config = self._config_for(versions)

    def _config_for(self, versions: list[str], config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        base = dict(config) if config is not None else dict(self.base_config)
        base["name"] = self.model
        base.setdefault("version_policy", {"specific": {"versions": [int(v) for v in versions]}})
        return base

    def _present(self, version: str) -> bool:
        if self.live_repository is not None:
            return (self.live_repository / self.model / version).is_dir()
        return self.versions_present is None or version in self.versions_present

    async def _connection(self, replica: _Replica, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {}
                for line in header_lines:
                    if ":" in line:
                        key, _, value = line.partition(":")
                        headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                self.requests += 1
                status, payload = await self._answer(replica, method, path.split("?", 1)[0], body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                writer.write(
                    f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return  # the client gave up (its timeout): whatever it asked for went on
        except asyncio.CancelledError:
            return  # stop(): ended quietly (asyncio's streams would log a cancelled handler)
        finally:
            writer.close()

    async def _answer(  # noqa: PLR0911 - a router: one return per route
        self, replica: _Replica, method: str, path: str, body: bytes
    ) -> tuple[int, Any]:
        model = re.escape(self.model)
        if method == "GET" and path in ("/v2/health/live", "/v2/health/ready"):
            return 200, b""
        if method == "POST" and path == "/v2/repository/index":
            return 200, [{"name": self.model, "version": v, "state": s} for v, s in sorted(replica.states.items())]
        if method == "GET" and re.fullmatch(f"/v2/models/{model}", path):
            if not replica.served:
                return 400, {"error": f"Request for unknown model: '{self.model}' has no available versions"}
            return 200, {"name": self.model, "versions": replica.served, "platform": "python"}
        if method == "GET" and re.fullmatch(f"/v2/models/{model}/config", path):
            if not replica.served:
                return 400, {"error": f"Request for unknown model: '{self.model}' has no available versions"}
            return 200, replica.config
        if match := re.fullmatch(f"/v2/models/{model}/versions/([0-9]+)/ready", path):
            return (200, b"") if method == "GET" and match[1] in replica.served else (400, b"")
        if method == "POST" and (match := re.fullmatch(f"/v2/models/{model}/versions/([0-9]+)/infer", path)):
            version = match[1]
            if version not in replica.served:
                return 400, {"error": f"Request for unknown model: '{self.model}' version {version} is not found"}
            good = version in self.good_versions
            outputs = [spec.answer(name, good=good) for name, spec in self.outputs.items()]
            return 200, {"model_name": self.model, "model_version": version, "outputs": outputs}
        if method == "POST" and re.fullmatch(f"/v2/repository/models/{model}/load", path):
            return await self._load(replica, body)
        if method == "POST" and re.fullmatch(f"/v2/repository/models/{model}/unload", path):
            return self._unload(replica)
        if method == "POST" and re.fullmatch("/v2/repository/models/[^/]+/(load|unload)", path):
            return 400, {"error": "failed to load: model not found in any model repository"}
        return 404, {"error": "Not Found"}

    async def _load(self, replica: _Replica, body: bytes) -> tuple[int, Any]:
        try:
            payload = json.loads(body or b"{}")
            text = (payload.get("parameters") or {}).get("config")
            config = json.loads(text) if text else None
        except ValueError as exc:
            return 400, {"error": f"failed to parse the load request: {exc}"}
        versions = self._versions_for(config)
        missing = [v for v in versions if not self._present(v)]
        if not versions or missing:
            return 400, {"error": f"failed to load '{self.model}' version {', '.join(missing) or '?'}: Not found"}
        async with replica.lock:
            loop = asyncio.get_running_loop()
            started = loop.time()
            readers = (len(self.store.readers) if self.store else 0) + 1
            self.loading += 1
            self.peak_loading = max(self.peak_loading, self.loading)
            for v in versions:
                if v not in replica.served:
                    replica.states[v] = "LOADING"
            try:
                assert self.store is not None
                await self.store.read(self.model_bytes)
                read_s = loop.time() - started
                await asyncio.sleep(self.load_s)
            finally:
                self.loading -= 1
            # The swap: the new versions serve, the ones no longer pinned are released.
            for v in replica.served:
                if v not in versions:
                    replica.states[v] = "UNAVAILABLE"
            for v in versions:
                replica.states[v] = "READY"
            replica.served = sorted(versions, key=int)
            replica.config = self._config_for(versions, config)
            seconds = loop.time() - started
            self.loads.append(LoadRecord(replica.index, versions, started, read_s, seconds, readers))
        return 200, b""

    def _versions_for(self, config: Mapping[str, Any] | None) -> list[str]:
        policy = (config or {}).get("version_policy") or {}
        if "specific" in policy:
            return sorted({str(v) for v in policy["specific"].get("versions", [])}, key=int)
        known = set(self.versions_present or ()) | set(self._initial) | self.good_versions
        present = [v for v in known if self._present(v)]
        return [max(present, key=int)] if present else []

    def _unload(self, replica: _Replica) -> tuple[int, Any]:
        unloading = list(replica.served)
        replica.served = []
        for v in unloading:
            replica.states[v] = "UNLOADING"

        def done() -> None:
            for v in unloading:
                if replica.states.get(v) == "UNLOADING":
                    replica.states[v] = "UNAVAILABLE"

        asyncio.get_running_loop().call_later(self.unload_s, done)
        return 200, b""


@contextlib.contextmanager
def simulated(replicas: int, **options: Any) -> Iterator[SimulatedTriton]:
    with SimulatedTriton(replicas, **options) as sim:
        yield sim


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--model", default="linear_scorer")
    parser.add_argument("--load-s", type=float, default=1.5, help="the fixed part of a load (simulation)")
    parser.add_argument("--model-bytes", type=float, default=0.0)
    parser.add_argument("--bandwidth", type=float, default=math.inf, help="the shared store's bytes per second")
    args = parser.parse_args()
    outputs = {"SCORE": OutputSpec("FP32", (2, 1), (7.1, 3.1))}
    with SimulatedTriton(
        args.replicas,
        model=args.model,
        good_versions={"1", "2"},
        outputs=outputs,
        serving=["3"],
        load_s=args.load_s,
        model_bytes=args.model_bytes,
        bandwidth_bps=args.bandwidth,
    ) as sim:
        print(json.dumps({"simulation": True, "urls": sim.urls}), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
