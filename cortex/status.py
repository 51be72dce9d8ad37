"""What `cortex status` and the MCP server report about a store."""

from __future__ import annotations

from typing import Any

from cortex.index import Index
from cortex.store import Store


def report(store: Store, index: Index) -> dict[str, Any]:
    """The store's counts and problems, search state, cache size and the damaged parts of it this process
    rebuilt, near-duplicates flagged at write time, and an unfinished consolidation."""
    from cortex.graph import flagged

    if index.damaged_parts():  # its sync read only the manifest: rebuild the damaged parts now, and say so
        index.sync(full=True, progress=False)
    out = store.status(index.scan())
    encoder = index.encoder()
    out["semantic"] = {"on": encoder is not None, "model": getattr(encoder, "identity", None),
                       "problem": index.encoder_problem}
    out["cache"] = {"memories": len(index.manifest.files) if index.manifest else 0,
                    "vectors": len(index.manifest.vector_keys) if index.manifest else 0,
                    "rebuilt": list(index.repaired)}
    out["warnings"] += [f"cache: {line}" for line in index.repaired]
    out["problems"] += [f"{store.cache_dir}: {why}; `cortex reindex` rebuilds it" for why in index.damaged_parts()]
    out["flagged_pairs"] = len(flagged(store))
    if (store.state_dir / "consolidate-checkpoint" / "plan.json").is_file():
        out["problems"].append(f"{store.state_dir / 'consolidate-checkpoint'}: an unfinished consolidation; "
                               f"`cortex consolidate --dry-run` rolls it back")
    return out
