"""Footprint of `healer sidecar`: RSS and CPU while probing 3 models at 1 Hz for 60 s, off-cluster
and in-cluster.

Starts a real tritonserver with three example models (linear_scorer, tiny_classifier and a copy of
linear_scorer), runs `healer sidecar` as its own process against it, samples the sidecar's
/proc/<pid>/status (VmRSS, VmHWM) every second, and reads its CPU time (utime + stime) from
/proc/<pid>/stat at the start and the end of the window. No rollback happens: this is the cost of
watching healthy models, which is what every Triton pod pays all day.

Two runs: off-cluster (no Kubernetes), and in-cluster settings: KUBERNETES_SERVICE_HOST set, a
service-account token and CA, the Kubernetes client built at start-up (for Events, the diagnosis
annotation and the draining rule's peer list, against a local HTTPS stand-in for the API server
that answers the pod list and accepts patches and Events; it is not Kubernetes), and the draining
rule on (its drain set read from the store at start-up). The run checks the sidecar logged that it
built the client. A healthy pod makes no API call: it lists its peers only when it wants to drain.

    .venv/bin/python benchmarks/sidecar_footprint.py [--seconds 60] [--period 1.0] [--only off|in] [--tracing]

``--tracing``: the same with ``tracing.enabled`` (OpenTelemetry's SDK and OTLP/HTTP exporter loaded
and configured at start-up; a healthy pod makes no span, so this is the cost of being ready to).

``--traffic``: with ``sidecar.traffic.enabled`` (Triton's metrics endpoint read every period, every
version's samples kept, docs/traffic-signal.md). ``--extra-models N``: N more copies of linear_scorer
served and configured (the cost per model: compare two runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from healer.edges.embedded import EmbeddedTriton, free_port
from healer.edges.logs import configure_logging

ROOT = Path(__file__).resolve().parents[1]
RSS_TARGET_MIB = 64.0
CPU_TARGET_PCT = 2.0


def proc_status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in {"VmRSS", "VmHWM"}:
            fields[key] = int(value.split()[0])  # kB
    return fields


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(stat[11]) + int(stat[12])) / ticks  # utime + stime


def prepare(scratch: Path, period: float, port: int, extra: int = 0) -> tuple[Path, dict[str, Any]]:
    """A model repository with three models (and ``extra`` more) and the sidecar's config for them."""
    repo = scratch / "repo"
    shutil.copytree(ROOT / "examples" / "model_repository", repo)
    for copy in ["linear_scorer_b", *(f"linear_scorer_x{i}" for i in range(extra))]:
        shutil.copytree(repo / "linear_scorer", repo / copy)
        config = repo / copy / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "linear_scorer"', f'name: "{copy}"'))
    document = yaml.safe_load((ROOT / "examples" / "healer.yaml").read_text())
    document.pop("embedded")
    # The two dense example models (healer.yaml configures more: each its own benchmark's business).
    document["models"] = [m for m in document["models"] if m["name"] in ("linear_scorer", "tiny_classifier")]
    golden_input = ROOT / "examples" / "golden" / "tiny_classifier_input.npy"
    document["models"][1]["golden"]["inputs"][0]["file"] = str(golden_input)
    document["models"].append({**document["models"][0], "name": "linear_scorer_b"})
    document["models"] += [{**document["models"][0], "name": f"linear_scorer_x{i}"} for i in range(extra)]
    document["store"] = {"filesystem": {"root": str(repo)}}
    document["rollback"] = {"state_dir": str(scratch / "runs")}
    document["sidecar"] = {"listen": f"127.0.0.1:{port}", "period_s": period}
    return repo, document


