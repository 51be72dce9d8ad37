"""The MCP server at scale: `cortex_search` latency over stdio, warm, as a client sees it.

    python bench/mcp.py [--sizes 10000] [--calls 60]

For each generated store size (cache built first, in process) it starts the
real server (`python -m cortex mcp --dir …`) and drives it with the MCP SDK's
client over stdio. It prints: start-up (spawn to `initialize` answered), the
first `cortex_search` (waits for the server's warm-up: index sync and query
encoder), then over `--calls` warm calls (round robin over 12 queries) the
median and p95 of `cortex_search` (limit 10, default budget) and of
`cortex_get_memory`, the median `cortex_search` right after one memory
file changed on disk (watchdog event, re-sync, search), and the median of the
same searches in the bench's own process through the same library call
(`recall` on a warm index): what the protocol and the process add to. Times are measured
around `call_tool` in the client: JSON-RPC both ways included. Byte code is
compiled first (see bench/store.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and `import mcp` would find this file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_store import WORDS, generate  # noqa: E402
from bench.recall import QUERIES, percentile  # noqa: E402
from bench.store import bench_env, print_machine, warm_bytecode  # noqa: E402


async def measure(store_root: Path, env: dict[str, str], calls: int) -> dict[str, float]:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "cortex", "mcp", "--dir", str(store_root)],
                                   env=env, cwd=str(store_root.parent))
    out: dict[str, float] = {}
    start = time.perf_counter()
    with open(store_root.parent / "server.log", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            out["startup"] = (time.perf_counter() - start) * 1000

            async def timed(name: str, arguments: dict[str, object]) -> float:
                begin = time.perf_counter()
                result = await session.call_tool(name, arguments)
                elapsed = (time.perf_counter() - begin) * 1000
                assert not result.is_error, result.content
                return elapsed

            out["first"] = await timed("cortex_search", {"query": "warm up"})
            for query in QUERIES:  # warm every query path once
                await timed("cortex_search", {"query": query})
            searches = [await timed("cortex_search", {"query": QUERIES[n % len(QUERIES)]}) for n in range(calls)]
            out["search_p50"], out["search_p95"] = percentile(searches, 0.5), percentile(searches, 0.95)
            found = await session.call_tool("cortex_search", {"query": "why did we pick sqlite", "limit": 1})
            memory_id = found.structured_content["results"][0]["id"]
            reads = [await timed("cortex_get_memory", {"id": memory_id}) for _ in range(calls)]
            out["get_p50"] = statistics.median(reads)
            paths = sorted((store_root / "memories").rglob("*.md"))
            after = []
            for i in range(5):
                path = paths[i * 97 % len(paths)]
                path.write_text(path.read_text(encoding="utf-8") + f"\nedit {i} {WORDS[i]}\n", encoding="utf-8")
                await anyio.sleep(0.5)  # the watchdog event arrives; the next call re-syncs
                after.append(await timed("cortex_search", {"query": QUERIES[i]}))
            out["after_change"] = statistics.median(after)
    return out


def in_process_p50(store: object, calls: int) -> float:
    """The same searches in this process through the same library call (the floor the protocol adds to)."""
    from cortex.index import Indexes
    from cortex.recall import recall

    indexes = Indexes()
    indexes.synced(store, full=True)  # type: ignore[arg-type]
    times = []
    for n in range(len(QUERIES) + calls):
        start = time.perf_counter()
        recall([store], QUERIES[n % len(QUERIES)], limit=10, indexes=indexes)  # type: ignore[list-item]
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times[len(QUERIES):])


def main() -> None:
    parser = argparse.ArgumentParser(description="cortex MCP server benchmark (stdio)")
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--calls", type=int, default=60)
    args = parser.parse_args()
    warm_bytecode()
    env = bench_env()
    import anyio

    from cortex.index import Index

    print_machine(env, 5)
    print(f"{'memories':>9} {'start ms':>9} {'1st search':>11} {'search p50':>11} {'search p95':>11} "
          f"{'get p50':>8} {'search after 1 change':>22} {'in-process p50':>17}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            root = Path(tmp) / f"s{size}"
            store = generate(root / ".cortex", size)
            Index(store).rebuild()
            time.sleep(2.1)  # past the racy window, as between real edits
            Index(store).sync()
            server_env = dict(env, CORTEX_HOME=str(root / "home"))  # no global store
            r = anyio.run(measure, store.root, server_env, args.calls)
            r["in_process"] = in_process_p50(store, args.calls)
            print(f"{size:>9} {r['startup']:>9.0f} {r['first']:>11.0f} {r['search_p50']:>11.1f} {r['search_p95']:>11.1f} "
                  f"{r['get_p50']:>8.1f} {r['after_change']:>22.0f} {r['in_process']:>17.1f}")
    # A shared VM: say how busy it was, since two cores shared with other work change every number.
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
