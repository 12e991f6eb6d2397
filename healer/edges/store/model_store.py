"""The ModelStore, composed from its parts (one module each), and the store a configuration names."""

from __future__ import annotations

from healer.edges.store.audit import AuditTrail
from healer.edges.store.blobs import FilesystemBlobs, S3Blobs, check_conditional_writes_at_start
from healer.edges.store.doctor import Doctor
from healer.edges.store.drain import DrainSets
from healer.edges.store.in_place import InPlace
from healer.edges.store.lease import Leases
from healer.edges.store.ledger import Ledgers
from healer.edges.store.versions import Versions
from healer.settings import StoreSettings


class ModelStore(Versions, Doctor, Ledgers, Leases, DrainSets, InPlace, AuditTrail):
    """Model versions plus, per model, the stable ledger, the lease and an audit trail, and the replica
    sets' drain sets, all through one Blobs (healer/edges/store/__init__.py has the layout); and, when
    Triton reads the store itself, the checks and the config pin done in place (in_place.py)."""


def store_from_settings(settings: StoreSettings) -> ModelStore:
    """The configured store. An S3 store is probed for conditional writes (see
    check_conditional_writes_at_start): one that ignores If-None-Match raises ConditionalWritesIgnored."""
    if settings.filesystem is not None:
        return ModelStore(FilesystemBlobs(settings.filesystem))
    assert settings.s3 is not None
    s3 = settings.s3
    blobs = S3Blobs(
        s3.bucket,
        s3.prefix,
        endpoint_url=s3.endpoint_url,
        region=s3.region,
        connect_timeout_s=s3.connect_timeout_s,
        read_timeout_s=s3.read_timeout_s,
    )
    check_conditional_writes_at_start(blobs)
    return ModelStore(blobs)
