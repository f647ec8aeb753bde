"""Walking a source folder: the files that are read, and the rights each one inherits.

Hidden files and folders (a leading ``.``) are ignored; symbolic links and files of other
types are reported as skipped. Each folder's ``_access.json`` is merged over its parent's
rights (:mod:`govrag.harvest.access`). A file that cannot be judged safely is *held*: it
stays listed (so it is never mistaken for a deleted file) with the reason it is not read,
e.g. an invalid sidecar above it. A folder that cannot be listed is reported, and files
last seen under it are held too.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from govrag.errors import InputError
from govrag.harvest.access import ACCESS_FILE, IDENTITIES_FILE, AccessFile, Rights, load_access
from govrag.harvest.connector import Item
from govrag.harvest.extract import FORMATS


@dataclass(frozen=True)
class TreeFile:
    """A file of a read type, with its inherited rights (front matter not yet applied)."""

    rel: str
    path: Path
    fmt: str
    size: int
    mtime_ns: int
    #: ``None`` when the file is held (``held`` says why).
    rights: Rights | None
    held: str | None = None
    #: Hash of ``rights`` and the source settings (a change re-emits the file).
    rights_key: str = ""


@dataclass
class Tree:
    """The listing of one folder tree."""

    files: dict[str, TreeFile] = field(default_factory=dict)
    #: Skipped files, sidecar errors and warnings, unlistable folders.
    notes: list[Item] = field(default_factory=list)
    #: Relative paths (posix) of folders that could not be listed.
    unlisted: list[str] = field(default_factory=list)

    def hides(self, rel: str) -> bool:
        """Whether ``rel`` lies in a folder that could not be listed (so it may still exist)."""
        return any(rel.startswith(f"{d}/") for d in self.unlisted)


def walk_tree(root: Path, salt: str) -> Tree:
    """List ``root``. ``salt`` (the source's settings) goes into every file's rights key."""
    if not root.is_dir():
        raise InputError(f"source folder {str(root)!r} does not exist or is not a folder")
    tree = Tree()
    rights: dict[Path, Rights | str] = {}  # a str: the invalid sidecar that holds the folder

    def unlisted(exc: OSError) -> None:
        where = Path(exc.filename or root)
        tree.unlisted.append(where.relative_to(root).as_posix())
        tree.notes.append(Item(str(where), error=InputError(f"cannot list: {exc.strerror}")))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unlisted):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and not (here / d).is_symlink()
        )
        current = rights.get(here.parent, Rights()) if here != root else Rights()
        own = AccessFile()
        if not isinstance(current, str) and (here / ACCESS_FILE).is_file():
            try:
                own = load_access(here / ACCESS_FILE)
                current = current.merged(own)
            except InputError as exc:
                tree.notes.append(Item(str(here / ACCESS_FILE), error=exc))
                current = str(here / ACCESS_FILE)
        rights[here] = current
        for name in sorted(own.files.keys() - set(filenames)):
            note = f"'files' names {name!r}, which is not a file in this folder"
            tree.notes.append(Item(str(here / ACCESS_FILE), warning=note))
        for name in sorted(filenames):
            path = here / name
            if name.startswith(".") or name == ACCESS_FILE:
                continue
            if name == IDENTITIES_FILE and here == root:
                continue
            fmt = FORMATS.get(path.suffix.lower())
            if fmt is None or path.is_symlink():
                tree.notes.append(Item(str(path), skipped=True))
                continue
            rel = path.relative_to(root).as_posix()
            try:
                st = path.stat()
            except OSError as exc:
                tree.files[rel] = TreeFile(
                    rel, path, fmt, 0, 0, None, f"cannot read: {exc.strerror}"
                )
                continue
            head = (rel, path, fmt, st.st_size, st.st_mtime_ns)
            if isinstance(current, str):
                held = f"not ingested: its rights file {current} is invalid"
                tree.files[rel] = TreeFile(*head, rights=None, held=held)
                continue
            mine = current.merged(own.files.get(name))
            key = hashlib.sha256(json.dumps([mine.key(), salt]).encode()).hexdigest()
            tree.files[rel] = TreeFile(*head, rights=mine, rights_key=key)
    return tree
