"""`cortex report` on generated stores: how long the page takes to write, and to open in a browser.

    python bench/report.py [--sizes 1000,10000] [--runs 3]

For each size it prints the median of `--runs`:
- `cortex report` as a whole process (warm cache: the manifest already built; byte code compiled);
- `report.build` and `report.render` in process;
- the page's size;
- opening it in headless Chromium (tests/e2e/report_browser.js: puppeteer-core and @sparticuz/chromium):
  navigation start to the first frame painted with every memory drawn (the page's own clock), the share of
  that spent in its script, and the time the driver took from `goto` to seeing the page ready.
The browser's own start (~0.5 s) is not counted: a person's browser is already running.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_store import generate  # noqa: E402
from bench.store import CORTEX, bench_env, median_ms, print_machine, warm_bytecode  # noqa: E402

E2E = Path(__file__).resolve().parent.parent / "tests" / "e2e"


def open_page(page: Path) -> dict[str, float]:
    result = subprocess.run(["node", str(E2E / "report_browser.js"), json.dumps({"page": str(page)})],
                            cwd=E2E, capture_output=True, text=True, check=True, timeout=300)
    seen = json.loads(result.stdout)
    if not seen.get("ready") or seen["consoleErrors"] or seen["pageErrors"] or seen["drawn"] != seen["total"]:
        raise SystemExit(f"the page did not open cleanly: {seen}")
    return {"load": seen["loadMs"], "script": seen["scriptMs"], "wall": seen["wallMs"], "drawn": seen["drawn"]}


def bench_size(count: int, runs: int, env: dict[str, str], folder: Path) -> None:
    from cortex import report
    from cortex.index import Index

    store = generate(folder / f"s{count}" / ".cortex", count)
    page = folder / f"report-{count}.html"
    command = [*CORTEX, "report", "--dir", str(store.root), "-o", str(page)]
    whole = median_ms(command, runs, env=env)  # its warm-up run builds the cache
    builds, renders = [], []
    for _ in range(runs):
        started = time.perf_counter()
        data = report.build(store, Index(store))
        builds.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        html = report.render(data)
        renders.append((time.perf_counter() - started) * 1000)
    opened = [open_page(page) for _ in range(runs)]
    print(f"| {count:,} | {whole:,.0f} ms | {statistics.median(builds):,.0f} ms | {statistics.median(renders):,.0f} ms "
          f"| {len(html.encode()) / 1e6:.1f} MB | {statistics.median(o['load'] for o in opened):,.0f} ms "
          f"| {statistics.median(o['script'] for o in opened):,.0f} ms "
          f"| {statistics.median(o['wall'] for o in opened):,.0f} ms | {opened[0]['drawn']:,} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    env = bench_env()
    warm_bytecode()
    home = tempfile.mkdtemp(prefix="cortex-bench-home-")
    env["CORTEX_HOME"] = os.environ["CORTEX_HOME"] = home  # no real home touched
    print_machine(env, args.runs)
    print("| memories | `cortex report`, whole process | build | render | page | browser: navigation to every dot "
          "painted | of which the page's script | as the driver saw it (CDP round trips included) | dots drawn |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for count in (int(s) for s in args.sizes.split(",")):
            bench_size(count, args.runs, env, Path(tmp))


if __name__ == "__main__":
    main()
