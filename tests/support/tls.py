"""Self-signed certificates for the tests' TLS servers (openssl, as on any Debian machine)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, subject CN=<name>, valid one day; the certificate is its own CA."""
    key, cert = directory / f"{name}.key", directory / f"{name}.crt"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}"),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key
