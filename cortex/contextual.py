"""all-MiniLM-L6-v2 (int8, bundled) run with numpy alone: the contextual encoder consolidation and recall's
re-ranking need, since a static model cannot tell two claims about the same thing apart (docs/graph.md).

docs/model.md says where it is loaded and why numpy and not onnxruntime. `Encoder.encode` gives each text's
token states and its mean-pooled sentence vector, checked against the reference by tests/test_contextual.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from cortex.embedding import EncoderUnavailable, read_safetensors

NAME = "minilm-l6"
BATCH_TOKENS = 4096
UNPACKED_FORMAT = 1  # of the float32 weights kept in the user's cache (`Unpacked`)


def model_path() -> Path:
    return Path(__file__).resolve().parent / "models" / NAME


@dataclass
class Encoded:
    ids: list[int]  # WordPiece ids, no special tokens
    states: Any  # float16 [len(ids), hidden], each row L2-normalised (float16: a store's worth stays small); or None
    mean: Any  # float32 [hidden], the mean of the raw states, L2-normalised (the sentence vector)


def _gelu(x: Any) -> Any:
    """GELU, tanh form (numpy has no erf; the difference is far below the int8 weights' own), in place."""
    import numpy as np

    inner = x * x
    inner *= np.float32(0.044715)
    inner += np.float32(1.0)
    inner *= x
    inner *= np.float32(0.7978845608)
    np.tanh(inner, out=inner)
    inner += np.float32(1.0)
    x *= inner
    x *= np.float32(0.5)
    return x


def _softmax(scores: Any) -> None:
    """Softmax over the last axis, in place (the attention weights of each query row)."""
    import numpy as np

    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)


def user_cache() -> Path:
    """The user's cache folder for cortex (`$XDG_CACHE_HOME/cortex`, else `~/.cache/cortex`): derived files shared
    by every store, each safe to delete."""
    import os

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cortex"


