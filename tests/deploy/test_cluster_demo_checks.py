"""`make cluster-demo`'s up-front checks (e2e/cluster/demo.sh check): a missing requirement stops it in
the first seconds with one line naming what is missing and how to install it, and a non-zero exit.

Real runs of the script with a PATH that lacks the tool (a folder of links to everything else on
PATH), as a machine without the Debian package would be; nothing is started. The state folder is the
test's own, so a demo running on this machine is neither seen nor touched.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "e2e" / "cluster" / "demo.sh"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the checks after the root check need root")


def path_without(tmp_path: Path, *names: str) -> str:
    """A PATH of one folder linking every program on the real PATH but NAMES (the first of each name)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = folder / entry.name
            if entry.name in names or link.exists() or not os.access(entry.path, os.X_OK):
                continue
            link.symlink_to(entry.path)
    return str(folder)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def check(tmp_path: Path, path: str | None = None, **env: str) -> tuple[int, list[str], float]:
    """Run demo.sh check; its exit code, its stderr lines and how long it took."""
    environment = {
        **os.environ,
        "HEALER_DEMO_DIR": str(tmp_path / "demo"),
        "HEALER_DEMO_ARGO_PORT": str(free_port()),
        "HEALER_DEMO_API_PORT": str(free_port()),
        **env,
    }
    if path is not None:
        environment["PATH"] = path
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(DEMO), "check"], env=environment, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout == ""
    return done.returncode, done.stderr.splitlines(), time.monotonic() - started


def skip_unless_the_node_packages_are_here(tmp_path: Path) -> None:
    """The exact line of a check that removes some tools holds only where every other Debian package of
    the node is installed (.ci/run installs them before make test; a developer's machine may lack them)."""
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    _, lines, _ = check(baseline)
    parts = lines[0].removeprefix("cluster-demo: ").split("; ") if lines else []
    lacking = [part for part in parts if "apt-get install" in part and "nodejs" not in part]
    if lacking:
        pytest.skip(f"this machine lacks some of the node's Debian packages: {lacking[0]}")


@needs_root
def test_a_missing_debian_tool_is_one_line_naming_it_and_its_package(tmp_path: Path) -> None:
    skip_unless_the_node_packages_are_here(tmp_path)
    code, lines, seconds = check(tmp_path, path_without(tmp_path, "runc", "buildah"))
    assert code == 3
    assert len(lines) == 1, lines
    # Node.js may follow ("; missing Node.js ...") where Argo's UI is not built yet
    assert lines[0].startswith("cluster-demo: missing runc, buildah (apt-get install buildah runc)"), lines
    assert seconds < 30  # in the first seconds: nothing is built or started before the checks


@needs_root
def test_missing_go_says_which_version_and_where_from(tmp_path: Path) -> None:
    skip_unless_the_node_packages_are_here(tmp_path)
    code, lines, _ = check(
        tmp_path, path_without(tmp_path, "go"), HEALER_E2E_CACHE=str(tmp_path / "cache"), HEALER_GO_DIR="/nonexistent"
    )
    assert code == 3
    assert len(lines) == 1, lines
    assert lines[0].startswith("cluster-demo: missing Go >= 1.26"), lines
    assert "none on PATH nor in /nonexistent; https://go.dev/doc/install" in lines[0]


def go_dir() -> str:
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go here")
    return os.path.dirname(os.path.realpath(go))


@needs_root
def test_go_outside_sudos_path_is_found_where_its_installer_puts_it(tmp_path: Path) -> None:
    code, lines, _ = check(
        tmp_path, path_without(tmp_path, "go"), HEALER_E2E_CACHE=str(tmp_path / "cache"), HEALER_GO_DIR=go_dir()
    )
    assert not any("Go" in line for line in lines), lines
    assert code == 0 or "missing" in lines[0], lines  # only a requirement this machine lacks stops it


