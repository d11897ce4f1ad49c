"""Content-addressed XML files: `<root>/xml/<sha256[:2]>/<sha256>.xml`, written atomically.

The same XML text always lands at the same path, so two builders writing one algorithm write the same
bytes; a temp file in the target directory plus `os.replace` means a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from collsynth.catalog.errors import CatalogError
from collsynth.core.files import write_atomic


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
    write_atomic(target, text)
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
