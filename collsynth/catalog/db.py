"""The catalog index: one SQLite file (WAL mode) next to its content-addressed XML store.

Tables:
  meta(key, value)                      schema version
  topologies(fingerprint, name, data)   every topology an entry was built for (JSON), so export and
                                        `best` can re-simulate without the original name or file
  items(key, ...)                       finished work items: status done|failed, message, provenance
  claims(key, owner, claimed_at)        items a builder is working on right now (several builders);
                                        claimed_at is the owner's last heartbeat
  entries(id, ...)                      one algorithm x compile variant: provenance, compile options,
                                        XML hash, verification result; status ok|failed
  times(entry_id, dtype, requested_bytes, ...)   predicted time per size (nccl-tests columns)

Writers use short `BEGIN IMMEDIATE` transactions with a busy timeout, so several builders (processes) can
share one database; readers never block under WAL. XML files are written before the rows that name them.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import collsynth
from collsynth.catalog.errors import CatalogError
from collsynth.catalog.plan import CompileVariant, WorkItem
from collsynth.catalog.results import FAILED, OK, ItemResult, SimPoint
from collsynth.catalog.store import load_xml_text, store_xml
from collsynth.topologies import Topology

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 60_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS topologies (
    fingerprint TEXT PRIMARY KEY, name TEXT NOT NULL, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    key TEXT PRIMARY KEY, label TEXT NOT NULL, topology TEXT NOT NULL, fingerprint TEXT NOT NULL,
    collective TEXT NOT NULL, ranks INTEGER NOT NULL, source TEXT NOT NULL, params TEXT NOT NULL,
    variants TEXT NOT NULL, status TEXT NOT NULL CHECK (status IN ('done', 'failed')), message TEXT NOT NULL,
    seconds REAL NOT NULL, provenance TEXT NOT NULL, collsynth_version TEXT NOT NULL, finished_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT NOT NULL, claimed_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    id TEXT PRIMARY KEY, item_key TEXT NOT NULL, name TEXT NOT NULL, topology TEXT NOT NULL,
    fingerprint TEXT NOT NULL, collective TEXT NOT NULL, ranks INTEGER NOT NULL, source TEXT NOT NULL,
    chunks INTEGER, steps INTEGER, rounds INTEGER, provenance TEXT NOT NULL, compile TEXT NOT NULL,
    protocol TEXT NOT NULL, instances INTEGER NOT NULL, inplace INTEGER NOT NULL, xml_sha256 TEXT,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed')), stage TEXT NOT NULL, message TEXT NOT NULL,
    ir_stats TEXT NOT NULL, created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS entries_by_target ON entries (fingerprint, collective, status);
CREATE INDEX IF NOT EXISTS entries_by_item ON entries (item_key);
CREATE TABLE IF NOT EXISTS times (
    entry_id TEXT NOT NULL, dtype TEXT NOT NULL, requested_bytes INTEGER NOT NULL, size_bytes INTEGER NOT NULL,
    count INTEGER NOT NULL, time_us REAL NOT NULL, algbw REAL NOT NULL, busbw REAL NOT NULL, tiles INTEGER NOT NULL,
    extrapolated INTEGER NOT NULL, PRIMARY KEY (entry_id, dtype, requested_bytes));
"""


@dataclass(frozen=True)
class EntryRow:
    """One catalog entry as stored."""

    id: str
    item_key: str
    name: str
    topology: str
    fingerprint: str
    collective: str
    ranks: int
    source: str
    chunks: int | None
    steps: int | None
    rounds: int | None
    provenance: dict[str, Any]
    variant: CompileVariant
    xml_sha256: str | None
    status: str
    stage: str
    message: str
    ir_stats: dict[str, Any]
    created_at: float

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def shape(self) -> str:
        """(chunks, steps, rounds) where known, e.g. 'C2 S2 R3'."""
        parts = [f"{label}{value}" for label, value in (("C", self.chunks), ("S", self.steps), ("R", self.rounds))
                 if value is not None]
        return " ".join(parts)

    def __str__(self) -> str:
        return f"{self.id[:10]}  {self.name}  {self.topology} {self.collective}  {self.variant}  {self.status}"


@dataclass(frozen=True)
class ItemRow:
    key: str
    label: str
    status: str
    message: str
    seconds: float
    source: str
    collective: str
    topology: str


