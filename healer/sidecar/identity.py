"""Who this pod is, from the downward API: its name and its Triton's address as other pods reach it."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping


def pod_triton_url(triton_url: str, environ: Mapping[str, str] | None = None) -> str:
    """This pod's Triton as another pod reaches it: POD_IP (downward API) and the configured port;
    "" outside a cluster (the rollback then uses its own triton.url)."""
    env = os.environ if environ is None else environ
    pod_ip = env.get("POD_IP", "")
    if not pod_ip:
        return ""
    port = triton_url.rpartition(":")[2]
    return f"[{pod_ip}]:{port}" if ":" in pod_ip else f"{pod_ip}:{port}"


def pod_identity(environ: Mapping[str, str] | None = None) -> str:
    """ "namespace/name" from the downward API (POD_NAMESPACE, POD_NAME), else the hostname."""
    env = os.environ if environ is None else environ
    name = env.get("POD_NAME") or socket.gethostname()
    namespace = env.get("POD_NAMESPACE")
    return f"{namespace}/{name}" if namespace else name
