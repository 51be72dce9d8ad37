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



PRIVATE_MOST = 256 << 20  # a resident process copies a contextual matrix up to this size (~170,000 memories)


class Contextual:
    """The contextual model's vectors of a store (`cache/contextual.f32` + `cache/contextual.json`).

    A sidecar to the static vectors, keyed by the same text hash (`vhash`): rows are appended, never
    rewritten, and `contextual.json` (written atomically after the rows) says which model made them and
    which key each row holds, so a reader never sees a row before its key. Filled by whoever has the model
    loaded and the time: `cortex serve` and the MCP server in a background thread, `cortex recall` up to a
    few hundred missing rows per call — never a hook. Until every memory has a row, recall ranks without
    them. Deleting both files loses nothing but the time to compute them again.
    """

    def __init__(self, folder: Path) -> None:
        self._owned: Any = None  # (the loaded matrix, this process's copy of it): `for_products`
        self.matrix_path = folder / "contextual.f32"
        self.keys_path = folder / "contextual.json"
        self.lock_path = folder / "contextual.lock"
        self._loaded: tuple[tuple[int, int], Any, dict[str, int]] | None = None

    def _keys(self) -> tuple[str, int, list[str]] | None:
        import json

        try:
            data = json.loads(self.keys_path.read_text(encoding="utf-8"))
            return str(data["model"]), int(data["dim"]), [str(k) for k in data["keys"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def load(self, identity: str) -> tuple[Any, dict[str, int]] | None:
        """(matrix, row of each text hash) for `identity`'s vectors; None when there are none (or another model's)."""
        try:
            stat = self.keys_path.stat()
        except OSError:
            return None
        mark = (stat.st_mtime_ns, stat.st_size)
        if self._loaded is not None and self._loaded[0] == mark:
            return self._loaded[1], self._loaded[2]
        found = self._keys()
        if found is None or found[0] != identity or not found[2]:
            return None
        _, dim, keys = found
        matrix = load(self.matrix_path, len(keys), dim)
        if matrix is None:
            return None
        import numpy as np

        self._loaded = (mark, np.ascontiguousarray(matrix), {key: row for row, key in enumerate(keys)})
        self._owned = None
        return self._loaded[1], self._loaded[2]

    def for_products(self, matrix: Any, private: bool) -> Any:
        """What to multiply for `matrix` (the one `load` gave). `private` (a resident process): its own copy,
        made once per load, instead of the mapped file (up to `PRIVATE_MOST` bytes): numpy backs a copy this
        big with huge pages, and the product of a query with every vector, on the served prompt's path, reads
        it faster (10,000 vectors: 0.70 -> 0.58 ms in `cortex serve`). The caller asks once every row is in,
        not while a fill still appends them."""
        if not private or matrix.nbytes > PRIVATE_MOST:
            return matrix
        if self._owned is None or self._owned[0] is not matrix:
            import numpy as np

            self._owned = (matrix, np.array(matrix))
        return self._owned[1]

    def add(self, identity: str, keys: list[str], matrix: Any) -> None:
        """Append rows for `keys` (the caller holds `lock_path`); another model's rows are dropped first."""
        import json

        from cortex.files import atomic_write

        found = self._keys()
        dim = int(matrix.shape[1])
        if found is None or found[0] != identity or found[1] != dim or not fits(self.matrix_path, len(found[2]), dim):
            found = (identity, dim, [])
        old = found[2]
        append(self.matrix_path, len(old), dim, matrix)
        atomic_write(self.keys_path, json.dumps({"model": identity, "dim": dim, "keys": old + list(keys)}),
                     durable=False)


def rows_view(matrix: Any, rows: Any) -> tuple[Any, Any]:
    """What `cosines` multiplies for these rows of a vector matrix: the rows copied out when the matrix holds
    many more (vectors of archived, filtered or replaced memories), else the whole matrix and the rows to pick
    from its product. A one-shot command at 10,000 memories copied 15 MB of contextual and 10 MB of static
    vectors (~40 ms) for a single product; a resident process keeps either view for every query of a sync."""
    import numpy as np

    if 2 * len(rows) < matrix.shape[0]:
        return np.ascontiguousarray(matrix[rows]), None
    return matrix, rows


SPLIT_ROWS = 4096  # a product over at least this many rows may be split in two (`cosines(..., beside=...)`)


def cosines(view: tuple[Any, Any], vector: Any, beside: Any = None) -> Any:
    """The product of a `rows_view` with `vector`. With `beside` (a function that starts a callable on another
    thread and returns its future), a big matrix is multiplied in two halves at once: the product waits on
    memory, and two cores read it faster than one (10,000 contextual vectors: 0.48 -> 0.33 ms)."""
    import numpy as np

    matrix, rows = view
    if beside is None or matrix.shape[0] < SPLIT_ROWS:
        products = matrix @ vector
    else:
        half = matrix.shape[0] // 2
        products = np.empty(matrix.shape[0], dtype=np.result_type(matrix.dtype, vector.dtype))
        first = beside(lambda: np.matmul(matrix[:half], vector, out=products[:half]))
        np.matmul(matrix[half:], vector, out=products[half:])
        first.result()
    return products if rows is None else products[rows]
