"""kubectl's habits, the cluster's side (issue 32, item 6): an API server that refuses is one line naming
it and the cause, not urllib3's dump; a missing kubeconfig says what was looked for and how to fix it;
`healer rollback M V` needs only a kubeconfig; -A lists every namespace (and is refused, in one line, where
a command acts in one); watches fail fast, say a later failure once, give up, and exit 130 on Ctrl-C; -o
is honoured or refused. The API server is a real refused port, or for -A a small local server that
records the paths asked (the real kube-apiserver is the e2e tier's)."""

from __future__ import annotations

import json
import re
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.cli import main
from healer.cli.cluster import watch
from healer.cli.output import EXIT_INTERRUPTED, EXIT_REFUSED, EXIT_USAGE
from healer.edges.cluster import ClusterError
from healer.edges.embedded import free_port

ONE_LINE_LIMIT = 200  # characters: a refused API server was a 420-character dump


def as_a_shell_starts_it() -> None:
    """In the child before exec: Ctrl-C (SIGINT) at its default and not blocked, as a shell starts a
    foreground command. An ignored or blocked SIGINT survives exec, and a pytest worker that ran other
    tests before may hand one down (twice, on the same worker, the command ignored its SIGINT until the
    API timeout: the worker's state, not the command's; which earlier test leaves it is not found yet).
    Only two C-level calls, no import and no lock: safe in a forked child of a threaded process."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def signal_masks(pid: int) -> str:
    """Each thread's blocked, ignored and caught signals (hex masks from /proc), for a failure's message:
    what a command that did not answer its Ctrl-C was doing with SIGINT (bit 2, 0x2)."""
    lines = []
    for status in sorted(Path(f"/proc/{pid}/task").glob("*/status")):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        lines.append(
            f"tid {status.parent.name} {fields.get('Name', '?').strip()} {fields.get('State', '?').strip()}: "
            f"blocked {fields.get('SigBlk', '?').strip()} ignored {fields.get('SigIgn', '?').strip()} "
            f"caught {fields.get('SigCgt', '?').strip()}"
        )
    return "\n".join(lines) or f"(pid {pid} gone)"


def kubeconfig(path: Path, server: str, *, namespace: str = "ml") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "lab", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
                "current-context": "lab",
            }
        )
    )
    return path


@pytest.fixture
def no_kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with no ~/.kube/config, no $KUBECONFIG, no $HEALER_CONFIG, not in a pod."""
    import kubernetes.config.kube_config

    import healer.edges.cluster

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    # The client reads $KUBECONFIG once, at import: the default it took then must not leak in here.
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", "~/.kube/config")
    monkeypatch.setattr(healer.edges.cluster, "IN_CLUSTER_NAMESPACE", tmp_path / "no-pod" / "namespace")
    return home


