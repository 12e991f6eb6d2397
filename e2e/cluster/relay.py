"""Ports of this machine's 127.0.0.1 relayed into the node's network namespace (make cluster-demo).

The node has no link to the host (README: Topology): its API server and argo-server listen inside
its network namespace only. This process binds each listening port on 127.0.0.1 in the host's
namespace first, then joins the node's namespace (setns, before any thread starts: threads inherit
it), so every connection it opens from then on starts there. Bytes are copied as they come; TLS
passes through untouched (the certificates are the node's). No link, route or iptables rule is
added, and stopping this process closes every port it opened.

Usage: relay.py NETNS_PATH PORT=HOST:PORT [PORT=HOST:PORT ...]
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000
CONNECT_TIMEOUT_S = 5.0
CHUNK = 65536


def join_netns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns {path}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until the source ends, then end the sink's sending side (the other way may go on)."""
    with contextlib.suppress(OSError):
        while chunk := source.recv(CHUNK):
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
    with contextlib.suppress(OSError):
        source.close()


def relay(client: socket.socket, target: tuple[str, int]) -> None:
    try:
        upstream = socket.create_connection(target, timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        print(f"relay: {target[0]}:{target[1]}: {exc}", file=sys.stderr, flush=True)
        client.close()
        return
    upstream.settimeout(None)
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
    pump(client, upstream)


def serve(listener: socket.socket, target: tuple[str, int]) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=relay, args=(client, target), daemon=True).start()


def parse(spec: str) -> tuple[int, tuple[str, int]]:
    port, _, target = spec.partition("=")
    host, _, target_port = target.rpartition(":")
    if not port.isdigit() or not host or not target_port.isdigit():
        raise SystemExit(f"relay: {spec!r}: expected PORT=HOST:PORT")
    return int(port), (host, int(target_port))


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    routes = [parse(spec) for spec in argv[1:]]
    listeners = [(socket.create_server(("127.0.0.1", port)), target) for port, target in routes]
    join_netns(argv[0])
    for listener, target in listeners:
        print(f"relay: 127.0.0.1:{listener.getsockname()[1]} -> {target[0]}:{target[1]}", flush=True)
    threads = [threading.Thread(target=serve, args=pair, daemon=True) for pair in listeners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main(sys.argv[1:])
