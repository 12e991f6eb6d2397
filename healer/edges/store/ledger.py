"""The stable ledger's snapshots in the store: read the newest, write the next one exclusively."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from healer.core.ledger import Ledger, LedgerFormatError
from healer.edges.store.base import StoreBase
from healer.edges.store.errors import StoreConflict
from healer.edges.store.layout import MAX_LEDGER_ATTEMPTS, META_DIR, check_name


class Ledgers(StoreBase):
    """The ledger part of the ModelStore (the ledger itself, and its rules, are healer/core/ledger.py)."""

    def _ledger_prefix(self, model: str) -> str:
        return f"{META_DIR}/{model}/ledger"

    def _read_ledger(self, model: str, generation: int, key: str) -> Ledger:
        where = f"{self.location}/{key}"
        ledger = Ledger.from_json(self.blobs.read(key), where=where)
        if ledger.model != model:
            raise LedgerFormatError(f"{where}: model: expected {model!r}, got {ledger.model!r}")
        if ledger.generation != generation:
            # The next write goes to generation + 1: a mismatch would hide it below this snapshot.
            raise LedgerFormatError(f"{where}: generation: expected {generation}, got {ledger.generation}")
        return ledger

    def ledger(self, model: str) -> Ledger:
        check_name(model)
        snapshots = self._snapshots(self._ledger_prefix(model))
        if not snapshots:
            return Ledger(model=model)
        generation, key = snapshots[-1]
        return self._read_ledger(model, generation, key)

    def update_ledger(self, model: str, change: Callable[[Ledger], Ledger]) -> Ledger:
        """Apply ``change`` to the newest snapshot and write it as the next one; retry on a race."""
        for _attempt in range(MAX_LEDGER_ATTEMPTS):
            current = self.ledger(model)
            updated = change(current)
            if updated == current:
                return current  # nothing to record: idempotent
            snapshot = dataclasses.replace(updated, model=model, generation=current.generation + 1)
            key = f"{self._ledger_prefix(model)}/{snapshot.generation:08d}.json"
            if self.blobs.create(key, snapshot.to_json()):
                return snapshot
        raise StoreConflict(
            f"{self.location}: ledger of {model!r} changed under us {MAX_LEDGER_ATTEMPTS} times in a row"
        )
