"""A model's audit trail in the store: one record per rollback step that changed something."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Mapping
from typing import Any

from healer.edges.logs import iso_utc
from healer.edges.store.base import StoreBase
from healer.edges.store.errors import StoreConflict
from healer.edges.store.layout import META_DIR, check_name, safe_part


class AuditTrail(StoreBase):
    """The audit part of the ModelStore."""

    def append_audit(self, model: str, record: Mapping[str, Any]) -> str:
        check_name(model)
        # The incident becomes part of a key: no "/" (or anything odd) may steer it out of the audit folder.
        incident = safe_part(str(record.get("incident", "none")), limit=200)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        data = (json.dumps({"model": model, "at": iso_utc(time.time()), **record}, sort_keys=True) + "\n").encode()
        for n in range(100):
            key = f"{META_DIR}/{model}/audit/{stamp}-{incident}-{n}.json"
            if self.blobs.create(key, data):
                return key
        raise StoreConflict(f"{self.location}: could not append an audit record for {model!r}")

    def audit(self, model: str) -> list[dict[str, Any]]:
        check_name(model)
        return [json.loads(self.blobs.read(k)) for k in self.blobs.keys(f"{META_DIR}/{model}/audit")]

    def audit_of(self, model: str, incident: str) -> list[dict[str, Any]]:
        """The model's audit records of one incident (or release), oldest first: only their keys are
        listed and only theirs read (the incident is part of each key)."""
        check_name(model)
        part = safe_part(incident, limit=200)
        records = []
        for key in sorted(self.blobs.keys(f"{META_DIR}/{model}/audit")):
            name = key.rsplit("/", 1)[-1].removesuffix(".json")
            _stamp, _, rest = name.partition("-")
            if rest.rsplit("-", 1)[0] == part:
                records.append(json.loads(self.blobs.read(key)))
        return records
