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
    webhook.add_argument(
        "--alerts-config",
        metavar="FILE",
        help="serve the Alertmanager receiver (POST /alerts/v1/alertmanager, docs/alerts.md): the healer "
        "config whose models, rollback engine and circuit breaker it uses",
    )
    webhook.add_argument(
        "--alerts-token-file",
        metavar="FILE",
        help="the receiver's bearer token (a mounted Secret's file, read at each request); "
        "required with --alerts-config",
    )


def run(args: argparse.Namespace) -> int:
    import signal
    import ssl
    import threading

    from healer.webhook import InjectionConfigError, serve

    alerts = None
    if args.alerts_config:
        if not args.alerts_token_file:
            print("healer: webhook: --alerts-config needs --alerts-token-file (the receiver's token)", file=sys.stderr)
            return EXIT_USAGE
        from healer.engines.factory import engine_from_settings
        from healer.settings import ConfigError, load_settings
        from healer.webhook.alerts import AlertReceiver

        try:
            settings = load_settings(args.alerts_config)
        except ConfigError as exc:
            print(f"healer: {exc}", file=sys.stderr)
            return EXIT_USAGE
        alerts = AlertReceiver(
            settings, token_file=Path(args.alerts_token_file), engine_factory=lambda: engine_from_settings(settings)
        )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        serve(args.listen, Path(args.tls_cert), Path(args.tls_key), Path(args.injection), stop, alerts)
    except InjectionConfigError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ssl.SSLError) as exc:  # unreadable or mismatched TLS files, a taken port
        print(f"healer: webhook: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0