class Catalog:
    """An open catalog database. Use as a context manager, or call close()."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.path = Path(path)
        if not self.path.exists() and not create:
            raise CatalogError(f"no catalog at {self.path}; build one with `collsynth catalog build PLAN --db "
                               f"{self.path}`")
        self.check_creatable(self.path)
        try:
            self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise CatalogError(f"{self.path}: cannot switch the database to WAL mode (got {mode}); put it on a "
                                   "local file system")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._init_schema()
        except sqlite3.DatabaseError as exc:
            raise CatalogError(f"{self.path}: not a usable catalog database ({exc}); give a .sqlite file written "
                               "by `collsynth catalog build`") from None

    @staticmethod
    def check_creatable(path: str | os.PathLike[str]) -> None:
        """Raise CatalogError when `path` can be neither opened nor created as a catalog (touches nothing)."""
        path = Path(path)
        if path.is_dir():
            raise CatalogError(f"{path} is a directory; give the catalog's .sqlite file")
        if not path.exists() and not path.parent.is_dir():
            raise CatalogError(f"cannot create {path}: directory {path.parent} does not exist")

    @property
    def root(self) -> Path:
        """The directory that holds the database and its XML store."""
        return self.path.parent

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction (taken immediately, so it never deadlocks on upgrade). BEGIN is inside
        the guard: a Ctrl-C that lands just after it still rolls back, so the next write can start."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            yield self._conn
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        else:
            self._conn.execute("COMMIT")

    def _init_schema(self) -> None:
        with self._write() as conn:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) != SCHEMA_VERSION:
                raise CatalogError(f"{self.path}: catalog schema version {row[0]}, this collsynth reads version "
                                   f"{SCHEMA_VERSION}; rebuild the catalog into a new file")

    # --- work items ------------------------------------------------------------------------------------
    def finished_keys(self, *, include_failed: bool = True) -> set[str]:
        """Keys of finished items; with include_failed=False, items that failed or have a failed entry
        count as unfinished (for --retry-failed)."""
        if include_failed:
            return {row[0] for row in self._conn.execute("SELECT key FROM items")}
        rows = self._conn.execute(
            "SELECT key FROM items WHERE status = 'done' AND key NOT IN "
            "(SELECT item_key FROM entries WHERE status = 'failed')")
        return {row[0] for row in rows}

    def claim(self, key: str, owner: str, *, stale_after_s: float) -> bool:
        """Take `key` for `owner` unless another live builder holds it or the item is finished. A claim is
        live while its owner's heartbeat (`claimed_at`, refreshed by `heartbeat`) is younger than
        `stale_after_s` and, for an owner on this host, its process still exists."""
        now = time.time()
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM items WHERE key = ? AND status = 'done' AND key NOT IN "
                            "(SELECT item_key FROM entries WHERE status = 'failed')", (key,)).fetchone():
                return False
            row = conn.execute("SELECT owner, claimed_at FROM claims WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] != owner and claim_is_live(row[0], row[1], now, stale_after_s):
                return False
            conn.execute("INSERT OR REPLACE INTO claims (key, owner, claimed_at) VALUES (?, ?, ?)", (key, owner, now))
            return True

    def heartbeat(self, owner: str) -> None:
        """Refresh every claim `owner` holds (a live builder calls this well within the lease)."""
        with self._write() as conn:
            conn.execute("UPDATE claims SET claimed_at = ? WHERE owner = ?", (time.time(), owner))

    def live_claims(self, keys: Iterable[str], owner: str, *, stale_after_s: float) -> set[str]:
        """Those of `keys` that another live builder holds."""
        wanted = set(keys)
        now = time.time()
        return {key for key, holder, at in self.claims()
                if key in wanted and holder != owner and claim_is_live(holder, at, now, stale_after_s)}

    def release_all(self, owner: str) -> None:
        """Drop every claim `owner` still holds (a builder that stops early)."""
        with self._write() as conn:
            conn.execute("DELETE FROM claims WHERE owner = ?", (owner,))

    def release(self, keys: Iterable[str], owner: str) -> None:
        keys = list(keys)
        if not keys:
            return
        with self._write() as conn:
            conn.executemany("DELETE FROM claims WHERE key = ? AND owner = ?", [(k, owner) for k in keys])

    def record(self, item: WorkItem, result: ItemResult) -> list[str]:
        """Store an item's result: XML files first (content-addressed), then every row in one transaction.
        Replaces an earlier result of the same item (a retry). Returns the entry ids."""
        hashes: list[str | None] = []
        for entry in result.entries:
            if entry.passed and entry.xml is not None:
                stored, _ = store_xml(self.root, entry.xml)
                hashes.append(stored)
            else:
                hashes.append(None)
        now = time.time()
        ids = [entry.entry_id(item.key) for entry in result.entries]
        topo = item.topology
        with self._write() as conn:
            conn.execute("INSERT OR IGNORE INTO topologies (fingerprint, name, data) VALUES (?, ?, ?)",
                         (item.fingerprint, topo.name, json.dumps(topo.to_dict(), sort_keys=True)))
            old = [row[0] for row in conn.execute("SELECT id FROM entries WHERE item_key = ?", (item.key,))]
            conn.executemany("DELETE FROM times WHERE entry_id = ?", [(i,) for i in old])
            conn.execute("DELETE FROM entries WHERE item_key = ?", (item.key,))
            conn.execute(
                "INSERT OR REPLACE INTO items (key, label, topology, fingerprint, collective, ranks, source, params, "
                "variants, status, message, seconds, provenance, collsynth_version, finished_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (item.key, item.label, topo.name, item.fingerprint, item.collective_name, topo.num_ranks, item.source,
                 json.dumps(dict(item.params), sort_keys=True), json.dumps([v.to_dict() for v in item.variants]),
                 "done" if result.ok else "failed", result.message, result.seconds,
                 json.dumps(result.provenance, sort_keys=True, default=str), collsynth.__version__, now))
            for entry_id, entry, digest in zip(ids, result.entries, hashes, strict=True):
                conn.execute(
                    "INSERT OR REPLACE INTO entries (id, item_key, name, topology, fingerprint, collective, ranks, "
                    "source, chunks, steps, rounds, provenance, compile, protocol, instances, inplace, xml_sha256, "
                    "status, stage, message, ir_stats, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (entry_id, item.key, entry.name, topo.name, item.fingerprint, item.collective_name,
                     topo.num_ranks, item.source, entry.chunks, entry.steps, entry.rounds,
                     json.dumps(entry.provenance, sort_keys=True, default=str),
                     json.dumps(entry.variant.to_dict(), sort_keys=True), entry.variant.protocol,
                     entry.variant.instances, int(entry.variant.inplace), digest,
                     OK if entry.passed and digest else FAILED, entry.stage, entry.message,
                     json.dumps(entry.ir_stats, sort_keys=True), now))
                self._insert_times(conn, entry_id, entry.times)
            conn.execute("DELETE FROM claims WHERE key = ?", (item.key,))
        return ids

    def set_provenance(self, entry_id: str, provenance: dict[str, Any]) -> None:
        """Replace an entry's provenance (the builder adds tuning records for new sizes)."""
        with self._write() as conn:
            conn.execute("UPDATE entries SET provenance = ? WHERE id = ?",
                         (json.dumps(provenance, sort_keys=True, default=str), entry_id))

    def add_times(self, entry_id: str, points: Sequence[SimPoint]) -> None:
        with self._write() as conn:
            self._insert_times(conn, entry_id, points)

    @staticmethod
    def _insert_times(conn: sqlite3.Connection, entry_id: str, points: Sequence[SimPoint]) -> None:
        conn.executemany(
            "INSERT OR REPLACE INTO times (entry_id, dtype, requested_bytes, size_bytes, count, time_us, algbw, busbw, "
            "tiles, extrapolated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(entry_id, p.dtype, p.requested_bytes, p.size_bytes, p.count, p.time_us, p.algbw_GBps, p.busbw_GBps,
              p.tiles, int(p.extrapolated)) for p in points])

    # --- reading ---------------------------------------------------------------------------------------
    def items(self) -> list[ItemRow]:
        rows = self._conn.execute("SELECT key, label, status, message, seconds, source, collective, topology "
                                  "FROM items ORDER BY topology, collective, label")
        return [ItemRow(*row) for row in rows]

    def entries(self, *, topology: str | None = None, fingerprint: str | None = None,
                collective: str | None = None, status: str | None = None) -> list[EntryRow]:
        """Entries filtered by topology name, fingerprint, collective and status, in a stable order."""
        where, args = [], []
        for column, value in (("topology", topology), ("fingerprint", fingerprint), ("collective", collective),
                              ("status", status)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = f"SELECT {_ENTRY_COLUMNS} FROM entries"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY topology, collective, source, name, protocol, instances, inplace"
        return [_entry_row(row) for row in self._conn.execute(sql, args)]

    def entry(self, id_prefix: str) -> EntryRow:
        """The entry whose id starts with `id_prefix` (at least 4 characters, unambiguous)."""
        prefix = id_prefix.strip().lower()
        if len(prefix) < 4 or any(ch not in "0123456789abcdef" for ch in prefix):
            raise CatalogError(f"entry id {id_prefix!r}: give at least 4 hex digits of an id from "
                               "`collsynth catalog list`")
        rows = self._conn.execute(f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE id LIKE ?", (prefix + "%",)).fetchall()
        if not rows:
            raise CatalogError(f"no entry with id {id_prefix!r} in {self.path}; `collsynth catalog list` shows them")
        if len(rows) > 1:
            raise CatalogError(f"entry id {id_prefix!r} is ambiguous ({len(rows)} entries); give more digits")
        return _entry_row(rows[0])

    def times(self, entry_id: str, dtype: str | None = None) -> list[SimPoint]:
        sql = ("SELECT requested_bytes, size_bytes, count, dtype, time_us, algbw, busbw, tiles, extrapolated "
               "FROM times WHERE entry_id = ?")
        args: list[Any] = [entry_id]
        if dtype is not None:
            sql += " AND dtype = ?"
            args.append(dtype)
        sql += " ORDER BY dtype, requested_bytes"
        return [SimPoint(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8]))
                for r in self._conn.execute(sql, args)]

    def dtypes(self) -> list[str]:
        return [row[0] for row in self._conn.execute("SELECT DISTINCT dtype FROM times ORDER BY dtype")]

    def topology(self, fingerprint: str) -> Topology:
        row = self._conn.execute("SELECT data FROM topologies WHERE fingerprint = ?", (fingerprint,)).fetchone()
        if row is None:
            raise CatalogError(f"{self.path}: no topology with fingerprint {fingerprint}")
        return Topology.from_dict(json.loads(row[0]))

    def topologies(self) -> list[tuple[str, str]]:
        """(fingerprint, name) of every topology in the catalog."""
        rows = self._conn.execute("SELECT fingerprint, name FROM topologies ORDER BY name")
        return [(row[0], row[1]) for row in rows]

    def xml_text(self, entry: EntryRow) -> str:
        if entry.xml_sha256 is None:
            raise CatalogError(f"entry {entry.id[:10]} ({entry.name}) failed at {entry.stage or 'build'} and has no "
                               f"XML: {entry.message}")
        return load_xml_text(self.root, entry.xml_sha256)

    def claims(self) -> list[tuple[str, str, float]]:
        return [tuple(row) for row in self._conn.execute("SELECT key, owner, claimed_at FROM claims")]  # type: ignore[misc]