@needs_root
def test_no_go_is_needed_when_every_upstream_binary_is_cached(tmp_path: Path) -> None:
    """A cache holding every file the builds make from the Go module proxy (empty stand-ins: not run)."""
    cache = tmp_path / "cache"
    versions = dict(
        line.split("=", 1) for line in (ROOT / "e2e" / "versions.env").read_text().splitlines() if "=" in line
    )
    coredns_hash = hashlib.sha256((DEMO.parent / "coredns" / "main.go").read_bytes()).hexdigest()[:12]
    files = [
        f"etcd-{versions['ETCD_VERSION']}/bin/etcd",
        f"kubernetes-{versions['KUBERNETES_VERSION']}/bin/kube-apiserver",
        f"argo-{versions['ARGO_VERSION']}/bin/argo",
        f"argo-{versions['ARGO_VERSION']}/bin/workflow-controller",
        f"helm-{versions['HELM_VERSION']}/bin/helm",
        f"otelcol-{versions['OTELCOL_VERSION']}/bin/otelcol-healer",
        f"argoexec-{versions['ARGO_VERSION']}/bin/argoexec",
        f"coredns-{versions['COREDNS_VERSION']}-{coredns_hash}/bin/coredns",
        f"argo-ui-{versions['ARGO_VERSION']}/app/index.html",
        f"crds-cert-manager-{versions['CERT_MANAGER_VERSION']}-prometheus-operator-"
        f"{versions['PROMETHEUS_OPERATOR_VERSION']}/.complete",
        *(
            f"kubernetes-node-{versions['KUBERNETES_VERSION']}/bin/{name}"
            for name in ("kubelet", "kube-scheduler", "kube-controller-manager", "kube-proxy", "kubectl")
        ),
    ]
    for name in files:
        (cache / name).parent.mkdir(parents=True, exist_ok=True)
        (cache / name).touch(mode=0o755)
    path = path_without(tmp_path, "go")
    code, lines, _ = check(tmp_path, path, HEALER_E2E_CACHE=str(cache), HEALER_GO_DIR="/none")
    assert not any("Go" in line for line in lines), lines
    assert code == 0 or "missing" in lines[0], lines
    (cache / files[0]).unlink()  # one missing: Go is needed again
    code, lines, _ = check(tmp_path, path, HEALER_E2E_CACHE=str(cache), HEALER_GO_DIR="/none")
    assert code == 3 and "missing Go >= " in lines[0], lines


@needs_root
def test_a_port_in_use_names_it_and_the_setting_that_moves_it(tmp_path: Path) -> None:
    if check(tmp_path)[0] == 3:
        pytest.skip("a requirement is missing here: the port check comes after it")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code, lines, _ = check(tmp_path, HEALER_DEMO_ARGO_PORT=str(port))
    assert code == 3
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"cluster-demo: port {port} on 127.0.0.1 is in use"), lines
    assert lines[0].endswith("free it, or set HEALER_DEMO_ARGO_PORT to a free one"), lines


def test_not_root_is_one_line(tmp_path: Path) -> None:
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to run the check as another user")
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    done = subprocess.run(
        [*[str(part) for part in prefix], "bash", str(DEMO), "check"],
        env={**os.environ, "HEALER_DEMO_DIR": str(tmp_path / "demo"), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "cluster-demo: needs root (network and mount namespaces, cgroups, containerd): run it with sudo"
    ]


def test_an_unknown_command_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(DEMO), "start"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "HEALER_DEMO_DIR": str(tmp_path / "demo")},
    )
    assert done.returncode == 64
    assert done.stderr.splitlines() == ["cluster-demo: usage: demo.sh check|up|down"]


def certificate(pki: Path, not_before: str, not_after: str) -> None:
    """pki/apiserver.crt valid from NOT_BEFORE to NOT_AFTER (YYYYMMDDHHMMSSZ), self-signed by `openssl ca`."""
    pki.mkdir(parents=True)
    (pki / "index.txt").touch()
    (pki / "ca.cnf").write_text(
        "[ca]\ndefault_ca=d\n[d]\ndatabase=index.txt\nserial=serial\npolicy=p\ndefault_md=sha256\n[p]\ncommonName=supplied\n"
    )

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True, timeout=60)

    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "apiserver.key")
    openssl("req", "-new", "-key", "apiserver.key", "-subj", "/CN=kube-apiserver", "-out", "apiserver.csr")
    openssl(
        *("ca", "-batch", "-selfsign", "-config", "ca.cnf", "-keyfile", "apiserver.key", "-in", "apiserver.csr"),
        *("-startdate", not_before, "-enddate", not_after, "-outdir", ".", "-create_serial", "-out", "apiserver.crt"),
    )


