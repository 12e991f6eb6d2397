"""`healer webhook`: the admission webhook that injects the sidecar into opted-in pods."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from healer.cli.common import Command
from healer.cli.output import EXIT_USAGE

EXAMPLES = (
    "healer webhook --tls-cert /tls/tls.crt --tls-key /tls/tls.key --injection /etc/healer-webhook/injection.yaml",
)


def register(command: Command) -> None:
    webhook = command(
        "webhook",
        "serve the admission webhook that injects the sidecar into opted-in pods (HTTPS)",
        EXAMPLES,
        config=False,
    )
    webhook.add_argument(
        "--listen", default="0.0.0.0:8443", metavar="HOST:PORT", help="HTTPS address (default: 0.0.0.0:8443)"
    )
    webhook.add_argument(
        "--tls-cert", required=True, metavar="FILE", help="serving certificate (PEM), reloaded when it changes"
    )
    webhook.add_argument(
        "--tls-key", required=True, metavar="FILE", help="its private key (PEM), reloaded when it changes"
    )
    webhook.add_argument(
        "--injection", required=True, metavar="FILE", help="what to inject: image, ConfigMap, resources (YAML)"
    )


def run(args: argparse.Namespace) -> int:
    import signal
    import ssl
    import threading

    from healer.webhook import InjectionConfigError, serve

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        serve(args.listen, Path(args.tls_cert), Path(args.tls_key), Path(args.injection), stop)
    except InjectionConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ssl.SSLError) as exc:  # unreadable or mismatched TLS files, a taken port
        print(f"healer: webhook: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0
