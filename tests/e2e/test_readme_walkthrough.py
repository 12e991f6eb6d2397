"""The README walked as a newcomer walks it: a fresh clone of HEAD, then every command of its Quickstart
and Commands sections in one shell, in the README's order (so `source` and `export` carry over), each
with its exit code checked; the laptop-on-a-cluster commands against this tier's real kube-apiserver.

Every command the README writes is either run (as written, or with its UPPERCASE placeholders filled
in: RAN_AS says with what) or listed in NOT_RUN with the reason; a command in neither fails the test,
and so does an entry that names a command the README no longer has. About 9 minutes (8 min 51 s on 2 busy
cores): the quickstart's `make demo` installs .venv in the clone and runs the drill catalog.

Under `make e2e` the tier runs in a network namespace with loopback only: pip installs the clone's .venv
from the wheelhouse e2e/run.sh downloads before entering it (PIP_NO_INDEX, PIP_FIND_LINKS: a mirror, as
far as the commands can tell); run outside one, pip uses the machine's index as a newcomer's would.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.edges.embedded import EmbeddedTriton
from healer.settings import load_settings
from tests.e2e.control_plane import ControlPlane
from tools import walkthrough

pytestmark = pytest.mark.e2e

MAKE_DEMO_RECIPE = "$(BIN)/healer demo --config examples/healer.yaml --drills --report .healer/demo-report.html"

# README command (its comment left out, spaces collapsed) -> what the shell runs ("{name}": the last run
# name the session printed). Commands not here and not in NOT_RUN run exactly as written.
RAN_AS = {
    "healer runs get NAME --config examples/healer.yaml": "healer runs get {name} --config examples/healer.yaml",
    "export HEALER_CONFIG=healer.yaml": "export HEALER_CONFIG=examples/healer.yaml",  # your file; here the example
    "healer promote MODEL VERSION": "healer promote linear_scorer 2",
    "healer store list [MODEL] [-o wide|name|json|yaml]": "healer store list linear_scorer -o wide",
    "healer store doctor MODEL [--release-lease|--repair --reason TEXT]": "healer store doctor linear_scorer",
    "healer store unquarantine MODEL VERSION --reason TEXT": "healer store unquarantine linear_scorer 2 --reason x",
    "healer rollback MODEL FROM_VERSION [--quarantine] [-o json]": "healer rollback linear_scorer 2",
    "healer runs list [-o wide|name|json|yaml]": "healer runs list -o wide",
    "healer runs get NAME [-o wide|json|yaml]": "healer runs get {name} -o wide",
    "healer store stage [MODEL]": "healer store stage linear_scorer",
    "healer check [-o json]": "healer check",
    "healer render [--out deploy/argo]": "healer render",
    "healer --version; healer COMMAND --help": "healer --version; healer probe --help",
    "healer status -n ml [-w] [-o wide|json|yaml]": "healer status -n ml -o wide",
    # No kubelet here: the Workflow is created, never run; --wait ends the wait (exit 3: not done in time).
    "healer rollback -n ml MODEL FROM_VERSION": "healer rollback -n ml linear_scorer 3 --wait 3",
    "healer runs list -n ml [--context prod]": "healer runs list -n ml",
    # Watched for 15 s, then Ctrl-C (SIGINT), as a person would (5 s saw nothing on a busy machine: its start
    # and first read took longer).
    "healer runs watch -n ml": "timeout -s INT 15 healer runs watch -n ml",
    "healer runs get NAME -n ml -o wide": "healer runs get {name} -n ml -o wide",
}

NOT_RUN = {
    "healer demo --config examples/healer.yaml --drills --report .healer/demo-report.html": "the quickstart's "
    "`make demo` ran this very command (its recipe is checked to be this line)",
    "healer release --config healer.yaml linear_scorer 3 --approve": "needs your healer.yaml listing the Tritons "
    "to release to and a person to resume the approval; `make demo`'s release drills and "
    "tests/cli/test_cli_release.py run `healer release`",
    "healer webhook --tls-cert F --tls-key F --injection F": "a server that runs until stopped, with your TLS "
    "files; tests/webhook and tests/e2e/test_webhook_e2e.py run it with real certificates",
    "healer drill --config healer.yaml --target cluster -n ml wrong-weights": "needs the chart on a cluster whose "
    "kubelet runs the drill's pods (none here); `make cluster` runs it (e2e/cluster/drill-template.sh)",
}

# The exit code each command must end with (0 unless said): what the README's exit-code table promises.
EXITS = {
    "healer store unquarantine MODEL VERSION --reason TEXT": 1,  # not quarantined: nothing lifted
    "healer status -n ml [-w] [-o wide|json|yaml]": 1,  # the pod with a sidecar is Pending (no kubelet)
    "healer rollback -n ml MODEL FROM_VERSION": 3,  # created, not done within --wait
    "healer runs watch -n ml": 124,  # timeout's code: it was still watching
}
# What each must have printed, besides its exit code.
PRINTS = {
    "make demo": "scenarios passed",
    "healer runs list --config examples/healer.yaml": "healer-rollback-",
    "healer probe --config examples/healer.yaml": "linear_scorer",
    "healer status -n ml [-w] [-o wide|json|yaml]": "ml/walkthrough-triton",
    "healer runs watch -n ml": "healer-rollback-linear-scorer-",
    "healer runs get NAME -n ml -o wide": "healer-rollback-linear-scorer-",
}
TIMEOUTS = {"make demo": 1800.0, "healer drill --config examples/healer.yaml wrong-weights hang -o json": 600.0}


def pip_settings() -> dict[str, str]:
    """Inside the tier's network namespace: the wheelhouse e2e/run.sh filled, and no index."""
    if os.environ.get("HEALER_E2E_ISOLATED") != "1":
        return {}
    cache = Path(os.environ.get("HEALER_E2E_CACHE") or Path.home() / ".cache" / "healer-e2e")
    wheelhouse = cache / "wheelhouse"
    if not any(wheelhouse.glob("setuptools-*.whl")):
        pytest.fail(f"no wheels in {wheelhouse}: e2e/run.sh downloads them before the tier (needs the index)")
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse)}