@pytest.fixture
def refused(tmp_path: Path) -> tuple[Path, str]:
    """A kubeconfig whose API server is a loopback port nothing listens on."""
    server = f"https://127.0.0.1:{free_port()}"
    return kubeconfig(tmp_path / "refused.yaml", server), server


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert (
        len(re.sub(r" \(kubeconfig [^,]+,", "", lines[0])) < ONE_LINE_LIMIT
        and "MaxRetryError" not in lines[0]
        and "urllib3" not in lines[0]
    ), err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "code", "tail"),
    [
        (["status"], 1, ""),
        (["status", "-w"], 1, ""),  # a watch that never got through: the same line, exit 1, no loop
        (["runs", "list"], 1, ""),
        (["runs", "watch"], 1, ""),
        (["runs", "list", "-w"], 1, ""),  # kubectl's -w: the same watch
        (["runs", "-w"], 1, ""),
        (["runs", "get", "healer-rollback-x"], 1, ""),
        (["rollback", "linear_scorer", "3", "--wait", "1"], EXIT_REFUSED, "; rollback not submitted"),
    ],
)
def test_a_refused_api_server_is_one_line(
    argv: list[str],
    code: int,
    tail: str,
    no_kube: Path,
    refused: tuple[Path, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, server = refused
    assert main([*argv, "--kubeconfig", str(config)]) == code
    captured = capsys.readouterr()
    line = one_line(captured.err)
    assert line == (
        f"healer: error: cannot reach the Kubernetes API server at {server}: connection refused "
        f"(kubeconfig {config}, context lab){tail}"
    )
    assert captured.out == ""


def test_rollback_with_no_flags_needs_only_a_kubeconfig(
    no_kube: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README: "a kubeconfig is all it needs". ~/.kube/config, no flag, no healer.yaml: the rollback goes
    to that cluster (here refused, so it says so, and that nothing was submitted)."""
    server = f"https://127.0.0.1:{free_port()}"
    kubeconfig(no_kube / ".kube" / "config", server)
    assert main(["rollback", "linear_scorer", "3"]) == EXIT_REFUSED
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"healer: error: cannot reach the Kubernetes API server at {server}: connection refused")
    assert line.endswith("rollback not submitted")
    assert main(["runs"]) == 1  # `healer runs` too: the cluster's rollbacks
    assert "cannot reach the Kubernetes API server" in one_line(capsys.readouterr().err)


def test_rollback_help_says_where_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rollback", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "with no healer.yaml (no --config, no $HEALER_CONFIG) and a kubeconfig found: an Argo Workflow" in text
    assert "(a kubeconfig is all it needs); otherwise the config's rollback.engine" in text


def test_with_neither_a_config_nor_a_kubeconfig_rollback_says_both_ways(
    no_kube: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rollback", "linear_scorer", "3"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--config FILE" in err and "HEALER_CONFIG" in err
    assert "a kubeconfig (none found in $KUBECONFIG or ~/.kube/config: give --kubeconfig FILE)" in err


def test_a_missing_kubeconfig_says_what_was_looked_for_and_how_to_fix_it(
    no_kube: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("healer: error: no kubeconfig: looked for ~/.kube/config (no such file)")
    assert "a pod's service account (not in a pod)" in line
    assert "--kubeconfig FILE, set KUBECONFIG" in line and "run inside the cluster" in line
    assert "Invalid kube-config file" not in line
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "gone.yaml"))
    assert main(["status"]) == 1
    assert f"looked for $KUBECONFIG ({tmp_path / 'gone.yaml'}: no such file)" in capsys.readouterr().err
    assert main(["status", "--kubeconfig", str(tmp_path / "typo.yaml")]) == 1
    assert capsys.readouterr().err.strip() == f"healer: error: --kubeconfig {tmp_path / 'typo.yaml'}: no such file"


# ---- -A ------------------------------------------------------------------------------------------------


class RecordingApiServer:
    """A loopback HTTP server answering the two list calls -A makes with what it is given; it records
    each path asked, so the test sees which API was called (every namespace's, not one's)."""

    def __init__(self, pods: list[dict[str, Any]], workflows: list[dict[str, Any]]) -> None:
        self.paths: list[str] = []
        self.stopped = False
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.paths.append(self.path)
                path = self.path.partition("?")[0]
                namespace = path.split("/namespaces/")[1].split("/")[0] if "/namespaces/" in path else None
                kind = path.rsplit("/", 1)[-1]
                listed = {"pods": pods, "workflows": workflows}.get(kind)
                items = [i for i in listed or [] if namespace in (None, i["metadata"]["namespace"])]
                body = json.dumps({"items": items} if listed is not None else {"message": "not here"}).encode()
                self.send_response(200 if listed is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> RecordingApiServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_exc: object) -> None:
        if not self.stopped:  # once: shutdown() waits for a serve_forever that is no longer running
            self.stopped = True
            self.server.shutdown()
            self.server.server_close()


def workflow(namespace: str, name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"healer.io/model": "linear_scorer", "healer.io/from-version": "3", "healer.io/incident": "i"},
        },
        "status": {"phase": "Succeeded", "startedAt": "2026-01-01T00:00:01Z", "finishedAt": "2026-01-01T00:00:05Z"},
    }


@pytest.fixture
def every_namespace(no_kube: Path, tmp_path: Path) -> Iterator[tuple[RecordingApiServer, Path]]:
    workflows = [workflow("ml", "healer-rollback-a"), workflow("vision", "healer-rollback-b")]
    with RecordingApiServer(pods=[], workflows=workflows) as server:
        yield server, kubeconfig(tmp_path / "kc.yaml", server.url)


def test_all_namespaces_lists_every_namespaces_pods_and_rollbacks(
    every_namespace: tuple[RecordingApiServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server, config = every_namespace
    assert main(["runs", "list", "-A", "--kubeconfig", str(config)]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[0] == "NAME"
    assert sorted(row.split()[0] for row in rows) == ["ml/healer-rollback-a", "vision/healer-rollback-b"]
    assert main(["runs", "--all-namespaces", "--kubeconfig", str(config), "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted((w["metadata"]["namespace"], w["metadata"]["name"]) for w in listed) == [
        ("ml", "healer-rollback-a"),
        ("vision", "healer-rollback-b"),
    ]
    assert main(["status", "-A", "-n", "ml", "--kubeconfig", str(config)]) == 1  # -A wins over -n, as kubectl's
    assert "no pods with a healer sidecar in any namespace" in capsys.readouterr().err
    asked = {path.partition("?")[0] for path in server.paths}
    assert asked == {"/apis/argoproj.io/v1alpha1/workflows", "/api/v1/pods"}  # never one namespace's
    assert main(["runs", "list", "--kubeconfig", str(config)]) == 0  # without -A: the context's namespace
    assert server.paths[-1].startswith("/apis/argoproj.io/v1alpha1/namespaces/ml/workflows")
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["rollback", "-A", "linear_scorer", "3"], "healer: rollback: -A/--all-namespaces: a rollback is created"),
        (["runs", "get", "x", "-A"], "healer: runs get: -A/--all-namespaces: runs get reads one workflow"),
        (["drill", "-A", "--target", "cluster"], "healer: drill: -A/--all-namespaces: a drill runs"),
    ],
)
def test_all_namespaces_is_refused_in_one_line_where_a_command_acts_in_one(
    argv: list[str], what: str, every_namespace: tuple[RecordingApiServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server, config = every_namespace
    extra = ["--config", str(Path(__file__).parents[2] / "examples" / "healer.yaml")] if argv[0] == "drill" else []
    assert main([*argv, "--kubeconfig", str(config), *extra]) == EXIT_USAGE
    line = one_line(capsys.readouterr().err)
    assert line.startswith(what) and line.endswith("give -n NAMESPACE (default: the context's)")
    assert server.paths == []  # refused before anything was asked


# ---- watch ---------------------------------------------------------------------------------------------


def scripted(*answers: str | BaseException) -> Any:
    remaining = list(answers)

    def render() -> str:
        answer = remaining.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return render


def test_watch_fails_fast_when_the_first_round_fails(capsys: pytest.CaptureFixture[str]) -> None:
    render = scripted(ClusterError("error: cannot reach the Kubernetes API server at https://x: connection refused"))
    assert watch(render, period_s=0.0, rounds=5) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "healer: error: cannot reach the Kubernetes API server at https://x: connection refused\n"


def test_watch_says_a_later_failure_once_per_change_and_a_view_only_when_it_changed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    down, forbidden = ClusterError("api down"), ClusterError("HTTP 403")
    render = scripted("view one", "view one", down, down, down, forbidden, "view one", "view two", "view two")
    assert watch(render, period_s=0.0, rounds=9) == 0
    captured = capsys.readouterr()
    views = [line for line in captured.out.splitlines() if line.startswith("view")]
    assert views == ["view one", "view one", "view two"]  # unchanged rounds not printed; shown again after an error
    errors = captured.err.splitlines()
    assert [line.split("  ", 1)[1] for line in errors] == [
        "healer: api down (retrying every 0 s)",
        "healer: HTTP 403 (retrying every 0 s)",
    ]


def test_watch_gives_up_after_failures_in_a_row_or_failing_too_long(capsys: pytest.CaptureFixture[str]) -> None:
    down = ClusterError("api down")
    render = scripted("view", down, down, "view", down, down, down)
    assert watch(render, period_s=0.0, max_failures=3) == 1
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("healer: api down (3 failed rounds in a row, ") and last.endswith(" s: giving up)")
    # Rounds that each wait out a client timeout: the time failing ends it before the count would.
    now = iter(float(t) for t in range(0, 1000, 25))
    render = scripted("view", down, down, down, down)
    assert watch(render, period_s=0.0, give_up_s=60.0, clock=lambda: next(now)) == 1
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == "healer: api down (3 failed rounds in a row, 75 s: giving up)"


def test_watch_exits_130_on_ctrl_c(capsys: pytest.CaptureFixture[str]) -> None:
    assert watch(scripted("view", KeyboardInterrupt()), period_s=0.0) == EXIT_INTERRUPTED == 130
    assert "view" in capsys.readouterr().out


def test_watch_of_data_prints_no_time_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert watch(scripted('{"a": 1}', '{"a": 2}'), period_s=0.0, rounds=2, header=False) == 0
    assert capsys.readouterr().out == '{"a": 1}\n{"a": 2}\n'


# ---- -o honoured or refused ----------------------------------------------------------------------------


def test_drill_list_prints_a_header_and_honours_o(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.core.drill_catalog import CATALOG

    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    assert main(["drill", "--list"]) == 0
    header, *rows = capsys.readouterr().out.split("\n\n")[0].splitlines()  # the table; the modes' notes after
    assert header.split() == ["SCENARIO", "EXPECTED", "NOT", "IN", "WHAT", "BREAKS"]
    assert [row.split()[0] for row in rows] == [s.name for s in CATALOG]
    assert main(["drill", "--list", "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(e["name"], e["expected"]) for e in listed] == [(s.name, s.expect.outcome.value) for s in CATALOG]
    assert main(["drill", "--list", "-o", "yaml"]) == 0
    assert [e["name"] for e in yaml.safe_load(capsys.readouterr().out)] == [s.name for s in CATALOG]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["drill", "--list", "-o", "wide"], "invalid choice: 'wide'"),  # a drill has no wide table
        (["release", "m", "2", "-o", "wide"], "invalid choice: 'wide'"),
        (["store", "doctor", "m", "-o", "name"], "invalid choice: 'name'"),
        (["store", "stage", "-o", "wide"], "invalid choice: 'wide'"),
        (["runs", "-o", "json", "resume", "x"], "healer: runs resume: -o json: resume prints one line and has no -o"),
        (["runs", "-o", "json", "watch", "-n", "ml"], "healer: runs watch: -o json: watch prints tables"),
        (["promote", "m", "2", "-o", "json"], "unrecognized arguments: -o json"),
    ],
)
def test_an_output_a_command_cannot_print_is_refused_in_one_line(
    argv: list[str], said: str, runs_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["runs", "-w", "get", "x"], "healer: runs get: -w: watches the list of runs (`runs list -w`), not `runs get`"),
        (["runs", "get", "x", "-w"], "healer: runs get: -w: watches the list of runs (`runs list -w`), not `runs get`"),
        (["runs", "resume", "x", "--watch"], "healer: runs resume: -w: watches the list of runs (`runs list -w`), not"),
        (["runs", "list", "-w"], "healer: runs watch: reads the cluster's workflows: give --kubeconfig, --context or"),
    ],
)
def test_a_watch_where_there_is_none_is_refused_in_one_line_without_the_usage(
    argv: list[str], said: str, runs_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-w on `runs get` or `runs resume`, or a watch of the local engine's records ($HEALER_CONFIG's runs):
    the one line that says why, exit 64, not argparse's whole usage block above it."""
    assert main(argv) == EXIT_USAGE
    assert one_line(capsys.readouterr().err).startswith(said)


@pytest.fixture
def runs_home(no_kube: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$HEALER_CONFIG: the example config with its run records in tmp_path."""
    from tests.conftest import example_config_document

    document = example_config_document()
    document["rollback"] = {"state_dir": str(tmp_path / "runs")}
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    monkeypatch.setenv("HEALER_CONFIG", str(config))
    return config


# ---- Triton: a refused connection is `error` (nothing learnt), as the README says -------------------------


@pytest.mark.triton
def test_a_triton_that_refuses_is_an_error_in_one_line_not_a_liveness_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real tritonserver serves linear_scorer and `healer probe` passes; stopped, the same address
    refuses: one line naming it and the cause, no table on stdout, exit 2 (inconclusive: retry later,
    do not act), never a table with liveness FAIL and version `v-`; with -o json every tier `error`."""
    import shutil

    from healer.edges.embedded import EmbeddedTriton
    from tests.conftest import EXAMPLES, example_config_document

    repository = tmp_path / "repository"
    shutil.copytree(EXAMPLES / "model_repository" / "linear_scorer", repository / "linear_scorer")
    server = EmbeddedTriton(repository, load_models=["linear_scorer"], workdir=tmp_path / "triton")
    document = example_config_document()
    document["models"] = [m for m in document["models"] if m["name"] == "linear_scorer"]
    config = tmp_path / "healer.yaml"
    try:
        server.start()
        document["triton"] = {"url": server.url, "timeout_s": 5.0}
        config.write_text(yaml.safe_dump(document))
        assert main(["probe", "--config", str(config)]) == 0
        [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("linear_scorer")]
        assert row.split()[:5] == ["linear_scorer", "2", "pass", "pass", "pass"]
    finally:
        server.stop()
    for output in ([], ["-o", "json"]):
        assert main(["probe", "--config", str(config), *output]) == 2
        captured = capsys.readouterr()
        # -o json: the result for a script, every tier `error` (tests/cli/test_cli_probe_unreached.py)
        assert captured.out == "" if not output else {r["status"] for r in json.loads(captured.out)} == {"error"}
        assert captured.err == (
            f"healer: error: cannot reach Triton at {server.url}: connection refused; nothing learnt, every tier "
            "is `error` (is Triton running there?)\n"
        )


@pytest.mark.subprocess
def test_status_watch_says_a_lost_api_server_once_and_exits_130_on_ctrl_c(no_kube: Path, tmp_path: Path) -> None:
    """The installed command, as a person runs it: the view, then the API server goes away: one line
    on stderr (not one per 2 s round), the watch goes on; Ctrl-C (SIGINT) ends it with 130."""
    import os
    import queue
    import signal
    import socket
    import subprocess
    import sys
    import time

    server = RecordingApiServer(pods=[], workflows=[]).__enter__()
    config = kubeconfig(tmp_path / "kc.yaml", server.url)
    healer = str(Path(sys.executable).parent / "healer")
    process = subprocess.Popen(
        [healer, "status", "-w", "--kubeconfig", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=as_a_shell_starts_it,  # noqa: PLW1509 (two C-level calls, see there)
    )
    lines: queue.Queue[tuple[str, str]] = queue.Queue()

    def pump(name: str, stream: Any) -> None:
        for line in stream:
            lines.put((name, line))

    for name, stream in (("out", process.stdout), ("err", process.stderr)):
        threading.Thread(target=pump, args=(name, stream), daemon=True).start()

    def until(wanted: str, stream: str, timeout_s: float = 60.0) -> list[tuple[str, str]]:
        seen, deadline = [], time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                seen.append(lines.get(timeout=0.5))
            except queue.Empty:
                continue
            if seen[-1][0] == stream and wanted in seen[-1][1]:
                return seen
        raise AssertionError(f"no {wanted!r} on {stream} within {timeout_s} s: {seen}")

    try:
        until("(every 2 s; Ctrl-C ends)", "out")
        server.__exit__(None, None, None)  # the API server goes away: its port now refuses
        # ... and keeps refusing: a socket bound there without listen() refuses every connection, and no
        # other test's server (pytest-xdist's other worker) can take the freed port and answer, or hang.
        port_keeper = socket.socket()
        port_keeper.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        port_keeper.bind(("127.0.0.1", server.server.server_address[1]))
        until("cannot reach the Kubernetes API server", "err")
        time.sleep(5.0)  # two more 2 s rounds, both failing the same way
        masks = signal_masks(process.pid)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130, masks
    finally:
        process.kill()
        process.wait(timeout=30)
        server.__exit__(None, None, None)
        if "port_keeper" in locals():
            port_keeper.close()
    later = []
    while not lines.empty():
        later.append(lines.get())
    assert not [line for stream, line in later if stream == "err" and "cannot reach" in line], later
    assert not [line for stream, line in later if "Traceback" in line], later


def test_a_refused_argo_server_is_one_line_for_rollback_release_and_check(
    no_kube: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With rollback.engine argo and argo-server's port refusing: one line naming it, nothing submitted."""
    from tests.conftest import example_config_document

    host = f"https://127.0.0.1:{free_port()}"
    document = example_config_document()
    document["rollback"] = {"engine": "argo", "argo": {"host": host, "namespace": "ml"}, "state_dir": str(tmp_path)}
    document["triton"] = {"url": f"127.0.0.1:{free_port()}", "timeout_s": 1.0}
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    assert main(["rollback", "--config", str(config), "linear_scorer", "3"]) == EXIT_REFUSED
    assert one_line(capsys.readouterr().err) == (
        f"healer: error: cannot reach argo-server at {host}: connection refused; rollback not submitted"
    )
    assert main(["release", "--config", str(config), "linear_scorer", "3", "--release", "rel-1"]) == EXIT_REFUSED
    assert one_line(capsys.readouterr().err) == (
        f"healer: error: cannot reach argo-server at {host}: connection refused; release rel-1 not submitted"
    )
    assert main(["check", "--config", str(config)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert f"FAILED argo-server: {host}: cannot reach it: connection refused (certificate checked against" in lines[1]
    assert lines[3].endswith("not reachable (connection refused)")
