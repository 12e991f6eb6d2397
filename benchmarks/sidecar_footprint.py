"""Footprint of `healer sidecar`: RSS and CPU while probing 3 models at 1 Hz for 60 s.

Starts a real tritonserver with three example models (linear_scorer, tiny_classifier and a copy of
linear_scorer), runs `healer sidecar` as its own process against it, samples the sidecar's
/proc/<pid>/status (VmRSS, VmHWM) every second, and reads its CPU time (utime + stime) from
/proc/<pid>/stat at the start and the end of the window. No rollback happens: this is the cost of
watching healthy models, which is what every Triton pod pays all day.

    .venv/bin/python benchmarks/sidecar_footprint.py [--seconds 60] [--period 1.0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from healer.embedded import EmbeddedTriton, free_port
from healer.logs import configure_logging

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


def prepare(scratch: Path, period: float, port: int) -> tuple[Path, dict[str, Any]]:
    """A model repository with three models and the sidecar's config for them."""
    repo = scratch / "repo"
    shutil.copytree(ROOT / "examples" / "model_repository", repo)
    shutil.copytree(repo / "linear_scorer", repo / "linear_scorer_b")
    config = repo / "linear_scorer_b" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "linear_scorer"', 'name: "linear_scorer_b"'))
    document = yaml.safe_load((ROOT / "examples" / "healer.yaml").read_text())
    document.pop("embedded")
    golden_input = ROOT / "examples" / "golden" / "tiny_classifier_input.npy"
    document["models"][1]["golden"]["inputs"][0]["file"] = str(golden_input)
    document["models"].append({**document["models"][0], "name": "linear_scorer_b"})
    document["store"] = {"filesystem": {"root": str(repo)}}
    document["rollback"] = {"state_dir": str(scratch / "runs")}
    document["sidecar"] = {"listen": f"127.0.0.1:{port}", "period_s": period}
    return repo, document


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--period", type=float, default=1.0)
    args = parser.parse_args()
    configure_logging(level="warning")
    scratch = Path(tempfile.mkdtemp(prefix="healer-footprint-"))
    port = free_port()
    repo, document = prepare(scratch, args.period, port)
    try:
        with EmbeddedTriton(repo, load_models=["linear_scorer", "tiny_classifier", "linear_scorer_b"]) as server:
            document["triton"]["url"] = server.url
            (scratch / "healer.yaml").write_text(yaml.safe_dump(document))
            sidecar = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "healer"),
                    "--log-level",
                    "warning",
                    "sidecar",
                    "--config",
                    str(scratch / "healer.yaml"),
                ],
                stdout=subprocess.DEVNULL,
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
                while time.monotonic() - wall_start < args.seconds:
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
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    probes = sum(
        float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith("healer_probe_results_total{")
    )
    rss_mib, peak_mib = max(samples) / 1024, peak / 1024
    cpu_pct = 100.0 * cpu_used / wall
    print(f"healer sidecar, 3 models, period {args.period:g} s, {wall:.0f} s window, {probes:.0f} probe results")
    print(f"  RSS max over the window: {rss_mib:6.1f} MiB (peak since start {peak_mib:.1f} MiB)")
    print(f"  target: peak <= {RSS_TARGET_MIB:g} MiB")
    print(f"  CPU: {cpu_used:.2f} s in {wall:.0f} s = {cpu_pct:.2f} % of one core (target <= {CPU_TARGET_PCT:g} %)")
    ok = peak_mib <= RSS_TARGET_MIB and cpu_pct <= CPU_TARGET_PCT
    print("  within the targets" if ok else "  OVER a target")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
