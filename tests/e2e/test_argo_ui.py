"""The Argo UI, seen: Argo's own web UI (built from Argo's module by e2e/build.sh and embedded in
argo-server) in headless Chromium, on three rollbacks submitted through the ArgoEngine as the
sidecar submits them (its token, the shipped Role).

- one that succeeded: its heal pod is driven Running, then Succeeded, with the heal step's outputs
  in a WorkflowTaskResult, which is what argoexec's wait container writes for a real step;
- one failed at the deadline: its heal pod never runs; past activeDeadlineSeconds the controller
  fails it and starts the exit handler, whose escalate pod is driven to Succeeded with the alert
  text built by healer's own build_alert;
- one joined: submitted twice (two sidecars saw the same incident), one workflow, its heal pod
  Running when the pictures are taken.

No kubelet runs here, so the test does the kubelet's part (pod status) and the wait container's
(the task result): no container ever runs, and the step code and its real outputs are not
exercised. What is real: Argo's controller walking the nodes through their phases, argo-server in
client auth mode, and the UI that a person opens, with the list columns and links from
deploy/argo/workflow-controller-configmap.yaml. Screenshots go to docs/screenshots/ with
HEALER_UPDATE_SCREENSHOTS=1, else to a temporary folder.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import fcntl
import json
import os
import re
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.core.state import incident_key
from healer.edges.alerts import build_alert
from healer.engines.argo import ArgoEngine, title
from healer.vocabulary import RollbackRequest
from tests.e2e.control_plane import ROOT, TRACE_LINK, ControlPlane, versions, wait_for
from tests.support.browser import CHROMIUM, HEADLESS
from workflows.kit import parse_failures
from workflows.rollback import RUNBOOK_BASE_URL, argo_ui_config
from workflows.steps import PHASES, PhaseReport

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"),
]


# The README's screenshots are rewritten only when asked (HEALER_UPDATE_SCREENSHOTS=1 make e2e): every
# run's timestamps differ, and a test run must not leave the checkout modified.
@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go: pytest's own temporary folder (pruned by pytest, and made only when a
    test runs: a folder made at import was left behind by every collection), or the README's."""
    if os.environ.get("HEALER_UPDATE_SCREENSHOTS") == "1":
        return ROOT / "docs" / "screenshots"
    return tmp_path_factory.mktemp("argo-ui")


TEMPLATE = yaml.safe_load((ROOT / "deploy" / "argo" / "healer-rollback.yaml").read_text())
DEADLINE_S = int(TEMPLATE["spec"]["activeDeadlineSeconds"])
WORKFLOWS = "/apis/argoproj.io/v1alpha1/namespaces/ml/workflows"
VIEWPORT = (1920, 1080)  # a common screen: the list's columns, including the two healer adds, fit


def request_for(model: str, version: str, reason: str, detail: str, traceparent: str = "") -> RollbackRequest:
    """What the sidecar submits (healer/sidecar/loop.py _request): the incident key from healer.core.state."""
    return RollbackRequest(
        model=model,
        from_version=version,
        incident=incident_key(model, version, detail),
        reason=reason,
        detail=detail,
        pod="ml/triton-0",
        traceparent=traceparent,
    )


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"  # the incident's trace, as a traced sidecar would send it


SUCCEEDED = request_for(
    "fraud_scorer", "4", "wrong-answer",
    "output 'SCORE': 2/2 values off; worst [0,0] expected 7.1 got 12.1 (|error| 5 > allowed 0.00171)",
)  # fmt: skip
DEADLINE = request_for(
    "ranker",
    "9",
    "non-finite",
    "output 'LOGITS': 16/16 values are NaN",
    traceparent=f"00-{TRACE_ID}-00f067aa0ba902b7-01",
)
JOINED = request_for("text_embedder", "2", "model-error", "inference failed: [StatusCode.INTERNAL] onnxruntime error")
ROLLBACKS = (SUCCEEDED, DEADLINE, JOINED)


# ---- the kubelet's and the wait container's parts (nothing runs pods here) ------------------------------


def workflow(plane: ControlPlane, name: str) -> dict[str, Any]:
    found: dict[str, Any] = plane.api().get(f"{WORKFLOWS}/{name}")
    return found


