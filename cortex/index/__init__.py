"""The cache of a store: manifest, Whoosh index and vectors, kept in step with the files.

    .cortex/cache/
      manifest.bin      per file: stat, content hash, metadata (the commit point)
      whoosh/           BM25F full-text index
      vectors.f32       embedding rows keyed by text hash

`cortex.index.cache` holds the `Index` (one store's cache) and `Indexes` (the
warm indexes of one process); `manifest`, `fulltext` and `vectors` the parts.
"""

from cortex.index.cache import Index, Indexes, SyncReport, answer_ahead

__all__ = ["Index", "Indexes", "SyncReport", "answer_ahead"]
