"""One line for a server that could not be reached, as kubectl says it: what was tried, where, and the
cause in a few words (connection refused, timed out, host name not resolved), never the client's retry
dump; and what to do when no kubeconfig was found."""

from __future__ import annotations

import errno
import os
import socket
import ssl
from pathlib import Path

UNREACHABLE_ERRNOS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.EHOSTUNREACH: "no route to host",
    errno.ENETUNREACH: "network unreachable",
    errno.ETIMEDOUT: "timed out",
}


def connection_failure(exc: BaseException) -> str | None:
    """The failure to connect under ``exc`` (its causes, urllib3's ``reason``) in a few words, or None
    when ``exc`` is not one: the server answered, and what it said is the message."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        words = _in_words(current)
        if words:
            return words
        reason = getattr(current, "reason", None)
        todo += [reason if isinstance(reason, BaseException) else None, current.__cause__, current.__context__]
    return None


def _in_words(exc: BaseException) -> str | None:
    if isinstance(exc, socket.gaierror):
        return "host name not resolved"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"its TLS certificate is not trusted ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed ({exc.reason or exc})"
    if isinstance(exc, TimeoutError) or type(exc).__name__ in ("ConnectTimeoutError", "ReadTimeoutError"):
        return "timed out"
    if isinstance(exc, OSError) and exc.errno in UNREACHABLE_ERRNOS:
        return UNREACHABLE_ERRNOS[exc.errno]
    return None


def unreachable(what: str, where: str, exc: BaseException, *, source: str = "") -> str | None:
    """ "error: cannot reach the Kubernetes API server at https://…: connection refused (kubeconfig …)",
    or None when ``exc`` is not a failure to connect."""
    cause = connection_failure(exc)
    if cause is None:
        return None
    return f"error: cannot reach {what} at {where}: {cause}" + (f" ({source})" if source else "")


def missing_kubeconfig(kubeconfig: str | None) -> str | None:
    """What was looked for and how to fix it, when no kubeconfig (nor a pod's service account) is there;
    None when one is."""
    from healer.edges.cluster import IN_CLUSTER_NAMESPACE

    if kubeconfig:
        if Path(kubeconfig).expanduser().is_file():
            return None
        return f"error: --kubeconfig {kubeconfig}: no such file"
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if any(Path(p).expanduser().is_file() for p in listed):
        return None
    if not listed and Path("~/.kube/config").expanduser().is_file():
        return None
    if IN_CLUSTER_NAMESPACE.parent.is_dir():
        return None  # a pod's service account: connect() uses it
    looked = f"$KUBECONFIG ({', '.join(listed)}: no such file)" if listed else "~/.kube/config (no such file)"
    return (
        f"error: no kubeconfig: looked for {looked} and a pod's service account (not in a pod); "
        "give --kubeconfig FILE, set KUBECONFIG, write ~/.kube/config (e.g. your cloud's "
        "`get-credentials`), or run inside the cluster"
    )
