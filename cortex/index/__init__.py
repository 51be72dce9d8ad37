"""The cache of a store: a SQLite database (`db`) and a Whoosh index (`fulltext`), kept in step with the files.

`cortex.index.cache` holds the `Index` (one store's cache, made of its parts: `sync`, `views`, `vectors`) and
`Indexes` (the warm indexes of one process); `manifest` reads the files into rows.
"""

from cortex.index.cache import Index, Indexes, SyncReport

__all__ = ["Index", "Indexes", "SyncReport"]
