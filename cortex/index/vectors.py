"""The vectors: one float32 row per distinct embedded text, keyed by text hash.

`cache/vectors.f32` is a raw little-endian float32 matrix of `len(keys)`
rows × `dim` columns; the row order is `Manifest.vector_keys`. Rows are only
appended (a text seen before — on another branch, before a revert — keeps
its row and is never embedded twice), so a reader holding an older manifest
still finds its rows. A rebuild writes a compact file from scratch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load(path: Path, rows: int, dim: int) -> Any:
    """The matrix as a read-only numpy array (memory-mapped); None when it does not fit the manifest."""
    import numpy as np

    if rows == 0 or dim == 0:
        return np.zeros((0, dim), dtype=np.float32)
    try:
        if path.stat().st_size < rows * dim * 4:
            return None
        return np.memmap(path, dtype="<f4", mode="r", shape=(rows, dim))
    except (OSError, ValueError):
        return None


def fits(path: Path, rows: int, dim: int) -> bool:
    """Whether the file holds at least `rows` rows (checked by size: no numpy import)."""
    if rows == 0:
        return True
    try:
        return path.stat().st_size >= rows * dim * 4
    except OSError:
        return False


def append(path: Path, committed_rows: int, dim: int, matrix: Any, crc: int | None = None) -> int | None:
    """Append rows after the committed ones (dropping any rows a crashed writer left beyond them).

    With `crc`, the CRC-32 of the committed rows, returns the CRC-32 of the file after the append (so the
    manifest can record it without reading the file again)."""
    import zlib

    import numpy as np

    data = np.ascontiguousarray(matrix, dtype="<f4").tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as handle:
        handle.truncate(committed_rows * dim * 4)
        handle.seek(committed_rows * dim * 4)
        handle.write(data)
        handle.flush()  # no fsync: a cache lost in a power cut is rebuilt
    return None if crc is None else zlib.crc32(data, crc)

