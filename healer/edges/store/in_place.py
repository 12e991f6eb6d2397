"""The store as Triton's own repository (repository_mode: object-store): a version checked where it lies,
cheaply, and the model's config.pbtxt pinned to the stable version with a conditional write.

Integrity without reading the bytes: every full sha256 read of a version in an S3 store (a promotion,
``version_files``, a check that fell back to hashing) records, per file, the sha256 of exactly the bytes
one GET returned with that object's size and ETag, in ``.healer/<model>/verified/<version>.json``. A check
before a load then lists the version's objects (one request per thousand) and trusts the record only if
every object the ledger names is there with the recorded size and ETag, the recorded sha256 is the
ledger's, and no other object is under the version. An accidental overwrite changes the ETag (a
single-part upload's is the MD5 of its bytes, a multipart upload's the MD5 of its parts' MD5s, an
encrypted one's is new on every write). It is no defence against a writer: whoever uploads a version can
make two files with one MD5 (a collision, practical for single-part uploads) and swap the
second in after the promotion, under the recorded ETag. What protects a version here, as it protects the
ledger and this record, is the bucket's write access: whoever may write the bucket is trusted. Anything
else (no record, a changed object, an added or missing one) sends the check back to
reading every byte, which writes the record again when it matches, removes it when not. The record is a
cache kept beside the ledger, not in it: ETags are the bucket's, they change with a copy to another bucket
or a re-upload in other parts, while the ledger's sha256 is the content's.

Bytecode (``__pycache__``) objects under a version are refused, never skipped: Triton downloads the whole
model folder, and a cached .pyc (a hash-based one above all) would run instead of the checked source.
Nothing here moves or deletes an object of a model.

The pin: ``<model>/config.pbtxt`` becomes the stable version's own config pinned to it (pin.py), written
with ``If-Match`` on the ETag of the file it replaces (``If-None-Match: *`` when there was none); the
replaced file is first copied to ``.healer/<model>/config/<time>-<incident>.pbtxt`` (never deleted). If
someone pushed a config.pbtxt in between, the write is refused and their file stays, and the outcome says
so; the heal then keeps it only if it leaves every quarantined version out, else pins over it once
(workflows/steps/records.py pin_config_in_store).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from healer.core.ledger import Ledger
from healer.edges.logs import get_logger
from healer.edges.store.audit import AuditTrail
from healer.edges.store.blobs import FilesystemBlobs, S3Blobs
from healer.edges.store.errors import StoreError, StoreIntegrityError, StoreUnavailable
from healer.edges.store.hashing import check_hashes, is_derived
from healer.edges.store.layout import META_DIR, check_name, safe_part
from healer.edges.store.live import move_bytecode_aside, write_live_config
from healer.edges.store.stamps import verify_version

VERIFIED_DIR = "verified"  # .healer/<model>/verified/<version>.json
CONFIG_ASIDE_DIR = "config"  # .healer/<model>/config/<time>-<incident>.pbtxt
DIGESTS_FORMAT = 1
LOST_TO_A_PUSH = "config.pbtxt changed while it was being pinned: the newer push kept, not pinned"

# file -> (sha256, size, ETag)
Digests = dict[str, tuple[str, int, str]]


class InPlace(AuditTrail):
    """The object-store mode's part of the ModelStore: the store is what Triton reads."""

    ledger: Callable[[str], Ledger]  # the ledger part's (ledger.py); the ModelStore composes both

    # ---- integrity ----------------------------------------------------------------------------------
    def check_in_place(self, model: str, version: str, expected: Mapping[str, str]) -> str:
        """Check that the store's ``<model>/<version>`` holds exactly ``expected`` (the ledger's
        sha256), where Triton reads it; raise StoreIntegrityError naming what differs. Returns how:
        ``"etag"`` (listed: every object as recorded after a full read), ``"stamp"`` or ``"hashed"``
        (a filesystem store: stamps.verify_version, its bytecode caches moved aside first)."""
        check_name(model, version)
        where = f"{self.location}/{model}/{version}"
        if isinstance(self.blobs, FilesystemBlobs):
            root = self.blobs.root
            if not root.is_dir():  # an unmounted share is not a version with no files
                raise StoreUnavailable(f"{root}: not a directory (not mounted?)")
            move_bytecode_aside(root, model, version)  # no check covers it
            return verify_version(root / model / version, expected, where=where)
        blobs = self._s3()
        prefix = f"{model}/{version}/"
        listed = {key[len(prefix) :]: entry for key, entry in blobs.entries(f"{model}/{version}").items()}
        derived = sorted(name for name in listed if is_derived(name.split("/")))
        if derived:
            raise StoreIntegrityError(
                f"{where}: bytecode in the bucket ({', '.join(derived[:5])}): Triton downloads it with the version "
                "and Python would run it instead of the checked source; remove it from the bucket (by hand)"
            )
        recorded = self.recorded_digests(model, version) or {}
        same_files = bool(recorded) and set(listed) == set(expected)
        if same_files and all(recorded.get(n) == (expected[n], *listed[n]) for n in expected):
            return "etag"
        try:
            hashes = self.hash_version(model, version)
            check_hashes(expected, hashes, where=where)
        except StoreIntegrityError:
            self.forget_digests(model, version)
            raise
        return "hashed"

    def hash_version(self, model: str, version: str) -> dict[str, str]:
        """sha256 of every file of a version in an S3 store, recorded with each object's size and ETag."""
        return hash_s3_version(self._s3(), model, version)

    def recorded_digests(self, model: str, version: str) -> Digests | None:
        """The record of a version's objects (None: none, or not one this code wrote)."""
        try:
            document = json.loads(self.blobs.read(_digests_key(model, version)))
            if document.get("format") != DIGESTS_FORMAT:
                return None
            return {
                str(name): (str(e["sha256"]), int(e["size"]), str(e["etag"])) for name, e in document["files"].items()
            }
        except (FileNotFoundError, StoreError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def forget_digests(self, model: str, version: str) -> None:
        try:
            self.blobs.delete(_digests_key(model, version))
        except StoreError as exc:
            get_logger("healer.store").warning("digests_not_removed", model=model, version=version, error=str(exc))

    # ---- the pin --------------------------------------------------------------------------------------
    def pin_config(
        self, model: str, text: str, *, incident: str, refuse: Callable[[], str | None] | None = None
    ) -> dict[str, Any]:
        """Make the store's ``<model>/config.pbtxt`` hold ``text``, the file it replaces kept first.
        ``refuse``: asked after the current file (and its ETag) is read and before anything is written;
        a reason it returns writes nothing. Whatever it saw holds for the conditional write, which
        fails if the file changed since. Returns what happened: ``written`` (True/False), ``previous``
        (where the replaced file is kept), ``why`` when nothing was written. Raises StoreError when the
        store cannot be read or written."""
        check_name(model)
        if isinstance(self.blobs, FilesystemBlobs):
            current = self.config_text(model)
            had_file = current is not None
            why = refuse() if refuse is not None and current != text else None
            if why:
                return {"written": False, "why": why}
            try:
                displaced = write_live_config(
                    self.blobs.root, model, text, expected=None if current is None else current.encode()
                )
            except BlockingIOError:  # EAGAIN: the file changed between its copy and the rename
                return {"written": False, "why": LOST_TO_A_PUSH}
            except (OSError, ValueError) as exc:
                raise StoreError(f"{self.location}/{model}/config.pbtxt: {exc}") from exc
            if displaced is None:  # the same text, or no file before it
                if self.config_text(model) == text and not had_file:
                    return {"written": True}
                return {"written": False, "why": "already this pin"}
            return {"written": True, "previous": str(displaced)}
        return self._pin_s3(model, text, incident, refuse)

    def _pin_s3(self, model: str, text: str, incident: str, refuse: Callable[[], str | None] | None) -> dict[str, Any]:
        blobs = self._s3()
        key = f"{model}/config.pbtxt"
        data = text.encode()
        try:
            current, etag = blobs.read_tagged(key)
        except FileNotFoundError:
            current, etag = None, ""
        if current == data:
            return {"written": False, "why": "already this pin", "etag": etag}
        why = refuse() if refuse is not None else None
        if why:
            return {"written": False, "why": why}
        out: dict[str, Any] = {}
        if current is not None:
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
            aside = f"{META_DIR}/{model}/{CONFIG_ASIDE_DIR}/{stamp}-{safe_part(incident)}.pbtxt"
            if not blobs.create(aside, current):
                raise StoreError(f"{self.location}/{aside}: exists already; config.pbtxt not pinned")
            out["previous"] = f"{self.location}/{aside}"
            out["previous_etag"] = etag
            written = blobs.replace_if_match(key, data, etag)
        else:
            written = blobs.create(key, data)  # If-None-Match: * (probed for at start-up)
        if not written:
            get_logger("healer.store").warning("config_pin_lost_to_a_push", model=model, store=self.location)
            return {**out, "written": False, "why": LOST_TO_A_PUSH}
        return {**out, "written": True}

    def repin(
        self, model: str, config_file: str, version: str, *, incident: str, config: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """After ``version`` is promoted: if the store's config.pbtxt is a healer pin of another version,
        pin it to ``version`` (its own config, ``config_file``; with none, the minimal pin made from
        Triton's ``config``) the same way, recorded in the audit trail; a config.pbtxt healer did not pin
        is its owner's and left as it is. Never a quarantined version, even one quarantined by a heal
        racing the promotion (promote takes no lease: its ledger update is a compare-and-swap): the
        ledger is read again after config.pbtxt and before the conditional write, and once more after
        it, the earlier pin put back if a quarantine came in between. Best effort (a pin that stays on
        the earlier stable version is safe, only behind): problems are returned, never raised."""
        from healer.edges.store.pin import minimal_pin_text, pin_text, pinned_version

        try:
            current = self.config_text(model)
            pinned = pinned_version(current or "")
            if pinned is None:
                return {"written": False, "why": "config.pbtxt is not pinned by healer: left as it is"}
            if pinned == version:
                return {"written": False, "why": "already this pin"}
            if config_file:
                text = pin_text(config_file, version)
            else:  # promoted with no config.pbtxt: Triton auto-completes the rest, as it did then
                if config is None:
                    record = self.ledger(model).stable_record(version)
                    config = record.config if record is not None else {}
                text = minimal_pin_text(model, config, version)

            def quarantined_meanwhile() -> str | None:
                # Read after config.pbtxt's ETag: a heal quarantines before it pins, so a quarantine this
                # read misses comes with a pin that makes the conditional write below fail.
                if self.ledger(model).is_quarantined(version):
                    return f"v{version} was quarantined while it was being promoted: pin left on v{pinned}"
                return None

            outcome = self.pin_config(model, text, incident=incident, refuse=quarantined_meanwhile)
            if outcome["written"] and (why := quarantined_meanwhile()):
                # Quarantined after the check by a heal that found its own pin there already (nothing
                # written, so no ETag changed for the write above to fail on): the earlier pin goes back.
                back = self.pin_config(model, current or "", incident=incident)
                outcome = {**outcome, "written": False, "why": why, "put_back": back["written"] or back.get("why")}
            if outcome["written"] or outcome.get("why") != "already this pin":
                lost = "config-pinned-lost" if outcome.get("why") == LOST_TO_A_PUSH else "config-not-pinned"
                event = "config-pinned" if outcome["written"] else lost
                details = {k: v for k, v in outcome.items() if k != "written"}
                self.append_audit(
                    model, {"incident": incident, "event": event, "version": version, "from": pinned, **details}
                )
            return outcome
        except (StoreError, FileNotFoundError, ValueError, UnicodeDecodeError) as exc:
            get_logger("healer.store").warning("config_not_repinned", model=model, version=version, error=str(exc))
            return {"written": False, "why": f"not pinned again: {exc}"}

    def config_text(self, model: str) -> str | None:
        """The store's ``<model>/config.pbtxt`` (None: there is none)."""
        try:
            return self.blobs.read(f"{model}/config.pbtxt").decode()
        except FileNotFoundError:
            return None

    def _s3(self) -> S3Blobs:
        if not isinstance(self.blobs, S3Blobs):
            raise StoreError(f"{self.location}: not an S3 store")
        return self.blobs


def _digests_key(model: str, version: str) -> str:
    return f"{META_DIR}/{model}/{VERIFIED_DIR}/{version}.json"


def hash_s3_version(blobs: S3Blobs, model: str, version: str) -> dict[str, str]:
    """sha256 of every file of a version in an S3 store (bytecode caches skipped, as everywhere), each
    from one GET, and the record of the size and ETag of exactly those bytes beside them (best effort:
    it is only a cache; the next full read writes it again)."""
    check_name(model, version)
    prefix = f"{model}/{version}/"
    digests: Digests = {}
    for key in blobs.keys(f"{model}/{version}"):
        if is_derived(key.split("/")):
            continue
        etag, chunks = blobs.stream_tagged(key)
        digest, size = hashlib.sha256(), 0
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
        digests[key[len(prefix) :]] = (digest.hexdigest(), size, etag)
    if digests and all(etag for _, _, etag in digests.values()):
        document = {
            "format": DIGESTS_FORMAT,
            "files": {n: {"sha256": s, "size": z, "etag": e} for n, (s, z, e) in sorted(digests.items())},
        }
        try:
            blobs.put(_digests_key(model, version), (json.dumps(document, indent=1) + "\n").encode())
        except StoreError as exc:
            get_logger("healer.store").warning("digests_not_recorded", model=model, version=version, error=str(exc))
    return {name: sha for name, (sha, _, _) in digests.items()}
