"""What `cortex status` and the MCP server report about a store."""

from __future__ import annotations

from typing import Any

from cortex.index import Index
from cortex.store import Store


def report(store: Store, index: Index) -> dict[str, Any]:
    """The store's counts and problems, search state, cache size, near-duplicates flagged at write time, and
    an unfinished consolidation."""
    from cortex.graph import flagged

    out = store.status(index.scan())
    encoder = index.encoder()
    out["semantic"] = {"on": encoder is not None, "model": getattr(encoder, "identity", None),
                       "problem": index.encoder_problem}
    out["cache"] = {"memories": len(index.manifest.files) if index.manifest else 0,
                    "vectors": len(index.manifest.vector_keys) if index.manifest else 0}
    out["flagged_pairs"] = len(flagged(store))
    if (store.state_dir / "consolidate-checkpoint" / "plan.json").is_file():
        out["problems"].append(f"{store.state_dir / 'consolidate-checkpoint'}: an unfinished consolidation; "
                               f"`cortex consolidate --dry-run` rolls it back")
    return out
