"""Cache and recall at scale: rebuild, incremental sync, in-process and whole-process recall.

    python bench/recall.py [--sizes 1000,10000,100000] [--runs 5]

For each generated store size it prints: full rebuild time (in process,
model load included), incremental sync after one changed file (a fresh Index
object each time, so manifest load and stat walk included; imports warm; median of 5), in-process warm recall p50/p95 over 40 queries,
whole-process `cortex recall --json` median (fresh processes), and the
cache size on disk. Byte code is compiled first (see bench/store.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_store import WORDS, generate  # noqa: E402
from bench.store import bench_env, median_ms, print_machine, warm_bytecode  # noqa: E402

QUERIES = [
    "which database do we use for the cache?", "flaky test in ci", "deploy rollback went wrong",
    "how are tokens refreshed", "redis timeout", "memory leak in the worker", "schema migration order",
    "why did we pick sqlite", "rate limit per tenant", "webhook retries", "unicode path bug", "docker build cache",
]


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description="cortex cache and recall benchmark")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--contextual", action="store_true", help="also time filling the contextual vectors and "
                        "recall with them (as `cortex serve`, the MCP server and `cortex recall` run it)")
    args = parser.parse_args()
    warm_bytecode()
    env = bench_env()
    from cortex.index import Index
    from cortex.recall import recall_store

    print_machine(env, args.runs)
    header = f"{'memories':>9} {'rebuild s':>10} {'sync 1 ms':>10} {'recall p50':>11} {'recall p95':>11} {'cli recall ms':>14} {'cache MB':>9}"
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            root = Path(tmp) / f"s{size}"
            store = generate(root / ".cortex", size)
            start = time.perf_counter()
            Index(store).rebuild()
            rebuild = time.perf_counter() - start
            paths = store.memory_paths()
            syncs = []
            for i in range(-1, args.runs):  # run -1 warms imports and the model's vocabulary cache
                path = paths[i * 7 % len(paths)]
                path.write_text(path.read_text(encoding="utf-8") + f"\nedit {i} {WORDS[i]}\n", encoding="utf-8")
                start = time.perf_counter()
                report = Index(store).sync()
                if i >= 0:
                    syncs.append((time.perf_counter() - start) * 1000)
                assert report.changed == 1, report
            time.sleep(2.1)  # let the racy window pass, as it would between real edits
            Index(store).sync()
            index = Index(store)
            index.sync()
            recall_store(store, "warm up", index=index, sync=False)
            times = []
            for n in range(40):
                query = QUERIES[n % len(QUERIES)]
                start = time.perf_counter()
                hits = recall_store(store, query, index=index, sync=False).hits
                times.append((time.perf_counter() - start) * 1000)
                assert hits
            cli = median_ms([sys.executable, "-m", "cortex", "recall", "why did we pick sqlite", "--json", "--no-global"],
                            args.runs, cwd=root, env=env)
            print(f"{size:>9} {rebuild:>10.1f} {statistics.median(syncs):>10.0f} {percentile(times, 0.5):>11.1f} "
                  f"{percentile(times, 0.95):>11.1f} {cli:>14.0f} {dir_size(store.cache_dir) / 1e6:>9.1f}")
            if args.contextual:
                contextual(store, index)


def contextual(store, index) -> None:
    """Fill the contextual vectors (what the upkeep or a resident process does once), then time recall with
    them: every query embedded afresh (the process's query cache cleared), p50/p95 over 40 queries."""
    from cortex import recall as recall_module

    recall_module.use_contextual("inline")
    start = time.perf_counter()
    recall_module.CONTEXTUAL.get()
    loaded = time.perf_counter() - start
    start = time.perf_counter()
    filled = recall_module.fill_contextual(store, index)
    fill = time.perf_counter() - start
    recall_module.recall_store(store, "warm up", index=index, sync=False)
    times = []
    for n in range(40):
        recall_module.CONTEXTUAL.queries.clear()
        start = time.perf_counter()
        assert recall_module.recall_store(store, QUERIES[n % len(QUERIES)], index=index, sync=False).hits
        times.append((time.perf_counter() - start) * 1000)
    recall_module.use_contextual(None)
    print(f"{'':>9} contextual: model load {loaded * 1000:.0f} ms, {filled} vectors in {fill:.0f} s "
          f"({fill / max(filled, 1) * 1000:.1f} ms each); recall p50 {percentile(times, 0.5):.1f} ms, "
          f"p95 {percentile(times, 0.95):.1f} ms")


if __name__ == "__main__":
    main()
