"""The bundled model's speed: load, query embedding in a fresh process, encoding throughput.

    python bench/model.py [--runs 5]

Prints, medians of `--runs` fresh processes (byte code compiled first):
- `python -c pass` (the floor),
- the pure-Python query path: import + load + embed one query (QueryEncoder),
- the batch encoder (numpy + tokenizers): import + load + embed one query (StaticEncoder),
- model2vec's own `StaticModel.from_pretrained` + encode, for comparison,
and in process: encoding throughput on 10,000 memories of ~80 words, and the
largest difference between the lean vectors and model2vec's.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_store import sentence  # noqa: E402
from bench.store import bench_env, warm_bytecode  # noqa: E402

QUERY = "which database did we pick for the local cache?"
SNIPPETS = {
    "query path (pure Python)": "from cortex.embedding import QueryEncoder, bundled_model_path\n"
                                "QueryEncoder(bundled_model_path()).encode_one(%r)" % QUERY,
    "batch encoder (numpy + tokenizers)": "from cortex.embedding import StaticEncoder, bundled_model_path\n"
                                          "StaticEncoder(bundled_model_path()).encode_one(%r)" % QUERY,
    "model2vec StaticModel": "from model2vec import StaticModel\nfrom cortex.embedding import bundled_model_path\n"
                             "StaticModel.from_pretrained(str(bundled_model_path())).encode([%r])" % QUERY,
}


def timed_process(code: str, runs: int, env: dict[str, str]) -> tuple[float, float]:
    """(median whole-process ms, median in-process ms from first import to result)."""
    wrapper = "import time\n_t = time.perf_counter()\n" + code + "\nprint((time.perf_counter() - _t) * 1000)"
    whole, inside = [], []
    for _ in range(runs + 1):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", wrapper], env=env, capture_output=True, text=True, check=True)
        whole.append((time.perf_counter() - start) * 1000)
        inside.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(whole[1:]), statistics.median(inside[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description="bundled model speed")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    warm_bytecode()
    env = bench_env() | {"HF_HUB_OFFLINE": "1"}
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
    bare, _ = timed_process("pass", args.runs, env)
    print(f"python -c pass: {bare:.0f} ms")
    print(f"{'fresh process: load + embed one query':<48} {'whole ms':>9} {'in-process ms':>14}")
    for name, code in SNIPPETS.items():
        whole, inside = timed_process(code, args.runs, env)
        print(f"{name:<48} {whole:>9.0f} {inside:>14.1f}")
    import numpy as np
    from model2vec import StaticModel

    from cortex.embedding import QueryEncoder, StaticEncoder, bundled_model_path

    rng = random.Random(3)
    texts = [sentence(rng, 80) for _ in range(10_000)]
    encoder = StaticEncoder(bundled_model_path())
    encoder.encode(texts[:100])
    rates = []
    for _ in range(3):
        start = time.perf_counter()
        encoder.encode(texts)
        rates.append(len(texts) / (time.perf_counter() - start))
    print(f"encoding throughput (StaticEncoder, 10,000 x ~80 words): {statistics.median(rates):,.0f} memories/s")
    model = StaticModel.from_pretrained(str(bundled_model_path()))
    sample = texts[:200] + [QUERY, "Ünïcode ✓", ""]
    lean = encoder.encode(sample)
    reference = np.asarray(model.encode(sample), dtype=np.float32)
    query = np.asarray([QueryEncoder(bundled_model_path()).encode_one(t) for t in sample], dtype=np.float32)
    print(f"max |lean - model2vec|: batch {np.abs(lean - reference).max():.1e}, query path {np.abs(query - reference).max():.1e}")


if __name__ == "__main__":
    main()
