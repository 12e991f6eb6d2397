"""The model store: model versions plus, per model, the stable ledger and an audit trail.

Layout (the same keys on a filesystem/NFS path and under an S3 prefix)::

    <root>/<model>/config.pbtxt
    <root>/<model>/<version>/...                         model files, never deleted by healer
    <root>/.healer/<model>/ledger/<generation>.json      ledger snapshots, 00000001.json, ...
    <root>/.healer/<model>/audit/<time>-<incident>-<n>.json
    <root>/.healer/<model>/lease/<generation>.json       lease snapshots (see ModelStore.acquire_lease)
    <root>/.healer/drain/<set>/<generation>.json         drain-set snapshots (see ModelStore.update_drain_set)
    <root>/.healer/drain/<set>/_wants/<pod>.want         a pod's wish for a place in the set (its own key)
    <root>/.healer/<model>/verified/<version>.json       S3: each file's sha256 with the size and ETag of the
                                                         bytes read (in_place.py: a cache, rewritable)
    <root>/.healer/<model>/config/<time>-<incident>.pbtxt   a config.pbtxt the object-store mode's pin replaced

A live repository (the directory Triton reads; the store itself with an NFS-style set-up) may
also hold, never deleted::

    <live>/<model>/.healer-displaced/<version>-<id>      a different copy fetch_version replaced
    <live>/<model>/.healer-displaced/<version>-bytecode-<time>-<id>/...   the version's __pycache__
                                                         folders, moved aside before it is loaded
    <live>/<model>/.healer-quarantine/<version>-<incident>[-<id>]   a quarantined version, moved
                                                         out of Triton's sight (quarantine_live_version)

Both sit inside the model's own folder, where Triton ignores a directory whose name is not a
version number (it logs a warning), and on the same filesystem as the version (a rename, no copy).
Not at the repository's root: Triton reads every folder there as a model, and ``--load-model=*``
would fail on it.

Every file healer writes (here or in a live repository) is mode 0644 and every directory it
creates 0755, whatever the umask: Triton may run as another user, or read through a
root-squashed NFS mount.

Ledger writes never lose an update: a writer reads snapshot N, applies its change and
*creates* snapshot N+1 exclusively (filesystem: hard link of a complete temp file, which fails
if the name exists; S3: ``PutObject`` with ``If-None-Match: *``). The loser of a race re-reads
and re-applies its change; the number of attempts is bounded. Old snapshots stay: they are the
ledger's history. When the filesystem store is also Triton's repository, Triton lists ``.healer``
in its repository index as a model: Triton must load its models by name (``--load-model=NAME``,
explicit mode, as healer requires anyway), never ``--load-model=*``, which would try to load it.

An S3 backend that silently ignores ``If-None-Match`` would let two writers both "create" the
same snapshot and lose an update, so ``store_from_settings`` probes every S3 store once per
process (``S3Blobs.verify_conditional_writes``) and refuses one that ignores the header.

The package, by concern (``from healer.edges.store import X`` for every name below)::

    errors.py       StoreError and its kinds
    layout.py       the folder names above, file modes, bounds, the checks on names
    files.py        make_dirs and the atomic write, with those modes
    hashing.py      check_hashes, hash_directory
    blobs.py        Blobs, FilesystemBlobs, S3Blobs, the conditional-write checks
    live.py         a live repository: quarantine and restore, its config file, sweep_staging, the
                    bytecode caches moved aside before a load (move_bytecode_aside)
    base.py         what the ModelStore's parts share: the blobs, the snapshot listing
    versions.py     ModelStore's versions part: models, versions, version_files, fetch_version
    ledger.py       its ledger part: ledger, update_ledger
    lease.py        its lease part: acquire_lease, lease_snapshot, release_lease
    doctor.py       its doctor part: diagnose, examine, release_lease_by_hand, repair_ledger
    drain.py        its drain set part: drain_set, update_drain_set
    audit.py        its audit part: append_audit, audit
    in_place.py     its object-store part (Triton reads the store itself): check_in_place (ETags
                    listed against a record of a full read), hash_version, pin_config
    pin.py          a config.pbtxt's text pinned to one version (pure)
    model_store.py  ModelStore (the parts composed) and store_from_settings
"""