def node_named(plane: ControlPlane, name: str, display_name: str) -> dict[str, Any] | None:
    nodes = (workflow(plane, name).get("status") or {}).get("nodes") or {}
    return next((n for n in nodes.values() if n.get("displayName") == display_name), None)


def pod_of(plane: ControlPlane, name: str, display_name: str) -> dict[str, Any]:
    """The pod the controller created for a node (found by the node-id annotation Argo sets)."""

    def found() -> dict[str, Any] | None:
        node = node_named(plane, name, display_name)
        if node is None:
            return None
        selector = urllib.parse.quote(f"workflows.argoproj.io/workflow={name}")
        pods = plane.api().get(f"/api/v1/namespaces/ml/pods?labelSelector={selector}")["items"]
        return next(
            (p for p in pods if p["metadata"]["annotations"].get("workflows.argoproj.io/node-id") == node["id"]), None
        )

    pod: dict[str, Any] = wait_for(found, timeout_s=90, what=f"the pod of {name}/{display_name}")
    return pod


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _statuses(pod: dict[str, Any], state: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    def status(container: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": "running" in state,
            "restartCount": 0,
            "started": "running" in state,
            "state": state,
        }

    done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": _now(), "finishedAt": _now()}}
    return {
        "initContainerStatuses": [
            dict(status(c), state=done, ready=False) for c in pod["spec"].get("initContainers", [])
        ],
        "containerStatuses": [status(c) for c in pod["spec"]["containers"]],
    }


def kubelet_starts(plane: ControlPlane, pod: dict[str, Any]) -> None:
    """What the kubelet reports once the pod's containers run."""
    status = {"phase": "Running", "startTime": _now(), **_statuses(pod, {"running": {"startedAt": _now()}})}
    plane.api().patch(f"/api/v1/namespaces/ml/pods/{pod['metadata']['name']}/status", {"status": status})


def kubelet_finishes(plane: ControlPlane, pod: dict[str, Any]) -> None:
    """What the kubelet reports once every container exited 0."""
    terminated = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": _now(), "finishedAt": _now()}}
    status = {"phase": "Succeeded", **_statuses(pod, terminated)}
    plane.api().patch(f"/api/v1/namespaces/ml/pods/{pod['metadata']['name']}/status", {"status": status})


def wait_container_reports(plane: ControlPlane, name: str, pod: dict[str, Any], outputs: dict[str, str]) -> None:
    """What argoexec's wait container writes when the step ends: a WorkflowTaskResult named after the
    node, with its output parameters (the controller holds a step with declared outputs until then)."""
    node_id = pod["metadata"]["annotations"]["workflows.argoproj.io/node-id"]
    result = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTaskResult",
        "metadata": {
            "name": node_id,
            "labels": {
                "workflows.argoproj.io/workflow": name,
                "workflows.argoproj.io/report-outputs-completed": "true",
            },
        },
        "outputs": {"parameters": [{"name": k, "value": v} for k, v in outputs.items()], "exitCode": "0"},
    }
    plane.api().post("/apis/argoproj.io/v1alpha1/namespaces/ml/workflowtaskresults", result)


def heal_outputs(request: RollbackRequest, to_version: str) -> dict[str, str]:
    """The heal step's output parameters in the shape it writes them (workflows/rollback.py heal_step):
    one PhaseReport per phase, all ok. Values made up by the test; their shape is the step's."""
    phases = [
        dataclasses.asdict(PhaseReport(name=p, started_at=_now(), finished_at=_now(), outcome="ok")) for p in PHASES
    ]
    return {
        "phases": json.dumps(phases, sort_keys=True),
        "to-version": to_version,
        "files": json.dumps({"model.onnx": "sha256:" + "0" * 64}),
        "golden": json.dumps({"passed": True}),
    }


def escalate_failure(plane: ControlPlane, name: str) -> str:
    """The failure line escalate_step writes, from the inputs Argo gave the escalate node."""
    node = node_named(plane, name, "escalate")
    assert node is not None
    inputs = {p["name"]: p.get("value", "") for p in node["inputs"]["parameters"]}
    failures = parse_failures(inputs["failures"])
    steps = "; ".join(f"{f.get('displayName', '?')}: {f.get('message', '')}" for f in failures)
    return f"workflow {inputs['workflow_status']}" + (f": {steps}" if steps else "")


