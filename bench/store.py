"""Whole-process time of `cortex list --json` on generated stores.

    python bench/store.py [--sizes 1000,10000] [--runs 5]

Prints the median wall time of a fresh `cortex list --json` process next to
`python -c pass` in the same interpreter, measured in the same run. Byte
code is compiled first (this machine sets PYTHONDONTWRITEBYTECODE=1; a
user's machine caches byte code), so the numbers measure cortex, not the
compiler.
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_store import generate  # noqa: E402

CORTEX = [sys.executable, "-m", "cortex"]


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def warm_bytecode() -> None:
    import cortex

    for path in {Path(cortex.__file__).parent, *map(Path, sys.path[1:])}:
        if path.is_dir() and "site-packages" in str(path) or path == Path(cortex.__file__).parent:
            compileall.compile_dir(str(path), quiet=1)


def median_ms(cmd: list[str], runs: int, cwd: Path | None = None, env: dict[str, str] | None = None) -> float:
    times = []
    for _ in range(runs + 1):  # one warm-up run (page cache, byte code)
        start = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times[1:])


def print_machine(env: dict[str, str], runs: int) -> float:
    """Print the machine line and `python -c pass` (the floor every whole-process number sits on); returns it."""
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
    bare = median_ms([sys.executable, "-c", "pass"], runs, env=env)
    print(f"python -c pass: {bare:.0f} ms")
    return bare


def main() -> None:
    parser = argparse.ArgumentParser(description="cortex list --json, whole process")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    warm_bytecode()
    env = bench_env()
    bare = print_machine(env, args.runs)
    print(f"{'memories':>9} {'list --json ms':>15} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            root = Path(tmp) / f"s{size}"
            generate(root / ".cortex", size)
            time.sleep(2.1)  # past the racy window: files written this instant are re-read on every sync, by design
            median_ms([*CORTEX, "list", "--json"], 1, cwd=root, env=env)  # builds the manifest
            ms = median_ms([*CORTEX, "list", "--json"], args.runs, cwd=root, env=env)
            print(f"{size:>9} {ms:>15.0f} {ms / bare:>6.1f}")


if __name__ == "__main__":
    main()