def sample_holds(readme: str, printed: str) -> list[str]:
    """The README's sample of `make demo`'s output, against what it printed here: each line of the sample
    without a figure in it (the header, the closing commands) must be one it printed."""
    match = re.search(r"<!-- figures:demo-sample -->\n```\n(.*?)\n```", readme, re.DOTALL)
    assert match, "README.md has no demo-sample block"
    lines = set(printed.splitlines())
    return [line for line in match[1].splitlines() if line and not re.search(r"\d", line) and line not in lines]


def key(command: str) -> str:
    return " ".join(walkthrough.without_comment(command).split())


@pytest.fixture
def triton_at_triton_url() -> Iterator[Callable[[Path], None]]:
    """Starts a real Triton where examples/healer.yaml's triton.url points (127.0.0.1:8000), over the
    clone's example repository, before the Commands section (its probes need one); stopped at the end."""

    class AtTritonUrl(EmbeddedTriton):
        def _allocate_ports(self) -> None:
            self.http_port, self.metrics_port = 8000, 8002

    started: list[EmbeddedTriton] = []

    def start(repository: Path) -> None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", 8000)) == 0:
                pytest.fail("127.0.0.1:8000 is taken: the README's commands need it for Triton (run under make e2e)")
        # every model examples/healer.yaml configures (an ensemble's members come with it), as a user's
        # Triton serving the example repository would: healer probe judges them all
        configured = [m.name for m in load_settings(repository.parent / "healer.yaml").models]
        triton = AtTritonUrl(repository, load_models=configured)
        started.append(triton)
        triton.start()

    yield start
    for triton in started:
        triton.cleanup()


