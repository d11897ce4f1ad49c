"""Content-addressed XML files: `<root>/xml/<sha256[:2]>/<sha256>.xml`, written atomically.

The same XML text always lands at the same path, so two builders writing one algorithm write the same
bytes; a temp file in the target directory plus `os.replace` means a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from collsynth.catalog.errors import CatalogError


def xml_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def xml_relpath(sha256: str) -> Path:
    """Where the XML with this hash lives, relative to the store root."""
    return Path("xml") / sha256[:2] / f"{sha256}.xml"


def store_xml(root: str | os.PathLike[str], text: str) -> tuple[str, Path]:
    """Write `text` under `root` by its hash (a no-op when already there); returns (sha256, path)."""
    digest = xml_sha256(text)
    target = Path(root) / xml_relpath(digest)
    if target.is_file():
        return digest, target
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, text)
    return digest, target


def load_xml_text(root: str | os.PathLike[str], sha256: str) -> str:
    """The stored XML text with this hash; checks the content against the hash."""
    path = Path(root) / xml_relpath(sha256)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read the stored XML ({exc.strerror}); rebuild the catalog entry "
                           "(collsynth catalog build PLAN --retry-failed)") from None
    if xml_sha256(text) != sha256:
        raise CatalogError(f"{path}: the file does not match its hash (edited or corrupt); delete it and rebuild")
    return text


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to a temp file in the same directory and rename it into place."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; give the file the usual mode
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
