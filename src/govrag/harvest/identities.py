"""A filesystem source's ``_identities.jsonl``: a snapshot of the bindings *that source* made.

The file lists identity and group records (the JSONL format; ``source_system`` defaults to
the source's and may not be another). Several sources may share a source system, and other
feeds (a JSONL export) may bind its accounts too, so the file must not be able to take what
it did not give. The rules:

* a binding the file made before (its sync state's ``identities``) and no longer lists is
  unbound, before the file's own lines apply;
* the file binds a free account, and the binding becomes its own; re-listing a binding that
  another source or feed made is a no-op and never becomes the file's, so dropping the line
  later unbinds nothing;
* ``"active": false`` and ``previous_email`` act only on bindings the file made; on another
  source's binding they are refused per line (an :class:`~govrag.errors.IdentityConflict`)
  and nothing changes. A configured JSONL source is held to the same by the store (it may
  move or unbind only bindings it or no configured source made); a JSONL file ingested by
  path, the operator's authoritative feed, is not limited.

Each line is judged against the account's owner at the moment it is applied (the harvester
applies an item before it asks for the next), and the bindings the file made are recorded
only for lines that were not refused, so a dry run predicts the same refusals.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from pathlib import Path

from govrag.errors import IdentityConflict, InputError
from govrag.harvest.access import IDENTITIES_FILE
from govrag.harvest.connector import Item, OwnerLookup
from govrag.harvest.ingest import read_lines, validate_record
from govrag.harvest.records import IdentityRecord, Record
from govrag.strict_json import load_json

#: An identity binding: (email, account id) of the source's system.
Binding = tuple[str, str]


class IdentitiesFile:
    """The identities file of one source, for one run.

    Set :attr:`made` to the bindings the file made before (from the sync state) before
    :meth:`items`; after the run, :meth:`made_after` is what to record as the file's now.
    """

    def __init__(self, path: Path, source_system: str, *, max_text_bytes: int) -> None:
        self.path = path
        self.source_system = source_system
        self.max_text_bytes = max_text_bytes
        #: Bindings the file made in earlier runs.
        self.made: set[Binding] = set()
        self._bindings: dict[str, Binding] = {}  # where -> binding the file holds after it
        self._unbinds: dict[str, Binding] = {}  # where -> binding no longer listed

    def size(self) -> int:
        return self.path.stat().st_size if self.path.is_file() else 0

    def items(self, owner: OwnerLookup) -> Iterator[Item]:
        """The unbinds of bindings no longer listed, then one item per line of the file."""
        lines: list[tuple[str, Record | InputError, int]] = []
        listed: set[Binding] = set()
        if self.path.is_file():
            for number, raw, consumed in read_lines(self.path):
                if not raw:
                    continue
                where = f"{self.path}:{number}"
                try:
                    record = self._record(raw)
                except InputError as exc:
                    lines.append((where, exc, consumed))
                    continue
                if isinstance(record, IdentityRecord):
                    listed.add((record.email, record.account_id))
                    if record.previous_email is not None:
                        listed.add((record.previous_email, record.account_id))
                lines.append((where, record, consumed))
        mine = set(self.made)  # what the file has made, as the run goes on
        for email, account in sorted(self.made - listed):
            where = f"{self.path} (no longer binds {email} to {account})"
            self._unbinds[where] = (email, account)
            mine.discard((email, account))
            unbind = IdentityRecord(type="identity", email=email, account_id=account,
                                    source_system=self.source_system, active=False)  # fmt: skip
            yield Item(where, records=(unbind,))
        for where, got, consumed in lines:
            if isinstance(got, IdentityRecord):
                try:
                    self._claim(where, got, owner(got.source_system, got.account_id), mine)
                except IdentityConflict as exc:
                    got = exc
            if isinstance(got, InputError):
                yield Item(where, error=got, size=consumed)
            else:
                yield Item(where, records=(got,), size=consumed)

    def made_after(self, failed: Collection[str]) -> set[Binding]:
        """The bindings the file made, once the run's items were applied (``failed``: the
        ``where`` of every item that was not)."""
        out = {b for where, b in self._bindings.items() if where not in failed}
        return out | {b for where, b in self._unbinds.items() if where in failed}

    def _claim(
        self, where: str, record: IdentityRecord, owner: str | None, mine: set[Binding]
    ) -> None:
        """Check that the file may apply ``record`` (the account's owner is ``owner`` now; it
        made ``mine``) and note the binding it will have made.

        Raises:
            IdentityConflict: the record would unbind or move a binding the file did not make.
        """
        binding = (record.email, record.account_id)
        account = f"account {record.account_id!r} of source system {record.source_system!r}"
        if not record.active:
            if owner == record.email and binding not in mine:
                raise IdentityConflict(
                    f"{account} is bound to {owner!r} by another source or feed, not by this "
                    "identities file; a source's identities file unbinds only bindings it made, "
                    "so nothing changed. Unbind it where it was bound (or with a JSONL ingest)"
                )
            mine.discard(binding)
        elif record.previous_email not in (None, record.email):
            moved = (record.previous_email, record.account_id)
            if owner == record.previous_email:
                if moved not in mine:
                    raise IdentityConflict(
                        f"{account} is bound to {owner!r} by another source or feed, not by "
                        "this identities file; a source's identities file moves only bindings "
                        f"it made, so it was not rebound to {record.email!r} (nothing changed). "
                        "Rebind it where it was bound (or with a JSONL ingest)"
                    )
                mine.discard(moved)
                mine.add(binding)
                self._bindings[where] = binding
            elif owner == record.email and binding in mine:
                self._bindings[where] = binding
        elif owner is None:  # free: the file binds it
            mine.add(binding)
            self._bindings[where] = binding
        elif owner == record.email and binding in mine:  # the file's binding, still held
            self._bindings[where] = binding
        # Otherwise the binding holds from elsewhere (a no-op the file never owns) or the
        # account is another email's (the store refuses the record).

    def _record(self, raw: bytes) -> Record:
        obj = load_json(raw)
        if isinstance(obj, dict):
            if obj.get("type") not in ("identity", "group"):
                raise InputError(
                    f"record type {obj.get('type')!r} does not belong in {IDENTITIES_FILE}; "
                    "it holds identity and group records only"
                )
            ss = obj.setdefault("source_system", self.source_system)
            if ss != self.source_system:
                raise InputError(
                    f"source_system {ss!r} is not this source's {self.source_system!r}; "
                    "omit it or fix it"
                )
        return validate_record(obj, max_text_bytes=self.max_text_bytes)
