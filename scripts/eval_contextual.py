"""Measure a contextual model folder (cortex/models/minilm-l6/ or a candidate built by build_contextual.py).

    PYTHONPATH=<checkout> python scripts/eval_contextual.py [--model DIR] [--locomo FILE] [--convs 0-4]
                                                            [--skip-quality] [--skip-timing]

Run it from a checkout whose cortex/models/minilm-l6/ holds the model to measure (`--model` must then be
that folder, the default): recall loads the model from there. Prints JSON:

- `locomo`: the model alone (`recall_store` with `methods=("ctx",)`, as the `library ctx` path of
  bench/recall_paths.py ranks its sets) on LoCoMo conversations `--convs`: recall@3 and @10 as
  bench/recall_command.py defines them, categories 1-4;
- `timing`: one short query (`sentence_vectors`, median of 50, the process's BLAS threads: set
  OPENBLAS_NUM_THREADS=1 for one), bulk fill (texts/s over the 1,000 texts of bench/data/consolidate.json,
  median of 3), a fresh process importing cortex.contextual, loading the model and embedding one query
  (median of 5, the user's float32 cache already written), and the size of the folder's files.

Note `uptime` beside the timings: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

QUERY = "which database did we decide on?"


def locomo(path: Path, convs: range) -> dict[str, float]:
    from bench.retrieval import build_store, load_conversation
    from cortex import recall as recall_module
    from cortex.index import Index
    from cortex.recall import recall_store

    recall_module.use_contextual("inline")
    data = json.loads(path.read_text(encoding="utf-8"))
    tops: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for ci in convs:
            turns, questions = load_conversation(data[ci])
            store, id_to_dia = build_store(Path(tmp) / f"conv{ci}" / ".cortex", turns)
            index = Index(store)
            index.sync(full=True, progress=False)
            recall_module.fill_contextual(store, index)
            for question, evidence, _ in questions:
                hits = recall_store(store, question, limit=10, index=index, sync=False, methods=("ctx",), now=0,
                                    narrow=False).hits
                ranked = [id_to_dia[h.memory.id] for h in hits if h.via is None][:10]
                tops.append((len(evidence & set(ranked[:3])) / len(evidence), len(evidence & set(ranked)) / len(evidence)))
    return {"recall@3": 100 * sum(t[0] for t in tops) / len(tops), "recall@10": 100 * sum(t[1] for t in tops) / len(tops),
            "questions": len(tops)}


def timing(folder: Path) -> dict[str, float]:
    from cortex.contextual import Encoder

    encoder = Encoder(folder)
    encoder.sentence_vectors([QUERY], max_tokens=64)
    one = []
    for _ in range(50):
        started = time.perf_counter()
        encoder.sentence_vectors([QUERY], max_tokens=64)
        one.append(time.perf_counter() - started)
    data = json.loads((ROOT / "bench" / "data" / "consolidate.json").read_text(encoding="utf-8"))
    texts = [*data["background"], *(p[k] for p in data["pairs"] for k in ("a", "b"))][:1000]
    fills = []
    for _ in range(3):
        started = time.perf_counter()
        encoder.sentence_vectors(texts)
        fills.append(time.perf_counter() - started)
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path; from cortex.contextual import Encoder; "
            f"Encoder(Path({str(folder)!r})).sentence_vectors([{QUERY!r}], max_tokens=64)")
    procs, bare = [], []
    for _ in range(5):
        for argv, into in (([sys.executable, "-c", code], procs), ([sys.executable, "-c", "pass"], bare)):
            started = time.perf_counter()
            subprocess.run(argv, check=True)
            into.append(time.perf_counter() - started)
    size = sum((folder / name).stat().st_size for name in ("model.safetensors", "tokenizer.json", "config.json"))
    return {"query ms": 1000 * statistics.median(one), "fill texts/s": len(texts) / statistics.median(fills),
            "process ms": 1000 * statistics.median(procs), "python -c pass ms": 1000 * statistics.median(bare),
            "size MB": size / 1e6}


def main() -> None:
    from bench.retrieval import DEFAULT_LOCOMO
    from cortex.contextual import model_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=model_path())
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--convs", default="0-4")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-timing", action="store_true")
    args = parser.parse_args()
    out: dict[str, object] = {"model": str(args.model)}
    if not args.skip_timing:
        out["uptime before timing"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        out["timing"] = timing(args.model)
        out["uptime after timing"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    if not args.skip_quality:
        lo, hi = (int(x) for x in args.convs.split("-"))
        out["locomo"] = locomo(args.locomo, range(lo, hi + 1))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