@pytest.fixture
def kubeconfig(
    control_plane: ControlPlane, rollback_template: dict[str, Any], operator_token: str, tmp_path: Path
) -> Path:
    """An operator's kubeconfig for this tier's API server; a Triton pod with a sidecar in ml (Pending: no kubelet)."""
    sidecar = {"name": "healer", "image": "healer:dev", "ports": [{"name": "healer", "containerPort": 8080}]}
    control_plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "walkthrough-triton"},
                "spec": {"containers": [{"name": "triton", "image": "triton:dev"}, sidecar]},
            }
        ],
        namespace="ml",
    )
    path = tmp_path / "kubeconfig"
    cluster = {"server": control_plane.url, "certificate-authority": str(control_plane.pki.ca)}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "e2e", "cluster": cluster}],
                "users": [{"name": "operator", "user": {"token": operator_token}}],
                "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "operator", "namespace": "ml"}}],
                "current-context": "e2e",
            }
        )
    )
    return path


def test_every_command_of_the_quickstart_and_commands_section_on_a_fresh_clone(
    tmp_path: Path, kubeconfig: Path, triton_at_triton_url: Callable[[Path], None]
) -> None:
    clone = tmp_path / "healer"
    cloned = walkthrough.fresh_clone(clone)
    assert cloned.exit == 0, cloned.text
    readme = (clone / "README.md").read_text()
    quickstart = walkthrough.commands(readme, walkthrough.QUICKSTART)
    reference = walkthrough.commands(readme, walkthrough.COMMANDS)
    written = {key(c) for c in quickstart + reference}
    assert not set(NOT_RUN) & set(RAN_AS), "a command is both run and not run"
    stale = sorted((set(RAN_AS) | set(NOT_RUN) | set(EXITS) | set(PRINTS)) - written)
    assert not stale, f"listed here, not in README.md any more: {stale}"
    assert MAKE_DEMO_RECIPE in (clone / "Makefile").read_text(), "make demo's recipe is not the README's demo line"

    env = walkthrough.newcomer_env(tmp_path / "home") | pip_settings() | {"KUBECONFIG": str(kubeconfig)}
    (tmp_path / "home").mkdir()
    with walkthrough.ShellSession(clone, env) as shell:
        name = ""
        for command in quickstart + reference:
            k = key(command)
            if k in NOT_RUN:
                continue
            if k == key(reference[0]):
                triton_at_triton_url(clone / "examples" / "model_repository")
            ran = RAN_AS[k].format(name=name) if k in RAN_AS else walkthrough.without_comment(command)
            step = shell.run(command, ran=ran, timeout_s=TIMEOUTS.get(k, 180.0))
            print(f"$ {ran}  -> exit {step.exit} in {step.seconds:.1f} s")  # shown with -s
            assert step.exit == EXITS.get(k, 0), f"`{ran}` exited {step.exit}:\n{step.text[-3000:]}"
            assert PRINTS.get(k, "") in step.text, f"`{ran}` did not print {PRINTS[k]!r}:\n{step.text[-3000:]}"
            if k == "make demo":
                assert not sample_holds(readme, step.text), (
                    f"README's sample, not printed: {sample_holds(readme, step.text)}"
                )
            # The walkthrough's own model's runs: the tier's API server also lists other tests' workflows
            # (e2e_join's, still Pending), which `runs get` would show without this name in them.
            found = re.findall(r"healer-rollback-linear-scorer-[a-z0-9]+", step.text)
            name = found[-1] if found else name
            if k == key("healer drill --config examples/healer.yaml wrong-weights hang -o json"):
                data = step.text[step.text.index("\n[\n") + 1 :]
                results, _ = json.JSONDecoder().raw_decode(data)
                assert [(r["scenario"], r["passed"]) for r in results] == [("wrong-weights", True), ("hang", True)]