@contextmanager
def api_stand_in(scratch: Path, seen: list[str]) -> Iterator[tuple[int, Path]]:
    """An HTTPS stand-in for the API server: the pod list (this pod, Ready), patches and Events.
    Yields its port and a service-account folder (token, ca.crt, namespace) for the sidecar."""
    accounts = Path(tempfile.mkdtemp(dir=scratch, prefix="serviceaccount-"))
    key, cert = accounts / "api.key", accounts / "ca.crt"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    (accounts / "token").write_text("benchmark-token")
    (accounts / "namespace").write_text("ml")
    pods = {
        "kind": "PodList",
        "items": [
            {
                "metadata": {"name": name, "namespace": "ml", "annotations": {}},
                "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
            }
            for name, ip in (("triton-0", "127.0.0.1"), ("triton-1", "127.0.0.2"))
        ],
    }

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.path.split('?', 1)[0]}")
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps(pods if self.command == "GET" else {"kind": "Status"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PATCH = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], accounts
    finally:
        server.shutdown()
        server.server_close()


def measure(
    scratch: Path,
    server_url: str,
    document: dict[str, Any],
    port: int,
    seconds: float,
    env: dict[str, str],
    log_file: Path,
) -> tuple[float, float, float, float, float]:
    """Run the sidecar: (max RSS MiB, peak RSS MiB, CPU s, wall s, probe results)."""
    document = {**document, "triton": {**document["triton"], "url": server_url}}
    config = scratch / f"healer-{port}.yaml"
    config.write_text(yaml.safe_dump(document))
    sidecar = subprocess.Popen(
        [str(Path(sys.executable).parent / "healer"), "--log-level", "info", "sidecar", "--config", str(config)],
        stdout=log_file.open("wb"),
        env={**os.environ, **env},
    )
    try:
        # Warm-up: imports done and a first cycle probed (steady state is what a pod pays).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        cpu_start, wall_start = cpu_seconds(sidecar.pid), time.monotonic()
        samples = []
        while time.monotonic() - wall_start < seconds:
            samples.append(proc_status(sidecar.pid)["VmRSS"])
            time.sleep(1.0)
        cpu_used = cpu_seconds(sidecar.pid) - cpu_start
        wall = time.monotonic() - wall_start
        peak = proc_status(sidecar.pid)["VmHWM"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            metrics = r.read().decode()
    finally:
        sidecar.send_signal(signal.SIGTERM)
        sidecar.wait(timeout=20)
    probes = sum(
        float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith("healer_probe_results_total{")
    )
    return max(samples) / 1024, peak / 1024, cpu_used, wall, probes


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument(
        "--only",
        choices=["off", "in", "in-drain"],
        help="run one case: off-cluster, in-cluster, in-cluster with draining",
    )
    parser.add_argument("--tracing", action="store_true", help="with tracing.enabled (an OTLP endpoint nobody reads)")
    parser.add_argument("--traffic", action="store_true", help="with sidecar.traffic.enabled (Triton's metrics read)")
    parser.add_argument("--extra-models", type=int, default=0, help="more copies of linear_scorer, each configured")
    return parser.parse_args()


def main() -> int:
    args = arguments()
    configure_logging(level="warning")
    scratch = Path(tempfile.mkdtemp(prefix="healer-footprint-"))
    ok = True
    try:
        _repo, document = prepare(scratch, args.period, 0, args.extra_models)
        if args.tracing:  # nothing listens there: a healthy sidecar sends nothing anyway
            document["tracing"] = {"enabled": True, "otlp_endpoint": f"http://127.0.0.1:{free_port()}/v1/traces"}
        repo = scratch / "repo"
        models = [m["name"] for m in document["models"]]
        with EmbeddedTriton(repo, load_models=models) as server:
            if args.traffic:  # every version's counters read each period (no traffic: nothing learnt)
                document["sidecar"]["traffic"] = {"enabled": True, "metrics_url": server.metrics_url}
            cases = [c for c in ("off", "in", "in-drain") if args.only in (None, c)]
            for case in cases:
                port = free_port()
                doc = {**document, "sidecar": {**document["sidecar"], "listen": f"127.0.0.1:{port}"}}
                if case == "off":
                    result = measure(scratch, server.url, doc, port, args.seconds, {}, scratch / "off.log")
                else:
                    seen: list[str] = []
                    with api_stand_in(scratch, seen) as (api_port, accounts):
                        if case == "in-drain":
                            doc["sidecar"]["drain"] = {"peers": {"namespace": "ml", "selector": "app=triton"}}
                        env = {
                            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                            "KUBERNETES_SERVICE_PORT": str(api_port),
                            "HEALER_SERVICE_ACCOUNT_DIR": str(accounts),
                            "POD_NAME": "triton-0",
                            "POD_NAMESPACE": "ml",
                            "POD_IP": "127.0.0.1",
                        }
                        log = scratch / f"{case}.log"
                        result = measure(scratch, server.url, doc, port, args.seconds, env, log)
                    if '"event": "kubernetes_api"' not in log.read_text():
                        print("  the sidecar did not build its Kubernetes client: the in-cluster path was not taken")
                        return 1
                rss_mib, peak_mib, cpu_used, wall, probes = result
                cpu_pct = 100.0 * cpu_used / wall
                where = {
                    "off": "off-cluster",
                    "in": "in-cluster (Kubernetes client built for Events and the diagnosis annotation)",
                    "in-drain": "in-cluster with the draining rule on (its drain set read from the store at start-up)",
                }[case]
                print(
                    f"healer sidecar, {where}"
                    + (", tracing on" if args.tracing else "")
                    + (", traffic signal on" if args.traffic else "")
                )
                if case != "off":
                    calls = (
                        ", ".join(sorted(set(seen)))
                        or "none: a healthy pod reads its peers only when it wants to drain"
                    )
                    print(f"  Kubernetes API calls while healthy: {len(seen)} ({calls})")
                print(
                    f"  {len(models)} models, period {args.period:g} s, {wall:.0f} s window, {probes:.0f} probe results"
                )
                print(f"  RSS max over the window: {rss_mib:6.1f} MiB (peak since start {peak_mib:.1f} MiB)")
                print(f"  target: peak <= {RSS_TARGET_MIB:g} MiB")
                share = f"{cpu_pct:.2f} % of one core (target <= {CPU_TARGET_PCT:g} %)"
                print(f"  CPU: {cpu_used:.2f} s in {wall:.0f} s = {share}")
                within = peak_mib <= RSS_TARGET_MIB and cpu_pct <= CPU_TARGET_PCT
                print("  within the targets" if within else "  OVER a target")
                ok = ok and within
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
