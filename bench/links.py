"""What recall's link expansion (two hops, decayed strengths) and snippet highlighting cost, in process.

    python bench/links.py [--sizes 2000,10000]

For each generated store size: warm in-process recall over 12 queries × 3, and the part of it spent in
`cortex.graph.expand` (with `LinkAges`: link times from the manifest, last reads from `state/access.json`)
and `cortex.render.match_spans`. Times are CPU time of this thread (`time.thread_time`), so a busy machine
does not inflate them; p50 and p95 in ms.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_store import generate  # noqa: E402

QUERIES = [
    "which database do we use for the cache?", "flaky test in ci", "deploy rollback went wrong",
    "how are tokens refreshed", "redis timeout", "memory leak in the worker", "schema migration order",
    "why did we pick sqlite", "rate limit per tenant", "webhook retries", "unicode path bug", "docker build cache",
]


def _quantile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[int(share * (len(ordered) - 1))]


def run(size: int) -> str:
    from cortex import graph, render
    from cortex import recall as recall_module
    from cortex.index import Indexes

    spent = {"ours": 0.0}

    def timed(function):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent["ours"] += time.thread_time() - started
        return wrapper

    graph.expand, render.match_spans = timed(graph.expand), timed(render.match_spans)
    with tempfile.TemporaryDirectory() as folder:
        store = generate(Path(folder) / "store", size)
        indexes = Indexes()
        indexes.synced(store, full=True)
        for query in QUERIES:  # warm
            recall_module.recall([store], query, indexes=indexes)
        totals, ours, linked = [], [], 0
        for _ in range(3):
            for query in QUERIES:
                spent["ours"] = 0.0
                started = time.thread_time()
                hits = recall_module.recall([store], query, indexes=indexes).hits
                totals.append((time.thread_time() - started) * 1000)
                ours.append(spent["ours"] * 1000)
                linked += sum(1 for hit in hits if hit.via)
    return (f"{size:>9}  {_quantile(totals, 0.5):10.1f}  {_quantile(totals, 0.95):10.1f}  "
            f"{_quantile(ours, 0.5):13.2f}  {_quantile(ours, 0.95):13.2f}  {linked:6}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,10000")
    args = parser.parse_args()
    print(" memories  recall p50  recall p95  links+marks p50  links+marks p95  linked")
    for size in (int(s) for s in args.sizes.split(",")):
        print(run(size), flush=True)


if __name__ == "__main__":
    main()
