"""An Alertmanager that hangs never holds a healed model (issue 31 item 4, review): the rollback on the embedded
stack (real Triton, filesystem store, LocalEngine) with rollback.alert.info on sends its healed info alert to a
real local TCP server that accepts, reads the request and then trickles one byte a second, never a whole line
(urlopen's timeout is per socket operation: each byte resets it). The rollback succeeds; when the alert's
connection arrives the failing version's files are already moved aside, the stable config pinned and the
model's lease released; the whole send is bounded by rollback.alert.timeout_s. The release's info alert goes
out the same way (workflows/steps/info.py), after its lease."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from healer.edges.alerts import DeliveryStatus, deliver_alert, post_alerts
from tests.support.rollback_stack import RollbackStack, engine_with

TIMEOUT_S = 1.5  # rollback.alert.timeout_s in these tests: each trickled byte comes well inside it


@contextmanager
def trickling_alertmanager(on_accept: Callable[[], dict[str, Any]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A real TCP server on localhost that accepts, reads the request, then sends one byte a second and
    never a full status line; ``on_accept``'s snapshot of the world is kept for each connection."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    seen: list[dict[str, Any]] = []
    stop = threading.Event()

    def trickle(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(1.0)
            try:
                conn.recv(65536)
                while not stop.is_set():
                    conn.sendall(b"H")
                    stop.wait(1.0)
            except OSError:
                return

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            seen.append(on_accept())
            threading.Thread(target=trickle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", seen
    finally:
        stop.set()
        thread.join(5)
        server.close()


def test_a_trickling_alertmanager_is_cut_off_after_the_whole_send_timeout() -> None:
    """The send's own bound, without the rollback: urlopen alone would wait for ever here."""
    with trickling_alertmanager(dict) as (url, seen):
        started = time.monotonic()
        delivery = deliver_alert(post_alerts, url, {"labels": {"alertname": "x"}}, TIMEOUT_S)
        took = time.monotonic() - started
    assert seen, "the server never saw the connection"
    assert delivery.status is DeliveryStatus.FAILED and "TimeoutError" in delivery.error, delivery
    assert TIMEOUT_S <= took < TIMEOUT_S + 1.0, took


def test_a_set_stop_ends_the_wait_at_once() -> None:
    """The run's deadline passed (ctx.cancelled set): the send is not waited for."""
    stop = threading.Event()
    stop.set()
    with trickling_alertmanager(dict) as (url, _):
        started = time.monotonic()
        delivery = deliver_alert(post_alerts, url, {"labels": {"alertname": "x"}}, 10.0, stop=stop)
        took = time.monotonic() - started
    assert delivery.status is DeliveryStatus.FAILED and "stopped" in delivery.error, delivery
    assert took < 1.0, took


def test_a_hanging_alertmanager_never_holds_the_healed_model(fs_stack_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")}, stable=[1, 2]
    ) as stack:
        stack: RollbackStack

        def world() -> dict[str, Any]:
            _, lease = stack.store.lease_snapshot(stack.model)
            return {
                "v3_live": (stack.live / stack.model / "3").exists(),
                "quarantined": stack.store.ledger(stack.model).is_quarantined("3"),
                "lease_released": lease is None or lease.released,
            }

        with trickling_alertmanager(world) as (url, seen):
            alert = dataclasses.replace(stack.settings.rollback.alert, info=True, webhook_url=url, timeout_s=TIMEOUT_S)
            engine = engine_with(stack, tmp_path, alert=alert)
            started = time.monotonic()
            status = engine.run(stack.request("3"), timeout_s=120)
            took = time.monotonic() - started
        assert status.phase == "Succeeded", status
        # The protective steps were done, and the lease given back, before the alert's connection.
        assert seen == [{"v3_live": False, "quarantined": True, "lease_released": True}], seen
        assert not (stack.live / stack.model / "3").exists()
        assert stack.store.ledger(stack.model).is_quarantined("3")
        assert took < stack.settings.rollback.deadline_s, took