class Unpacked:
    """The transformer's big matrices as float32, laid out for `x @ W`, in one file of the user's cache that
    every process memory-maps: dequantising the int8 weights costs each process more than its query, and
    resident processes share the mapped pages. Without a writable cache they are dequantised in memory."""

    MAGIC = b"CXW" + bytes([UNPACKED_FORMAT])

    def __init__(self, folder: Path, layers: int) -> None:
        self.folder, self.layers = folder, layers

    def names(self) -> list[str]:
        return [f"{n}.{part}" for n in range(self.layers) for part in ("qkv", "out", "up", "down")] + ["positions"]

    def path(self) -> Path | None:
        """`<model>-<install>-<version>.f32`: one file per installed model folder and model file version."""
        import hashlib

        try:
            stat = (self.folder / "model.safetensors").stat()
            install = hashlib.sha1(str(self.folder.resolve()).encode()).hexdigest()[:8]
            version = hashlib.sha1(f"{stat.st_size}:{stat.st_mtime_ns}:{UNPACKED_FORMAT}".encode()).hexdigest()[:8]
            return user_cache() / f"{self.folder.name}-{install}-{version}.f32"
        except (OSError, RuntimeError):  # no home folder to find a cache in
            return None

    def compute(self, tensors: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        def matrix(name: str) -> Any:  # dequantised and transposed for x @ W
            return np.ascontiguousarray((tensors[name].astype(np.float32) * tensors[name + ".scale"][:, None]).T)

        out: dict[str, Any] = {}
        for n in range(self.layers):
            p = f"encoder.layer.{n}."
            out[f"{n}.qkv"] = np.concatenate([matrix(p + f"attention.self.{k}.weight") for k in ("query", "key", "value")],
                                             axis=1)
            out[f"{n}.out"] = matrix(p + "attention.output.dense.weight")
            out[f"{n}.up"] = matrix(p + "intermediate.dense.weight")
            out[f"{n}.down"] = matrix(p + "output.dense.weight")
        out["positions"] = np.ascontiguousarray(tensors["embeddings.position_embeddings.weight"].astype(np.float32) *
                                                tensors["embeddings.position_embeddings.weight.scale"][:, None])
        return out

    def load(self, tensors: dict[str, Any]) -> dict[str, Any]:
        """The matrices: mapped from the cache file, or computed (and the file written for the next process)."""
        path = self.path()
        mapped = self._read(path) if path is not None else None
        if mapped is not None:
            return mapped
        computed = self.compute(tensors)
        if path is not None:
            self._write(path, computed)
        return computed

    def _read(self, path: Path) -> dict[str, Any] | None:
        import numpy as np

        try:
            with open(path, "rb") as handle:
                head = handle.read(12)
                if len(head) < 12 or head[:4] != self.MAGIC:
                    return None
                size = int.from_bytes(head[4:12], "little")
                if size > 1 << 20:
                    return None  # a damaged length: the header is a few hundred bytes
                header = json.loads(handle.read(size))
            start = 12 + size
            start += -start % 64
            shapes = [tuple(shape) for shape in header["shapes"]]
            if header["names"] != self.names() or path.stat().st_size != start + 4 * sum(math.prod(s) for s in shapes):
                return None
            data = np.memmap(path, dtype="<f4", mode="r", offset=start)
        except Exception:  # missing, damaged in any way: dequantise, and write it again
            return None
        out, at = {}, 0
        for name, shape in zip(header["names"], shapes):
            count = math.prod(shape)
            out[name] = data[at:at + count].reshape(shape)
            at += count
        return out

    def _write(self, path: Path, arrays: dict[str, Any]) -> None:
        from cortex.files import atomic_write

        names = self.names()
        header = json.dumps({"names": names, "shapes": [list(arrays[name].shape) for name in names]}).encode()
        head = self.MAGIC + len(header).to_bytes(8, "little") + header
        head += bytes(-len(head) % 64)
        import time

        install = path.name.rsplit("-", 1)[0]
        try:
            for old in path.parent.glob(f"{install}-*.f32"):  # this install's older versions
                if old != path:
                    old.unlink()
            for left in path.parent.glob(f".{self.folder.name}-*.f32.*.tmp"):  # a writer killed mid-way
                if left.stat().st_mtime < time.time() - 600:
                    left.unlink()
            atomic_write(path, [head, *(arrays[name].astype("<f4").tobytes() for name in names)], durable=False)
        except OSError:
            pass  # a read-only or full cache: the next process dequantises again


class Encoder:
    def __init__(self, folder: Path | None = None, max_tokens: int | None = None) -> None:
        folder = folder or model_path()
        try:
            self._load(folder, max_tokens)
        except EncoderUnavailable:
            raise
        except Exception as exc:  # a missing file, a key, a shape: tokenizers and numpy raise their own types
            raise EncoderUnavailable(f"cannot load the contextual model in {folder}: {exc!r}") from None

    def _load(self, folder: Path, max_tokens: int | None) -> None:
        import numpy as np

        self.config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.folder = folder
        self.tokenizer = self._tokenizer(folder)
        tensors = read_safetensors(folder / "model.safetensors")
        self.hidden = int(self.config["hidden_size"])
        self.heads = int(self.config["num_attention_heads"])
        self.eps = float(self.config["layer_norm_eps"])
        self.max_tokens = min(int(self.config.get("max_tokens", 256)), max_tokens or 10**6)
        self._tensors = tensors
        self.dim = self.hidden
        self.identity = f"{folder.name}:{(folder / 'model.safetensors').stat().st_size}:{self.max_tokens}"
        layers = int(self.config["num_hidden_layers"])
        big = Unpacked(folder, layers).load(tensors)

        def vector(name: str) -> Any:
            return np.asarray(tensors[name], dtype=np.float32)

        self.layers = []
        for n in range(layers):
            p = f"encoder.layer.{n}."
            self.layers.append({
                "qkv": big[f"{n}.qkv"],
                "qkv_b": np.concatenate([vector(p + f"attention.self.{k}.bias") for k in ("query", "key", "value")]),
                "out": big[f"{n}.out"], "out_b": vector(p + "attention.output.dense.bias"),
                "ln1": (vector(p + "attention.output.LayerNorm.weight"), vector(p + "attention.output.LayerNorm.bias")),
                "up": big[f"{n}.up"], "up_b": vector(p + "intermediate.dense.bias"),
                "down": big[f"{n}.down"], "down_b": vector(p + "output.dense.bias"),
                "ln2": (vector(p + "output.LayerNorm.weight"), vector(p + "output.LayerNorm.bias")),
            })
        self.positions = big["positions"]
        self.token_type = tensors["embeddings.token_type_embeddings.weight"][0].astype(np.float32) * \
            tensors["embeddings.token_type_embeddings.weight.scale"][0]
        self.ln0 = (vector("embeddings.LayerNorm.weight"), vector("embeddings.LayerNorm.bias"))
        self.cls, self.sep = self.tokenizer.token_to_id("[CLS]"), self.tokenizer.token_to_id("[SEP]")
        if self.cls is None or self.sep is None:
            raise EncoderUnavailable(f"{folder}: the tokenizer has no [CLS]/[SEP]")

    @staticmethod
    def _tokenizer(folder: Path) -> Any:
        """The model's `tokenizers` tokenizer, without padding or truncation."""
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return tokenizer

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """WordPiece ids without special tokens."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def sentence_vectors(self, texts: Sequence[str], max_tokens: int | None = None) -> Any:
        """A float32 matrix of sentence vectors (mean-pooled, L2-normalised), one row per text: what recall
        compares (`cortex.recall`). `max_tokens` cuts each text shorter than the model's own limit."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.hidden), dtype=np.float32)
        room = self._room(max_tokens)
        encoded = self._encode_segments([ids[:room] for ids in self._token_ids(texts)], states=False)
        return np.stack([e.mean for e in encoded]).astype(np.float32)

    def _rows(self, ids: Any) -> Any:
        """Token-table rows for `ids`, read from the int8 table and scaled (the table stays memory-mapped)."""
        import numpy as np

        table = self._tensors["embeddings.word_embeddings.weight"]
        scale = self._tensors["embeddings.word_embeddings.weight.scale"]
        return table[ids].astype(np.float32) * scale[ids][..., None]

    def _norm(self, x: Any, params: tuple[Any, Any]) -> Any:
        """Layer normalisation, in place."""
        import numpy as np

        width = np.float32(1.0 / x.shape[-1])
        mean = x.sum(axis=-1, keepdims=True)
        mean *= width
        x -= mean
        var = np.square(x).sum(axis=-1, keepdims=True)
        var *= width
        var += np.float32(self.eps)
        np.sqrt(var, out=var)
        x /= var
        x *= params[0]
        x += params[1]
        return x

    def _forward(self, batch: Any, mask: Any) -> Any:
        """Last-layer states [B, L, H] of a padded batch of ids with [CLS]/[SEP]; mask is 1 on real tokens. Dense
        layers run on the batch flattened to [B*L, H]: one BLAS call each."""
        import numpy as np

        b, length = batch.shape
        h, heads = self.hidden, self.heads
        size = h // heads
        x = self._norm(self._rows(batch) + self.positions[:length] + self.token_type, self.ln0).reshape(b * length, h)
        bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(np.float32)
        scale = np.float32(1.0 / math.sqrt(size))
        for layer in self.layers:
            qkv = x @ layer["qkv"]
            qkv += layer["qkv_b"]
            q, k, v = (qkv[:, i * h:(i + 1) * h].reshape(b, length, heads, size).transpose(0, 2, 1, 3) for i in range(3))
            scores = q @ k.transpose(0, 1, 3, 2)
            scores *= scale
            scores += bias
            _softmax(scores)
            attended = (scores @ v).transpose(0, 2, 1, 3).reshape(b * length, h) @ layer["out"]
            attended += layer["out_b"]
            attended += x
            x = self._norm(attended, layer["ln1"])
            up = x @ layer["up"]
            up += layer["up_b"]
            down = _gelu(up) @ layer["down"]
            down += layer["down_b"]
            down += x
            x = self._norm(down, layer["ln2"])
        return x.reshape(b, length, h)

    def encode(self, texts: Sequence[str], tail: bool = False, max_tokens: int | None = None) -> list[Encoded]:
        """Each text's token states and sentence vector. A text over `max_tokens` is cut there; with `tail`, it
        is encoded as its first and last halves in that one window (the middle left out), so two texts that open
        alike but end differently stay apart at the cost of one window."""
        room = self._room(max_tokens)
        half = room // 2
        return self._encode_segments([ids[:half] + ids[len(ids) - (room - half):] if tail and len(ids) > room
                                      else ids[:room] for ids in self._token_ids(texts)])

    def _room(self, max_tokens: int | None) -> int:
        """How many of a text's tokens are encoded: the model's limit or `max_tokens`, less [CLS] and [SEP]."""
        return min(self.max_tokens, max_tokens or self.max_tokens) - 2

    def _encode_segments(self, ids: list[list[int]], states: bool = True) -> list[Encoded]:
        """Each id list through the model; without `states`, the sentence vector alone (`Encoded.states` None)."""
        import numpy as np

        cls, sep = self.cls, self.sep
        out: list[Encoded | None] = [None] * len(ids)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # similar lengths share a batch: less padding
        chunks: list[list[int]] = [[]]
        for i in order:  # about BATCH_TOKENS token rows per batch: big enough for BLAS, small enough for memory
            if chunks[-1] and (len(chunks[-1]) + 1) * (len(ids[i]) + 2) > BATCH_TOKENS:
                chunks.append([])
            chunks[-1].append(i)
        for chunk in chunks:
            if not chunk:
                continue
            longest = max(len(ids[i]) for i in chunk) + 2
            batch = np.zeros((len(chunk), longest), dtype=np.int64)  # padding is masked out of attention and results
            mask = np.zeros((len(chunk), longest), dtype=np.float32)
            for row, i in enumerate(chunk):
                seq = [cls, *ids[i], sep]
                batch[row, :len(seq)] = seq
                mask[row, :len(seq)] = 1.0
            last = self._forward(batch, mask)
            for row, i in enumerate(chunk):
                n = len(ids[i]) + 2
                full = last[row, :n]
                mean = full.mean(axis=0)
                inner = full[1:-1]
                out[i] = Encoded(ids=list(ids[i]), mean=(mean / max(float(np.linalg.norm(mean)), 1e-9)).astype(np.float32),
                                 states=(inner / np.maximum(np.linalg.norm(inner, axis=1, keepdims=True), 1e-9)
                                         ).astype(np.float16) if states else None)
        return [e for e in out if e is not None]
