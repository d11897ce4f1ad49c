"""File input and output for every stage: one reader path, one safe writer.

Reading (`read_bytes`, `read_text`, `read_json_file`): only regular files, opened without blocking (a FIFO with
no writer never hangs us), at most `caps.INPUT_BYTES` bytes, UTF-8 text, JSON without NaN/Infinity and without
nesting that would overflow the parser. Every problem is one line of the caller's error class, naming the file.

Writing (`atomic_path`, `write_atomic`, `write_atomic_pieces`): a temporary file in the target's directory,
renamed over the target only when the target is missing or a regular file (through a symlink: the file it
points to). A device (`/dev/full`), a FIFO, a socket, a directory or an unwritable place is a one-line
`OutputError`; nothing is deleted or half-written.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from collsynth.core.caps import INPUT_BYTES
from collsynth.core.errors import CollsynthError


class InputFileError(CollsynthError):
    """An input file that cannot be read as what it should be."""


class OutputError(CollsynthError):
    """An output path that collsynth will not (or cannot) write."""


# --- reading -----------------------------------------------------------------------------------------------

def read_bytes(path: str | os.PathLike[str], error: type[Exception] = InputFileError, what: str = "the file"
               ) -> bytes:
    """The bytes of a regular file of at most INPUT_BYTES; anything else is one line of `error`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{path}: no such file; give the path of {what}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{path}: is a directory; give the path of {what} (a file)")
        if not stat.S_ISREG(mode):
            raise error(f"{path}: not a regular file (a device, FIFO or socket); give {what} as a regular file")
        limit = INPUT_BYTES.limit()
        chunks: list[bytes] = []
        total = 0
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            total += len(block)
            if total > limit:
                raise error(f"{path}: larger than the cap of {limit} bytes for {what}; raise it with "
                            f"{INPUT_BYTES.env}=N if you mean it")
            chunks.append(block)
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from None
    finally:
        os.close(fd)


def decode_text(data: bytes, path: str | os.PathLike[str], error: type[Exception] = InputFileError,
                what: str = "the file") -> str:
    """UTF-8 text (a leading byte-order mark is dropped); bad bytes are one line naming their offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save {what} "
                    "as UTF-8") from None


def read_text(path: str | os.PathLike[str], error: type[Exception] = InputFileError, what: str = "the file") -> str:
    """The UTF-8 text of a regular file (see `read_bytes`)."""
    return decode_text(read_bytes(path, error, what), path, error, what)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a number")
    return value


def parse_json(text: str, label: str, error: type[Exception] = InputFileError) -> Any:
    """Strict JSON: NaN, Infinity and overflowing numbers are refused, nesting too deep for the parser is an
    error (not a RecursionError); `label` (usually the path) starts every message."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise error(f"{label}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:  # NaN/Infinity, 1e999, integers past Python's digit limit
        raise error(f"{label}: not valid JSON ({exc}); write finite numbers") from None
    except RecursionError:
        raise error(f"{label}: not valid JSON (nested too deeply; collsynth files nest a few levels)") from None


def read_json_file(path: str | os.PathLike[str], error: type[Exception] = InputFileError, what: str = "the file"
                   ) -> Any:
    """Parse a JSON file, turning an unreadable, missing, special, oversized, non-UTF-8 or malformed file into
    one line of `error` that names the file (and, for bad JSON, where it breaks)."""
    return parse_json(read_text(path, error, what), str(path), error)


# --- writing -----------------------------------------------------------------------------------------------

def writable_target(path: str | os.PathLike[str]) -> Path:
    """The regular file a write to `path` will replace (a symlink's target), or raise OutputError when
    `path` names something collsynth must not replace (a device, FIFO, socket, directory, dangling link)."""
    target = Path(path)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise OutputError(f"{target}: cannot write there ({exc.strerror}); choose another output path") from None
    if stat.S_ISLNK(info.st_mode):
        try:
            info = os.stat(target)
        except OSError:
            raise OutputError(f"{target}: a symlink to a missing or unreachable place; remove it or choose another "
                              "output path") from None
        target = Path(os.path.realpath(target))
    if stat.S_ISDIR(info.st_mode):
        raise OutputError(f"{target}: is a directory; give a file name for the output")
    if not stat.S_ISREG(info.st_mode):
        raise OutputError(f"{target}: not a regular file (a device, FIFO or socket); collsynth only replaces "
                          "regular files: choose another output path")
    return target


def check_writable(path: str | os.PathLike[str], *, directory: bool = False) -> Path:
    """Raise OutputError now, before any work, when a later write of the file (or, with `directory`, of files
    into the directory) at `path` would fail: a special file, a directory where a file goes (or a file where
    a directory goes), a path under a file, or a place that refuses new files (probed with a temporary file,
    removed at once: nothing stays behind, missing directories are not created)."""
    target = Path(path)
    if directory:
        if target.exists() and not target.is_dir():
            raise OutputError(f"{target}: exists and is not a directory; choose another output directory")
    else:
        target = writable_target(target)
    folder = target if directory else (target.parent if str(target.parent) else Path("."))
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(f"{target}: {existing} is not a directory; choose an output path under a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".collsynth-probe.", dir=existing)
    except OSError as exc:
        raise OutputError(f"{target}: cannot write there ({exc.strerror}); choose a writable place") from None
    os.close(fd)
    os.unlink(probe)
    return target


def ensure_directory(path: str | os.PathLike[str]) -> Path:
    """Create the output directory `path` (and its parents) or raise OutputError in one line."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{folder}: exists and is not a directory; choose another output directory") from None
    except OSError as exc:
        raise OutputError(f"{folder}: cannot create the output directory ({exc.strerror}); choose a writable "
                          "place") from None
    if not folder.is_dir():
        raise OutputError(f"{folder}: exists and is not a directory; choose another output directory")
    return folder


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it is renamed to `path`, on failure removed.
    For writers that take a file name (matplotlib's savefig, sqlite backups, ...). Only a missing path or a
    regular file is replaced (see `writable_target`); an unwritable place is an OutputError."""
    target = writable_target(path)
    folder = ensure_directory(target.parent if str(target.parent) else Path("."))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{target.suffix}", dir=folder)
    except OSError as exc:
        raise OutputError(f"{target}: cannot write there ({exc.strerror}); choose a writable place") from None
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp creates 0600; give the file the mode a plain open() would (0666 less the umask)
        os.chmod(tmp, 0o666 & ~current_umask())
        writable_target(target)  # still a regular file (or nothing) at the moment of the rename
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{target}: cannot write there ({exc.strerror}); choose a writable place") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process umask."""
    try:  # Linux reports it without changing it (os.umask would, briefly, for every thread)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write text (UTF-8) or bytes to `path` via a temporary file and a rename; return the path."""
    target = Path(path)
    with atomic_path(target) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
    return target


def write_atomic_pieces(path: str | os.PathLike[str], pieces: Iterable[str | bytes]) -> Path:
    """`write_atomic` of the concatenation of `pieces` (text as UTF-8), written as they come: for outputs too
    large to hold as one string (a 1024-rank AllToAll's JSON is ~1.7 GB). Same rules (`atomic_path`): the
    target is replaced only when the last piece is written; an error or interruption leaves it as it was."""
    target = Path(path)
    with atomic_path(target) as tmp, open(tmp, "wb") as out:
        for piece in pieces:
            out.write(piece.encode("utf-8") if isinstance(piece, str) else piece)
    return target
