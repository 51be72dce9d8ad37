"""The vectors: the static model's (`VectorsPart`, synced with the files) and the contextual model's
(`Contextual`, filled by whoever has that model loaded), both rows of the database's `vectors` table keyed by
(model, text hash), a float32 blob each (the pattern `llm` uses for its embeddings). A text seen before (on
another branch, before a revert) keeps its row and is never embedded twice.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import cortex.index.db as db
from cortex.index.manifest import Manifest, embed_text, memory_from_meta

EMBED_CHUNK = 4096  # texts embedded and stored at a time
VECTOR_TOLERANCE = 1e-4  # largest difference `check` accepts between a cached vector and one computed now


class VectorsPart:
    """The static model's vectors of one store (a part of `cortex.index.Index`)."""

    store: Any
    manifest: Manifest | None
    rebuilding: bool
    _encoder_factory: Callable[[], Any] | None
    _encoder: Any
    _encoder_tried: bool
    _vectors: Any
    _allowed: dict[Any, Any]
    encoder_problem: str | None
    vectors_checked: int

    if TYPE_CHECKING:  # provided by the other parts of `Index`
        def conn(self) -> sqlite3.Connection:
            ...

        def records(self) -> Any:
            ...

    def encoder(self) -> Any:
        """The embedding model, loaded once; None (with `encoder_problem` set) when it cannot load."""
        if not self._encoder_tried:
            self._encoder_tried = True
            from cortex.embedding import EncoderUnavailable, load_encoder

            try:
                factory = self._encoder_factory or (lambda: load_encoder(self.store.config().get("embedding.model")))
                self._encoder = factory()
            except EncoderUnavailable as exc:
                self.encoder_problem = str(exc)
                self._encoder = None
        return self._encoder

    def sync_vectors(self, conn: sqlite3.Connection, manifest: Manifest, report: Any, progress: Callable[[int], Any] | None
                     ) -> bool:
        """Embed every text hash of the manifest without a vector (inside the sync's write transaction); True
        when something was written."""
        from cortex.embedding import model_identity

        # Know which model made the vectors without loading it: loading costs more than the whole sync.
        identity = model_identity(self.store.config().get("embedding.model"))
        if identity is None:
            encoder = self.encoder()
            if encoder is None:
                return False
            identity = encoder.identity
        reset = manifest.model != identity
        if reset:
            conn.execute("DELETE FROM vectors WHERE model = ?", (manifest.model,))
            manifest.model, manifest.dim, manifest.vector_keys = identity, 0, []
        known = set(manifest.vector_keys)
        first: dict[str, str] = {}  # each text hash without a vector -> the first path holding it (by name)
        for rel, vhash in manifest.files.column("vhash"):
            if vhash and vhash not in known and (vhash not in first or rel < first[vhash]):
                first[vhash] = rel
        if not first:
            return reset
        wanted = dict(sorted(first.items(), key=lambda item: item[1]))
        encoder = self.encoder()
        if encoder is None:
            return reset
        import numpy as np

        manifest.dim = int(getattr(encoder, "dim"))
        keys = list(wanted)
        for start in range(0, len(keys), EMBED_CHUNK):  # in chunks: the texts of 100,000 at once weigh
            chunk = keys[start:start + EMBED_CHUNK]
            texts = [self._text(manifest, wanted[vhash]) for vhash in chunk]
            db.add_vectors(conn, identity, chunk, np.asarray(encoder.encode(texts), dtype=np.float32))
            if progress:
                progress(start + len(chunk))
        if self.rebuilding:  # `reindex`: the model is not needed again
            self._encoder, self._encoder_tried = None, False
        manifest.vector_keys.extend(keys)
        report.embedded = len(wanted)
        return True

    def _text(self, manifest: Manifest, rel: str) -> str:
        from cortex.index.manifest import read_body

        item = memory_from_meta(manifest.meta(rel), self.store.memories_dir / rel)
        item.body = read_body(self.store.memories_dir / rel)
        return embed_text(item)

    def vector_matrix(self) -> tuple[Any, dict[str, int]] | None:
        """(matrix, row of each text hash) for the committed vectors, or None without vectors."""
        if self.manifest is None or not self.manifest.vector_keys:
            return None
        if self._vectors is None:
            self._vectors = db.vectors(self.conn(), self.manifest.model, self.manifest.dim)
        return self._vectors

    def embedded(self, allowed: frozenset[str], row_of: dict[str, int]) -> tuple[list[str], Any, int]:
        """(the allowed records with a row in a vector matrix, in path order; those rows; how many allowed records
        have a text to embed at all)."""
        import numpy as np

        rels: list[str] = []
        rows: list[int] = []
        embeddable = 0
        for rel, vhash in self.records().column("vhash"):
            if vhash and rel in allowed:
                embeddable += 1
                row = row_of.get(vhash)
                if row is not None:
                    rels.append(rel)
                    rows.append(row)
        return rels, np.array(rows, dtype=np.int64), embeddable

    def dense_view(self, key: Any, allowed: frozenset[str]) -> tuple[list[str], Any] | None:
        """(the allowed paths with a static vector, what `cosines` multiplies for them), made once per sync for
        each filter `key`; None when there are no vectors."""
        vectors = self.vector_matrix()
        if vectors is None:
            return None
        cache_key = ("dense", key)
        if cache_key not in self._allowed:
            matrix, row_of = vectors
            rels, rows, _ = self.embedded(allowed, row_of)
            self._allowed[cache_key] = (rels, rows_view(matrix, rows))
        return self._allowed[cache_key]  # type: ignore[no-any-return]

    def dense_search(self, query: str, key: Any, allowed: frozenset[str], limit: int) -> list[tuple[str, float]] | None:
        """The `limit` allowed (path, cosine) nearest the query, best first; None when there are no vectors."""
        import numpy as np

        view = self.dense_view(key, allowed)
        if view is None:
            return None
        rels, sub = view
        if not rels:
            return []
        encoder = self.encoder()
        if encoder is None:
            return None
        scores = cosines(sub, np.asarray(encoder.encode_one(query), dtype=np.float32))
        top = min(limit, len(rels))
        best = np.argpartition(-scores, top - 1)[:top]
        return [(rels[i], float(scores[i])) for i in sorted(best, key=lambda i: (-scores[i], rels[i]))]

    def check_vectors(self) -> list[str]:
        """Recompute every memory's vector from its text and compare it with the cached row."""
        import numpy as np

        manifest = self.manifest
        assert manifest is not None
        self.vectors_checked = 0
        encoder = self.encoder()
        wanted: dict[str, str] = {}  # text hash -> one file with that text
        for rel, vhash, error in sorted(manifest.files.column("vhash", "error")):
            if vhash and error is None:
                wanted.setdefault(vhash, rel)
        if encoder is None or not wanted:
            return []
        rows = self.vector_matrix()
        if rows is None:
            return ["vectors missing"]
        matrix, row_of = rows
        missing = [vhash for vhash in wanted if vhash not in row_of]
        if missing:
            return [f"{len(missing)} memories have no vector"]
        if manifest.model != getattr(encoder, "identity", manifest.model):
            return [f"vectors are from model {manifest.model}, not {encoder.identity}"]
        texts = [self._text(manifest, rel) for rel in wanted.values()]
        fresh = np.asarray(encoder.encode(texts), dtype=np.float32)
        cached = np.asarray(matrix[[row_of[vhash] for vhash in wanted]], dtype=np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            worst = np.nan_to_num(np.abs(fresh - cached), nan=np.inf).max(axis=1) if len(texts) else np.zeros(0)
        self.vectors_checked = len(texts)
        bad = [rel for rel, diff in zip(wanted.values(), worst) if not diff <= VECTOR_TOLERANCE]
        if not bad:
            return []
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        return [f"{len(bad)} of {len(texts)} vectors differ from their memory's text by more than "
                f"{VECTOR_TOLERANCE:g} (damaged vector rows): {shown}"]


KIND = "contextual:"  # the contextual model's rows are under its identity after this


class Contextual:
    """The contextual model's vectors of a store: rows of the cache database's `vectors` table under that
    model's identity, keyed by the same text hash (`vhash`) as the static ones. Filled by whoever has the model
    loaded: a process that re-ranks embeds up to `cortex.recall.INLINE_FILL` missing rows itself and hands more to a
    detached `cortex maintain`. Until every memory has a row, recall ranks without them.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.lock_path = folder / "contextual.lock"  # held by the one process filling them
        self._loaded: tuple[tuple[str, int], Any, dict[str, int]] | None = None
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection | None:
        if self._conn is None:
            try:
                self._conn = db.connect(self.folder)
            except (db.Damaged, sqlite3.Error):
                return None  # the next sync of the store makes it again
        return self._conn

    def load(self, identity: str) -> tuple[Any, dict[str, int]] | None:
        """(matrix, row of each text hash) for `identity`'s vectors; None when there are none."""
        conn = self._db()
        if conn is None:
            return None
        identity = KIND + identity
        try:
            mark = (identity, db.vector_count(conn, identity))
            if self._loaded is not None and self._loaded[0] == mark:
                return self._loaded[1], self._loaded[2]
            first = conn.execute("SELECT length(vector) FROM vectors WHERE model = ? LIMIT 1", (identity,)).fetchone()
            found = db.vectors(conn, identity, first[0] // 4) if first else None
        except sqlite3.Error:
            return None
        if found is None:
            return None
        self._loaded = (mark, found[0], found[1])
        return found

    def add(self, identity: str, keys: list[str], matrix: Any) -> None:
        """Store rows for `keys` (the caller holds `lock_path`); another contextual model's rows are dropped."""
        conn = self._db()
        if conn is None:
            return
        with db.writing(conn, wait=True) as locked:
            if locked:
                conn.execute("DELETE FROM vectors WHERE model LIKE ? AND (model != ? OR length(vector) != ?)",
                             (KIND + "%", KIND + identity, int(matrix.shape[1]) * 4))
                db.add_vectors(conn, KIND + identity, keys, matrix)


def rows_view(matrix: Any, rows: Any) -> tuple[Any, Any]:
    """What `cosines` multiplies for these rows: the rows copied out when the matrix holds many more (archived,
    filtered), else the whole matrix and the rows to pick from its product (no copy of a big matrix)."""
    import numpy as np

    if 2 * len(rows) < matrix.shape[0]:
        return np.ascontiguousarray(matrix[rows]), None
    return matrix, rows


def cosines(view: tuple[Any, Any], vector: Any) -> Any:
    """The product of a `rows_view` with `vector`."""
    matrix, rows = view
    products = matrix @ vector
    return products if rows is None else products[rows]