def builder_owner() -> str:
    """A builder's name in the claims table: host, pid and a random tag (`claim_is_live` reads the first two)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def claim_is_live(owner: str, claimed_at: float, now: float, stale_after_s: float) -> bool:
    """A claim counts while its heartbeat is fresh and, when its builder ran on this host, that process exists."""
    if now - claimed_at >= stale_after_s:
        return False
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False  # its builder is gone (killed, crashed): the item is free at once
    except OSError:
        return True  # exists, owned by another user
    return True


_ENTRY_COLUMNS = ("id, item_key, name, topology, fingerprint, collective, ranks, source, chunks, steps, rounds, "
                  "provenance, compile, xml_sha256, status, stage, message, ir_stats, created_at")


def _entry_row(row: Sequence[Any]) -> EntryRow:
    return EntryRow(id=row[0], item_key=row[1], name=row[2], topology=row[3], fingerprint=row[4], collective=row[5],
                    ranks=row[6], source=row[7], chunks=row[8], steps=row[9], rounds=row[10],
                    provenance=json.loads(row[11]), variant=CompileVariant.from_dict(json.loads(row[12])),
                    xml_sha256=row[13], status=row[14], stage=row[15], message=row[16], ir_stats=json.loads(row[17]),
                    created_at=row[18])