# ---- the three rollbacks ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rollbacks:
    names: dict[str, str]  # model -> workflow name
    joined_second_created: bool


@pytest.fixture(scope="module")
def rollbacks(
    control_plane: ControlPlane, rollback_template: dict[str, Any], sidecar_token: str
) -> Iterator[Rollbacks]:
    os.environ["REQUESTS_CA_BUNDLE"] = str(control_plane.pki.ca)  # module scope: no monkeypatch fixture
    try:
        with ArgoEngine(
            control_plane.argo_url, "ml", token=sidecar_token, verify_ssl=True, request_timeout_s=10
        ) as argo:
            names = {}
            # First the one that must run into its deadline: the others happen while it waits.
            names[DEADLINE.model] = argo.submit(DEADLINE).name
            names[SUCCEEDED.model] = argo.submit(SUCCEEDED).name

            heal = pod_of(control_plane, names[SUCCEEDED.model], "heal(0)")
            kubelet_starts(control_plane, heal)
            wait_container_reports(control_plane, names[SUCCEEDED.model], heal, heal_outputs(SUCCEEDED, "3"))
            kubelet_finishes(control_plane, heal)
            wait_for(
                lambda: argo.status(names[SUCCEEDED.model]).phase == "Succeeded",
                timeout_s=90,
                what="the succeeded rollback",
            )

            deadline_name = names[DEADLINE.model]
            started = dt.datetime.fromisoformat(workflow(control_plane, deadline_name)["status"]["startedAt"])
            time.sleep(
                max(0.0, (started + dt.timedelta(seconds=DEADLINE_S) - dt.datetime.now(dt.UTC)).total_seconds()) + 2
            )
            # The controller's wake-up at the deadline is lost (see test_controller.py): stand in for
            # its resync by touching the workflow once the deadline has passed.
            control_plane.api().patch(
                f"{WORKFLOWS}/{deadline_name}", {"metadata": {"annotations": {"healer.io/e2e-resync": "1"}}}
            )
            escalate = pod_of(control_plane, deadline_name, "escalate")
            kubelet_starts(control_plane, escalate)
            failure = escalate_failure(control_plane, deadline_name)
            # What Argo passed reaches the alert: which step failed, and why (Argo's own words).
            assert failure.startswith("workflow Failed: ") and "heal(0): Step exceeded its deadline" in failure, failure
            alert = build_alert(
                DEADLINE,
                failure=failure,
                timeline=[],
                runbook_url=RUNBOOK_BASE_URL + "rollback-escalated.md",
                workflow=deadline_name,
            )
            wait_container_reports(control_plane, deadline_name, escalate, {"alert": json.dumps(alert, sort_keys=True)})
            kubelet_finishes(control_plane, escalate)
            wait_for(lambda: argo.status(deadline_name).phase == "Failed", timeout_s=90, what="the failed rollback")

            first = argo.submit(JOINED)
            second = argo.submit(JOINED)  # a second sidecar, the same incident: Argo answers 409, it joins
            assert first.created and second.name == first.name
            names[JOINED.model] = first.name
            kubelet_starts(control_plane, pod_of(control_plane, first.name, "heal(0)"))
            wait_for(
                lambda: node_named(control_plane, first.name, "heal(0)")["phase"] == "Running",  # type: ignore[index]
                timeout_s=60,
                what="the joined rollback's heal step running",
            )
            yield Rollbacks(names, second.created)
    finally:
        os.environ.pop("REQUESTS_CA_BUNDLE", None)


# ---- headless Chromium over the DevTools protocol (on a pipe: no port, no extra package) ---------------