def up(tmp_path: Path) -> tuple[int, list[str]]:
    """demo.sh up on the test's own state folder; its exit code and stderr lines."""
    environment = {**os.environ, "HEALER_DEMO_DIR": str(tmp_path / "demo")}
    done = subprocess.run(
        ["bash", str(DEMO), "up"], env=environment, capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, done.stderr.splitlines()


@needs_root
def test_a_running_demo_whose_certificates_expired_says_so_and_what_to_do(tmp_path: Path) -> None:
    certificate(tmp_path / "demo" / "pki", "20200101000000Z", "20200102000000Z")
    (tmp_path / "demo" / "demo-ready").touch()
    code, lines = up(tmp_path)
    assert code == 1
    assert lines == [
        "cluster-demo: up, but its certificates expired on Jan  2 00:00:00 2020 GMT (the API server and the kubelet "
        "refuse them): make cluster-down && make cluster-demo"
    ], lines


@needs_root
def test_a_running_demo_whose_certificates_expire_this_week_is_warned(tmp_path: Path) -> None:
    soon = time.strftime("%Y%m%d%H%M%SZ", time.gmtime(time.time() + 2 * 86400))
    certificate(tmp_path / "demo" / "pki", "20200101000000Z", soon)
    (tmp_path / "demo" / "demo-ready").touch()
    code, lines = up(tmp_path)
    assert code == 1  # no relay runs for this made-up demo: the next check stops it
    assert lines[0].startswith("cluster-demo: its certificates expire on "), lines
    assert lines[0].endswith(": make cluster-down && make cluster-demo before then"), lines
    assert "relay" in lines[1], lines


def test_the_demos_certificates_last_a_year_the_tiers_two_days() -> None:
    for script in ("node-up.sh", "common.sh"):  # the CA, and leaf() for every other certificate
        text = (DEMO.parent / script).read_text()
        assert '-days "$CERT_DAYS"' in text and "-days 2" not in text, script
    environment = {**os.environ, "HEALER_NODE_DIR": "/nonexistent"}
    shown = "source e2e/cluster/common.sh && echo $CERT_DAYS"
    demo = f"eval \"$(grep '^export HEALER_NODE_DIR' {DEMO})\" && {shown}"
    days = [
        subprocess.run(
            ["bash", "-c", command], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60, check=True
        ).stdout.strip()
        for command in (shown, demo)
    ]
    assert days == ["2", "365"]


@needs_root
def test_a_second_demo_starting_installs_nothing_before_it_holds_the_lock(tmp_path: Path) -> None:
    if check(tmp_path)[0] == 3:
        pytest.skip("a requirement is missing here: up stops at it before the lock")
    stamp = tmp_path / "stamp"  # no rule makes it: a make run for it would fail, loudly
    with (DEMO.parent / "run.sh").open() as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a starting make cluster(-demo) holds it
        done = subprocess.run(
            ["bash", str(DEMO), "up"],
            env={
                **os.environ,
                "HEALER_DEMO_DIR": str(tmp_path / "demo"),
                "HEALER_DEMO_ARGO_PORT": str(free_port()),
                "HEALER_DEMO_API_PORT": str(free_port()),
                "DEMO_STAMP": str(stamp),
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["cluster-demo: make cluster is running here: not started beside it"]
    assert not (tmp_path / "demo").exists()


@needs_root
def test_the_venv_is_installed_as_the_checkouts_owner_not_root(tmp_path: Path) -> None:
    """demo.sh up in a copy of its scripts whose checkout belongs to nobody: the stamp make builds
    (a Makefile rule writing who ran it) is made as nobody; the steps after it are not in the copy."""
    if check(tmp_path)[0] == 3:
        pytest.skip("a requirement is missing here: up stops at it before the install")
    checkout = Path(tempfile.mkdtemp(prefix="healer-demo-checkout-"))  # not under pytest's root-only folder
    try:
        for name in ("e2e/common.sh", "e2e/versions.env", "e2e/cluster/coredns/main.go"):
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, checkout / name)
        for name in ("demo.sh", "steps.sh", "common.sh", "run.sh"):
            shutil.copy(DEMO.parent / name, checkout / "e2e" / "cluster" / name)
        (checkout / "Makefile").write_text("stamp:\n\tmkdir -p .venv && id -un >.venv/stamp\n")
        subprocess.run(["chown", "-R", "65534:65534", str(checkout)], check=True, timeout=60)
        checkout.chmod(0o755)
        done = subprocess.run(
            ["bash", str(checkout / "e2e" / "cluster" / "demo.sh"), "up"],
            env={
                **os.environ,
                "HEALER_DEMO_DIR": str(tmp_path / "demo"),
                "HEALER_DEMO_ARGO_PORT": str(free_port()),
                "HEALER_DEMO_API_PORT": str(free_port()),
                "DEMO_STAMP": "stamp",
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode != 0  # e2e/build.sh is not in the copy
        nobody = (checkout / ".venv" / "stamp").read_text().strip()
        assert nobody != "root" and (checkout / ".venv").stat().st_uid == 65534, done.stderr
    finally:
        shutil.rmtree(checkout)


@needs_root
def test_the_summary_names_the_drills_heal_not_the_newest_workflow(tmp_path: Path) -> None:
    """A running demo (made up: a valid certificate, a live "relay"): its summary names the workflow
    drill-argo.sh recorded, though the API server (there is none) would list an hourly stage run newer."""
    demo = tmp_path / "demo"
    certificate(demo / "pki", "20200101000000Z", "20991231000000Z")
    (demo / "demo-ready").touch()
    (demo / "drill-argo.json").write_text(json.dumps({"runs": [{"workflow": "healer-rollback-wrong-weights-7"}]}))
    (demo / "pids").mkdir()
    with subprocess.Popen(["sleep", "60"]) as relay:
        try:
            (demo / "pids" / "relay").write_text(f"{relay.pid}\n")
            done = subprocess.run(
                ["bash", str(DEMO), "up"],
                env={**os.environ, "HEALER_DEMO_DIR": str(demo)},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            relay.kill()
    assert done.returncode == 0, done.stderr
    assert "  the heal    healer-rollback-wrong-weights-7: the drill's wrong-weights push" in done.stdout
    assert "runs get healer-rollback-wrong-weights-7 -o wide" in done.stdout
