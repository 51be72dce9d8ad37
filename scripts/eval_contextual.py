"""Measure a contextual model folder (cortex/models/minilm-l6/ or a candidate built by build_contextual.py).

    PYTHONPATH=<checkout> python scripts/eval_contextual.py [--model DIR] [--locomo FILE] [--convs 0-4]
                                                            [--skip-quality] [--skip-timing]

Run it from a checkout whose cortex/models/minilm-l6/ holds the model to measure (`--model` must then be
that folder, the default): recall loads the model from there. Prints JSON:

- `locomo`: the model alone (`recall_store` with `methods=("ctx",)`, as the `library ctx` path of
  bench/recall_paths.py ranks its sets) on LoCoMo conversations `--convs`: recall@3 and @10 as
  bench/recall_command.py defines them, categories 1-4;
- `timing`: one short query (`sentence_vectors`, median of 50, the process's BLAS threads: set
  OPENBLAS_NUM_THREADS=1 for one), bulk fill (texts/s over the first `--fill` texts of
  bench/data/consolidate.json, once), a fresh process importing cortex.contextual, loading the model and
  embedding one query (median of 5, the user's float32 cache already written), and the size of the folder's
  files. Each time is given as wall time and as CPU time: on a loaded machine only the CPU time means much.

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


def timing(folder: Path, fill: int) -> dict[str, float]:
    """Wall and CPU time (the CPU figure holds on a shared, loaded machine; the wall one does not)."""
    import resource

    from cortex.contextual import Encoder

    encoder = Encoder(folder)
    encoder.sentence_vectors([QUERY], max_tokens=64)
    one, one_cpu = [], []
    for _ in range(50):
        started, cpu = time.perf_counter(), time.process_time()
        encoder.sentence_vectors([QUERY], max_tokens=64)
        one.append(time.perf_counter() - started)
        one_cpu.append(time.process_time() - cpu)
    data = json.loads((ROOT / "bench" / "data" / "consolidate.json").read_text(encoding="utf-8"))
    texts = [text for pair in data["pairs"] for text in (pair["a"], pair["b"])] + [m["text"] for m in data["background"]]
    texts = texts[:fill]
    started, cpu = time.perf_counter(), time.process_time()
    encoder.sentence_vectors(texts)
    fill_wall, fill_cpu = time.perf_counter() - started, time.process_time() - cpu
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path; from cortex.contextual import Encoder; "
            f"Encoder(Path({str(folder)!r})).sentence_vectors([{QUERY!r}], max_tokens=64)")
    runs: dict[str, list[tuple[float, float]]] = {"load": [], "bare": []}
    for _ in range(5):
        for argv, key in (([sys.executable, "-c", code], "load"), ([sys.executable, "-c", "pass"], "bare")):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run(argv, check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            runs[key].append((time.perf_counter() - started,
                              after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime))
    size = sum((folder / name).stat().st_size for name in ("model.safetensors", "tokenizer.json", "config.json"))
    return {"query ms": 1000 * statistics.median(one), "query cpu ms": 1000 * statistics.median(one_cpu),
            "fill texts/s": len(texts) / fill_wall, "fill texts/cpu-s": len(texts) / fill_cpu,
            "process ms": 1000 * statistics.median(r[0] for r in runs["load"]),
            "process cpu ms": 1000 * statistics.median(r[1] for r in runs["load"]),
            "python -c pass ms": 1000 * statistics.median(r[0] for r in runs["bare"]),
            "python -c pass cpu ms": 1000 * statistics.median(r[1] for r in runs["bare"]), "size MB": size / 1e6}


def main() -> None:
    from bench.retrieval import DEFAULT_LOCOMO
    from cortex.contextual import model_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=model_path())
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--convs", default="0-4")
    parser.add_argument("--fill", type=int, default=1000, help="texts for the fill rate")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-timing", action="store_true")
    args = parser.parse_args()
    out: dict[str, object] = {"model": str(args.model)}
    if not args.skip_timing:
        out["uptime before timing"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        out["timing"] = timing(args.model, args.fill)
        out["uptime after timing"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    if not args.skip_quality:
        lo, hi = (int(x) for x in args.convs.split("-"))
        out["locomo"] = locomo(args.locomo, range(lo, hi + 1))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