class Browser:
    """Debian's Chromium, driven over ``--remote-debugging-pipe`` (JSON messages ending in NUL on fds
    3 and 4): set the Argo UI's ``authorization`` cookie, open a page, read its DOM, take a screenshot."""

    def __init__(self, profile: Path, *, reachable: str = "127.0.0.1") -> None:
        assert CHROMIUM is not None
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def as_fds_3_and_4() -> None:  # in the child: high copies first, so neither dup2 clobbers the other
            read = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            write = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.process = subprocess.Popen(
            [
                CHROMIUM,
                *HEADLESS,
                f"--user-data-dir={profile}",
                # The test CA is not in Chromium's store; this is argo-server on loopback with the CA made at start.
                "--ignore-certificate-errors",
                f"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE {reachable}",  # nothing else may load
                "--remote-debugging-pipe",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=as_fds_3_and_4,  # noqa: PLW1509 - only fcntl/dup2 before exec
            stdout=subprocess.DEVNULL,
            stderr=(profile.parent / "chromium.log").open("w"),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.console: list[str] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable", session=self.session)
        # As if this person had dismissed the UI's first-visit and what's-new pop-ups before
        # (ui/src/modals/modal-switch.tsx keeps that in localStorage): they would cover the page.
        seen = json.dumps(versions()["ARGO_VERSION"].rsplit(".", 1)[0])
        self.call("Page.addScriptToEvaluateOnNewDocument", session=self.session, source=(
            "localStorage.setItem('modal/ftu', '\"dismissed\"');"
            f"localStorage.setItem('modal/version', {json.dumps(seen)});"
            "localStorage.setItem('modal/feedback', String(Date.now() + 365 * 86400000));"
        ))  # fmt: skip
        width, height = VIEWPORT
        self.call("Emulation.setDeviceMetricsOverride", session=self.session, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)  # fmt: skip

    def call(self, method: str, *, session: str | None = None, timeout_s: float = 30, **params: Any) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            answer = self._read(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self._event(answer)
        raise TimeoutError(f"{method}: no answer within {timeout_s:g} s")

    def _read(self, deadline: float) -> dict[str, Any]:
        import select

        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("Chromium sent nothing")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def _event(self, message: dict[str, Any]) -> None:
        params = message.get("params") or {}
        if message.get("method") == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning"):
            self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif message.get("method") == "Runtime.exceptionThrown":
            self.console.append(str(params["exceptionDetails"].get("exception", {}).get("description")))
        elif message.get("method") == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.console.append(f"{params['entry'].get('url', '')}: {params['entry']['text']}")

    def set_cookie(self, url: str, name: str, value: str) -> None:
        assert self.call("Network.setCookie", session=self.session, url=url, name=name, value=value, secure=True)[
            "success"
        ]

    def open(self, url: str) -> None:
        self.call("Page.navigate", session=self.session, url=url)

    def evaluate(self, expression: str) -> Any:
        answer = self.call("Runtime.evaluate", session=self.session, expression=expression, returnByValue=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def wait_for_text(self, *texts: str, timeout_s: float = 60) -> str:
        """The page's visible text once it shows every one of ``texts`` (the UI renders after its API calls)."""
        deadline = time.monotonic() + timeout_s
        shown = ""
        while time.monotonic() < deadline:
            shown = self.evaluate("document.body ? document.body.innerText : ''") or ""
            if all(text in shown for text in texts):
                time.sleep(1)  # let icons and fonts settle before a screenshot
                return str(self.evaluate("document.body.innerText"))
            time.sleep(0.5)
        missing = [text for text in texts if text not in shown]
        raise AssertionError(f"the page never showed {missing}; it showed:\n{shown[:3000]}\nconsole: {self.console}")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", session=self.session, format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            self.call("Browser.close", timeout_s=10)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture(scope="module")
def browser(
    control_plane: ControlPlane, operator_token: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Browser]:
    """Chromium with the token a person pastes into the UI's login page: the UI keeps it in the
    ``authorization`` cookie (ui/src/shared/cookie.ts) and argo-server (client mode) reads it there."""
    directory = tmp_path_factory.mktemp("chromium")
    chromium = Browser(directory / "profile")
    try:
        chromium.set_cookie(control_plane.argo_url + "/", "authorization", f"Bearer {operator_token}")
        yield chromium
    finally:
        chromium.close()


def rows(browser: Browser) -> list[dict[str, str]]:
    """Each row of the workflow list: its text and HTML."""
    found: list[dict[str, str]] = browser.evaluate(
        "[...document.querySelectorAll('.workflows-list__row-container')]"
        ".map(r => ({text: r.innerText, html: r.innerHTML}))"
    )
    return found


def list_url(plane: ControlPlane) -> str:
    """The UI's workflow list, filtered (its own `label` parameter) to this test's rollbacks."""
    selector = f"healer.io/model in ({','.join(r.model for r in ROLLBACKS)})"
    return f"{plane.argo_url}/workflows/ml?{urllib.parse.urlencode({'label': selector})}"


def test_the_list_shows_each_rollback_with_title_description_model_and_reason(
    control_plane: ControlPlane, rollbacks: Rollbacks, browser: Browser, screenshots: Path
) -> None:
    browser.open(list_url(control_plane))
    browser.wait_for_text(*(title(r) for r in ROLLBACKS), "MODEL", "REASON")
    browser.screenshot(screenshots / "argo-rollback-list.png")

    shown = rows(browser)
    assert len(shown) == len(ROLLBACKS)  # the joined incident is one workflow, one row
    assert rollbacks.joined_second_created is False
    phases = {
        SUCCEEDED.model: "status-icon--success",
        DEADLINE.model: "status-icon--failed",
        JOINED.model: "status-icon--running",
    }
    for request in ROLLBACKS:
        [row] = [r for r in shown if title(request) in r["text"]]
        text = " ".join(row["text"].split())
        # The description, as the list renders its Markdown (on one line): why first, then the
        # model and versions, the incident and the pod.
        for part in (f"{request.reason}: {request.detail}", f"Incident {request.incident}",
                     f"Model {request.model}: v{request.from_version} → newest stable version (auto)",
                     f"Detected by pod {request.pod}"):  # fmt: skip
            assert part in text, (part, text)
        # healer's columns (the ConfigMap's `columns`): the model and the reason, each in its own cell.
        cells = re.findall(r'<div class="columns small-1">([^<]*)</div>', row["html"])
        assert request.model in cells and request.reason in cells, cells
        assert phases[request.model] in row["html"]
    assert not [line for line in browser.console if "Uncaught" in line], browser.console


def test_a_rollback_page_shows_what_happened(
    control_plane: ControlPlane, rollbacks: Rollbacks, browser: Browser, screenshots: Path
) -> None:
    """The failed rollback's page, as a person opens it from the list: the graph (heal failed, the
    exit handler escalated) with the failed step selected says why it failed; the summary has
    healer's labels, the parameters (the probe's detail among them) and the links healer configured
    (runbook, dashboard)."""
    name = rollbacks.names[DEADLINE.model]
    heal = node_named(control_plane, name, "heal(0)")
    assert heal is not None
    browser.open(f"{control_plane.argo_url}/workflows/ml/{name}?tab=workflow&nodeId={heal['id']}")
    text = " ".join(browser.wait_for_text(heal["message"], "escalate", "heal(0)").split())
    browser.screenshot(screenshots / "argo-rollback.png")
    assert f"PHASE Failed MESSAGE {heal['message']}" in text, text[:3000]

    browser.open(f"{control_plane.argo_url}/workflows/ml/{name}?tab=summary")
    text = " ".join(browser.wait_for_text("Labels", "Parameters", DEADLINE.detail).split())
    browser.screenshot(screenshots / "argo-rollback-summary.png")
    labels = {"model": DEADLINE.model, "reason": DEADLINE.reason, "incident": DEADLINE.incident}
    for key, value in {**labels, "from-version": DEADLINE.from_version}.items():
        assert f"healer.io/{key} {value}" in text, (key, text[:3000])
    links = [link["name"] for link in yaml.safe_load(argo_ui_config(trace_link_template=TRACE_LINK)["data"]["links"])]
    assert "Incident trace" in links  # the plane's Argo UI is configured with a trace UI (control_plane.py)
    for link in links:
        assert link.upper() in text.upper(), (link, text[:1000])
    # The trace link's ${workflow.metadata.labels.healer.io/trace-id} is this label: the incident's trace.
    assert f"healer.io/trace-id {TRACE_ID}" in text, text[:3000]