from __future__ import annotations

from healer.edges.store.blobs import (
    PERMANENT_ERRNOS,
    Blobs,
    FilesystemBlobs,
    S3Blobs,
    check_conditional_writes_at_start,
    forget_conditional_write_checks,
)
from healer.edges.store.doctor import Diagnosis, Findings
from healer.edges.store.drain import DRAIN_SET_PATTERN, RESERVED_DRAIN_SETS, DrainSet, check_drain_set_name
from healer.edges.store.errors import (
    ConditionalWritesIgnored,
    LeaseHeld,
    StoreConflict,
    StoreError,
    StoreFull,
    StoreIntegrityError,
    StoreUnavailable,
)
from healer.edges.store.files import make_dirs
from healer.edges.store.hashing import DERIVED_DIRS, check_hashes, hash_directory, is_derived
from healer.edges.store.in_place import CONFIG_ASIDE_DIR, LOST_TO_A_PUSH, VERIFIED_DIR, hash_s3_version
from healer.edges.store.layout import (
    CHUNK,
    DIR_MODE,
    DISPLACED_DIR,
    FILE_MODE,
    MAX_LEDGER_ATTEMPTS,
    META_DIR,
    QUARANTINE_DIR,
    check_name,
)
from healer.edges.store.lease import Lease
from healer.edges.store.live import (
    QUARANTINE_ATTEMPTS,
    STAGING_PREFIXES,
    aside_usage,
    bytecode_caches,
    live_bytecode,
    move_bytecode_aside,
    prune_aside,
    quarantine_live_version,
    quarantined_copies,
    restore_quarantined_version,
    sweep_staging,
    write_live_config,
)
from healer.edges.store.model_store import ModelStore, store_from_settings
from healer.edges.store.pin import PIN_HEADER, leaves_out, minimal_pin_text, pin_text, pinned_version
from healer.edges.store.stamps import STAMP_DIR, forget_stamp, stamped_hashes, verify_version
from healer.edges.store.versions import FetchedVersion

__all__ = [
    "CHUNK",
    "CONFIG_ASIDE_DIR",
    "DERIVED_DIRS",
    "DIR_MODE",
    "DISPLACED_DIR",
    "DRAIN_SET_PATTERN",
    "FILE_MODE",
    "LOST_TO_A_PUSH",
    "MAX_LEDGER_ATTEMPTS",
    "META_DIR",
    "PERMANENT_ERRNOS",
    "PIN_HEADER",
    "QUARANTINE_ATTEMPTS",
    "QUARANTINE_DIR",
    "RESERVED_DRAIN_SETS",
    "STAGING_PREFIXES",
    "STAMP_DIR",
    "VERIFIED_DIR",
    "Blobs",
    "ConditionalWritesIgnored",
    "Diagnosis",
    "DrainSet",
    "FetchedVersion",
    "FilesystemBlobs",
    "Findings",
    "Lease",
    "LeaseHeld",
    "ModelStore",
    "S3Blobs",
    "StoreConflict",
    "StoreError",
    "StoreFull",
    "StoreIntegrityError",
    "StoreUnavailable",
    "aside_usage",
    "bytecode_caches",
    "check_conditional_writes_at_start",
    "check_drain_set_name",
    "check_hashes",
    "check_name",
    "forget_conditional_write_checks",
    "forget_stamp",
    "hash_directory",
    "hash_s3_version",
    "is_derived",
    "leaves_out",
    "live_bytecode",
    "make_dirs",
    "minimal_pin_text",
    "move_bytecode_aside",
    "pin_text",
    "pinned_version",
    "prune_aside",
    "quarantine_live_version",
    "quarantined_copies",
    "restore_quarantined_version",
    "stamped_hashes",
    "store_from_settings",
    "sweep_staging",
    "verify_version",
    "write_live_config",
]
