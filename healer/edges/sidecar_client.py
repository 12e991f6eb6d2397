"""The rollback's side of a replica's staging endpoints (healer/sidecar/stage.py): ask the sidecar beside a
Triton to stage a stable version into its pod's own repository, or to move a quarantined version aside.

Every call has a deadline: each request its own timeout (over the sidecar's bounded wait), and a
202 (the job is under way there) is asked again until ``deadline_s``. The failures are typed as the
rollback needs them: ``SidecarUnavailable`` when a retry may help (not reachable, not answering, 503,
still staging at the deadline), ``SidecarRefused`` when it will not (the ledger says no, the store's
files differ from the ledger, a bad request).
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from typing import Any

from healer.settings import parse_address

STAGE_PATH = "/healer/v1/stage"  # healer/sidecar/stage.py
QUARANTINE_PATH = "/healer/v1/quarantine"
REQUEST_TIMEOUT_S = 12.0  # one request: over the sidecar's bounded wait (8 s) and the listener's (10 s)
POLL_S = 0.2  # between two asks while a job is under way there
MAX_ANSWER_BYTES = 1 << 20


class SidecarError(Exception):
    transient = False


class SidecarUnavailable(SidecarError):
    """Not reachable, not answering, busy or still at work at the deadline: a retry may help."""

    transient = True


class SidecarRefused(SidecarError):
    """The sidecar refused (the ledger does not allow it, the store's copy is not the ledger's, a bad
    request, no staging there): a retry will not help."""


def stage_version(
    address: str,
    model: str,
    version: str,
    *,
    deadline_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """``model`` v``version`` in the repository of the pod whose sidecar listens at ``address``
    (host:port), every file checked against the ledger there. Returns the sidecar's answer
    (``verified``: stamp, hashed or fetched)."""
    return _ask(address, STAGE_PATH, {"model": model, "version": version}, deadline_s, clock, sleep)


def quarantine_version(
    address: str,
    model: str,
    version: str,
    stable: str,
    *,
    deadline_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """``version`` (quarantined in the ledger) moved aside in that pod's repository and ``stable``'s config
    file written as the model's. Returns the sidecar's answer."""
    body = {"model": model, "version": version, "stable": stable}
    return _ask(address, QUARANTINE_PATH, body, deadline_s, clock, sleep)


def _ask(
    address: str,
    path: str,
    body: dict[str, str],
    deadline_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> dict[str, Any]:
    deadline = clock() + deadline_s
    # Bounded by the deadline: every pass asks once (each ask bounded by its timeout) and sleeps toward it.
    while True:
        left = deadline - clock()
        code, document = _post(address, path, body, timeout_s=max(0.1, min(REQUEST_TIMEOUT_S, left)))
        if code == 200:
            return document
        why = str(document.get("error") or document.get("state") or document)
        if code == 202:
            if clock() + POLL_S >= deadline:
                raise SidecarUnavailable(f"sidecar {address}: still at work after {deadline_s:g} s ({why})")
            sleep(POLL_S)
            continue
        if code in (502, 503, 504):
            raise SidecarUnavailable(f"sidecar {address}: {code}: {why}")
        raise SidecarRefused(f"sidecar {address}: {code}: {why}")


def _post(address: str, path: str, body: dict[str, str], *, timeout_s: float) -> tuple[int, dict[str, Any]]:
    try:
        host, port = parse_address(address, url=False)
    except ValueError as exc:
        raise SidecarRefused(f"sidecar address {address!r}: {exc}") from exc
    payload = json.dumps(body).encode()
    deadline = time.monotonic() + timeout_s
    connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        connection.request(
            "POST", path, body=payload, headers={"Content-Type": "application/json", "Connection": "close"}
        )
        if connection.sock is not None:
            connection.sock.settimeout(max(0.05, deadline - time.monotonic()))
        response = connection.getresponse()
        raw = response.read(MAX_ANSWER_BYTES + 1)
    except (OSError, http.client.HTTPException) as exc:
        raise SidecarUnavailable(f"sidecar {address}: {type(exc).__name__}: {exc}".strip()) from exc
    finally:
        connection.close()
    if response.status == 404 and not raw.lstrip().startswith(b"{"):
        raise SidecarRefused(
            f"sidecar {address}: {path} not served there (its repository_mode is not per-pod, or an older healer)"
        )
    try:
        document = json.loads(raw) if len(raw) <= MAX_ANSWER_BYTES else None
    except ValueError:
        document = None
    if not isinstance(document, dict):
        shown = raw[:200].decode(errors="replace")
        if response.status in (502, 503, 504):
            return response.status, {"error": shown}
        raise SidecarRefused(f"sidecar {address}: {response.status}: not a JSON object: {shown!r}")
    return response.status, document
