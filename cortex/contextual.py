"""A small contextual sentence encoder (all-MiniLM-L6-v2) in numpy, for one decision: are two memories one?

The bundled static model (`cortex.embedding`) gives every token one vector
whatever its neighbours, which is fast enough for every hook but cannot tell
"Celery task names are explicit strings" from "Celery tasks take only keyword
arguments": both are mostly the same Celery words. Consolidation needs that
distinction (docs/graph.md has the measurements), so cortex also ships the
6-layer transformer the static model was distilled from, with int8 weights
(`scripts/build_contextual.py`, 23 MB), and runs it here with numpy alone —
no torch, nothing downloaded. It is used where a process is warm or a person
waits, never in a one-shot hook's own process: `cortex consolidate`, the
detached `cortex maintain`, and recall's re-ranking in `cortex serve`, the
MCP server and `cortex recall` (`sentence_vectors`; `cortex.recall`).

`Encoder.encode(texts)` returns per text its token states (the last layer,
without [CLS]/[SEP], each L2-normalised) and the token ids; `mean` pools
them as sentence-transformers does. `tests/test_contextual.py` checks the
vectors against the reference implementation's numbers.
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
LEAN_TEXTS = 2  # up to this many ASCII texts are tokenised in pure Python (`Encoder._token_ids`)
UNPACKED_FORMAT = 1  # of the float32 weights kept in the user's cache (`Unpacked`)
PAD = 4  # sequences are padded to a multiple of this many tokens, even one alone: OpenBLAS's single-precision
# kernels take 4 rows at a time, and the rows past the last 4 cost nearly as much as 4 (one query through the
# whole model on one core: 15 tokens 7.1 ms, 16 tokens 5.7 ms; 11 tokens 6.4 ms, 12 tokens 4.9 ms)


_BLAS: list[Any] = []  # [(set, get)] of numpy's OpenBLAS once looked up; [None] when there is none to call


def _blas() -> Any:
    """numpy's bundled OpenBLAS thread controls (set, get), or None (another BLAS, or not found)."""
    if not _BLAS:
        found = None
        try:
            import ctypes
            import glob
            import os

            import numpy as np

            base = os.path.dirname(np.__file__)
            for path in sorted(glob.glob(base + ".libs/*openblas*") + glob.glob(os.path.join(base, ".libs", "*openblas*"))):
                lib = ctypes.CDLL(path)
                for prefix in ("scipy_openblas", "openblas"):
                    for suffix in ("64_", ""):
                        setter = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                        getter = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                        if setter is not None and getter is not None and found is None:
                            setter.argtypes, getter.restype = [ctypes.c_int], ctypes.c_int
                            found = (setter, getter)
        except Exception:  # no ctypes, another BLAS build: encode with whatever threads there are
            found = None
        _BLAS.append(found)
    return _BLAS[0]


def faster_core() -> str | None:
    """The OpenBLAS kernels to ask for (`OPENBLAS_CORETYPE`) in a process that will run the transformer, when
    they beat what OpenBLAS picks by itself: on an AMD CPU with AVX-512 (Zen 4 and later) numpy's OpenBLAS
    takes its AVX2 "Haswell" kernels, and its AVX-512 "SkylakeX" ones embed a query ~13 % faster (16 tokens:
    5.4 -> 4.7 ms; 24 tokens: 6.8 -> 5.5 ms, one core). None elsewhere, or when the person set the variable.
    Linux only (it reads /proc/cpuinfo); a CPU without every AVX-512 subset those kernels use is left alone."""
    import os

    if os.environ.get("OPENBLAS_CORETYPE"):
        return None
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
            vendor = flags = ""
            for line in handle:
                if line.startswith("vendor_id"):
                    vendor = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = line.split(":", 1)[1]
                    break
    except OSError:
        return None
    needed = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
    return "SkylakeX" if vendor == "AuthenticAMD" and needed <= set(flags.split()) else None


class one_blas_thread:
    """Run a few tiny matrix products on one BLAS thread: encoding one short query is ~40 small products,
    and on a busy 2-core machine OpenBLAS's second thread turns each into a wait for the other core (a
    query took ~200 ms instead of ~6). Best effort: without numpy's OpenBLAS it changes nothing."""

    def __enter__(self) -> None:
        controls = _blas()
        self.before = None
        if controls is not None:
            self.before = controls[1]()
            controls[0](1)

    def __exit__(self, *exc: Any) -> None:
        controls = _blas()
        if controls is not None and self.before:
            controls[0](self.before)


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
    """The transformer's big matrices as float32, dequantised and laid out for `x @ W`, kept in one file of the
    user's cache and memory-mapped from there.

    The package ships int8 weights (23 MB instead of 91); turning them into float32 took ~40 ms of every
    process that loads the model (allocating and filling 43 MB), more than the query it then embeds. The first
    process writes the result (atomically); later ones map it in ~1 ms, and resident processes (`cortex
    serve`, its query worker, the MCP server) share its pages instead of holding a copy each. The file is
    named after the model file's size and time, so a reinstalled model gets a new one (older ones are
    removed); a file of the wrong size is ignored and written again. Without a writable cache the weights are
    dequantised in memory as before."""

    MAGIC = b"CXW" + bytes([UNPACKED_FORMAT])

    def __init__(self, folder: Path, layers: int) -> None:
        self.folder, self.layers = folder, layers

    def names(self) -> list[str]:
        return [f"{n}.{part}" for n in range(self.layers) for part in ("qkv", "out", "up", "down")] + ["positions"]

    def path(self) -> Path | None:
        """`<model>-<install>-<version>.f32`: one file per installed model folder (two installs of cortex keep
        one each), named after the model file's size and time."""
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
        self._fast: Any = None  # the `tokenizers` tokenizer, loaded for batches only (`_token_ids`)
        self._lean: Any = None  # the pure-Python WordPiece tokenizer for a query or two
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

        self.join: Join | None = None  # the query worker's memory shared with its parent (`serve_queries`)
        self.seq = 0  # the query it embeds
        self._split: dict[tuple[int, bool], dict[str, Any]] = {}  # `_halves`
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
        self.cls, self.sep = self._lean_tokenizer().special_ids()

    def _lean_tokenizer(self) -> Any:
        if self._lean is None:
            from cortex.embedding import WordPiece

            try:
                cache: Path | None = user_cache()
            except OSError:
                cache = None
            self._lean = WordPiece(self.folder, cache, max_length=None)
        return self._lean

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """WordPiece ids without special tokens: a query or two in ASCII through the pure-Python tokenizer
        (loading `tokenizers` and its 700 KB JSON costs ~20 ms a process), the rest through `tokenizers` (same
        ids: tests/test_contextual.py)."""
        if len(texts) <= LEAN_TEXTS and all(text.isascii() for text in texts):
            # ASCII only: elsewhere Python's Unicode tables and the Rust tokenizer's can disagree (a capital
            # sigma at a word's end, characters newer than Python's tables), and the ids would differ.
            lean = self._lean_tokenizer()
            return [lean.tokenize(text) for text in texts]
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    @property
    def tokenizer(self) -> Any:
        """The model's `tokenizers` tokenizer, without padding or truncation (loaded on first use)."""
        if self._fast is None:
            from tokenizers import Tokenizer

            fast = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
            fast.no_padding()
            fast.no_truncation()
            self._fast = fast
        return self._fast

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
        """Layer normalisation, in place (sums rather than `np.mean`, whose Python wrapper was a third of it)."""
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
        """Last-layer states [B, L, H] of a padded batch of ids with [CLS]/[SEP]; mask is 1 on real tokens.

        Dense layers run on the batch flattened to [B*L, H] (one BLAS call each; numpy loops over a leading
        batch axis otherwise), in place where it can."""
        import numpy as np

        b, length = batch.shape
        h, heads = self.hidden, self.heads
        size = h // heads
        x = self._norm(self._rows(batch) + self.positions[:length] + self.token_type, self.ln0).reshape(b * length, h)
        bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(np.float32)
        scale = np.float32(1.0 / math.sqrt(size))
        joined = self.join is not None and b == 1
        real = int(mask[0].sum()) if joined else length
        for number, layer in enumerate(self.layers):
            token = self.join.hand(x, self.seq, number, ATTENTION, real) if joined else None  # type: ignore[union-attr]
            if token is None:
                qkv = x @ layer["qkv"]
                qkv += layer["qkv_b"]
                q, k, v = (qkv[:, i * h:(i + 1) * h].reshape(b, length, heads, size).transpose(0, 2, 1, 3)
                           for i in range(3))
                scores = q @ k.transpose(0, 1, 3, 2)
                scores *= scale
                scores += bias
                _softmax(scores)
                context = (scores @ v).transpose(0, 2, 1, 3).reshape(b * length, h)
                attended = context @ layer["out"]
            else:  # the parent computes the other half of the heads meanwhile (`Join`)
                attended = self.attention_half(x, number, False, real)
                other = self.join.take(token, length)  # type: ignore[union-attr]
                attended += other if other is not None else self.attention_half(x, number, True, real)
            attended += layer["out_b"]
            attended += x
            x = self._norm(attended, layer["ln1"])
            token = self.join.hand(x, self.seq, number, FEED_FORWARD, real) if joined else None  # type: ignore[union-attr]
            if token is None:
                up = x @ layer["up"]
                up += layer["up_b"]
                up = _gelu(up)
                down = up @ layer["down"]
            else:  # the parent computes the second half meanwhile (`Join`)
                down = self.feed_forward_half(x, number, second=False)
                other = self.join.take(token, x.shape[0])  # type: ignore[union-attr]
                down += other if other is not None else self.feed_forward_half(x, number, second=True)
            down += layer["down_b"]
            down += x
            x = self._norm(down, layer["ln2"])
        return x.reshape(b, length, h)

    def _halves(self, number: int, second: bool) -> dict[str, Any]:
        """Layer `number`'s attention weights for the first or second half of its heads, packed (made once)."""
        import numpy as np

        key = (number, second)
        if key not in self._split:
            layer, h = self.layers[number], self.hidden
            lo, hi = (h // 2, h) if second else (0, h // 2)
            columns = np.r_[lo:hi, h + lo:h + hi, 2 * h + lo:2 * h + hi]
            self._split[key] = {"qkv": np.ascontiguousarray(layer["qkv"][:, columns]),
                                "qkv_b": layer["qkv_b"][columns], "out": np.ascontiguousarray(layer["out"][lo:hi])}
        return self._split[key]

    def attention_half(self, x: Any, number: int, second: bool, real: int, out: Any = None) -> Any:
        """One half of layer `number`'s self-attention (its first or second six heads) for one sequence of
        `real` tokens padded to `x`'s rows, through the output projection's rows for those heads, without its
        bias: the two halves sum to the whole block."""
        import numpy as np

        weights = self._halves(number, second)
        length, heads, size = x.shape[0], self.heads // 2, self.hidden // self.heads
        qkv = x @ weights["qkv"]
        qkv += weights["qkv_b"]
        width = heads * size
        q = qkv[:, :width].reshape(length, heads, size).transpose(1, 0, 2)
        k = qkv[:, width:2 * width].reshape(length, heads, size).transpose(1, 2, 0)
        v = qkv[:, 2 * width:].reshape(length, heads, size).transpose(1, 0, 2)
        scores = q @ k
        scores *= np.float32(1.0 / math.sqrt(size))
        if real < length:
            scores[:, :, real:] = np.float32(-1e9)
        _softmax(scores)
        context = (scores @ v).transpose(1, 0, 2).reshape(length, width)
        return np.matmul(context, weights["out"], out=out)

    def feed_forward_half(self, x: Any, number: int, second: bool, out: Any = None) -> Any:
        """One half of layer `number`'s feed-forward block without its output bias: the first or second half
        of the inner units (their sum is the whole block: each unit is independent until the output sum)."""
        import numpy as np

        layer = self.layers[number]
        half = layer["up_b"].shape[0] // 2
        units = slice(half, None) if second else slice(0, half)
        up = x @ layer["up"][:, units]
        up += layer["up_b"][units]
        up = _gelu(up)
        return np.matmul(up, layer["down"][units], out=out)

    def encode(self, texts: Sequence[str], tail: bool = False, max_tokens: int | None = None) -> list[Encoded]:
        """Each text's token states and sentence vector. A text over `max_tokens` is cut there; with `tail`,
        its last `max_tokens` tokens are encoded too and their states follow (the middle of a very long text
        is left out), so two texts that open alike but end differently stay apart. The sentence vector is the
        opening's."""
        import numpy as np

        room = self._room(max_tokens)
        full = self._token_ids(texts)
        segments = [ids[:room] for ids in full]
        tails = {i: len(segments) + n for n, i in enumerate(i for i, ids in enumerate(full) if tail and len(ids) > room)}
        segments += [full[i][-room:] for i in tails]
        encoded = self._encode_segments(segments)
        out = []
        for i, ids in enumerate(full):
            head = encoded[i]
            if i not in tails:
                out.append(head)
                continue
            rest = len(ids) - room  # tokens after the opening; the tail segment ends with them
            back = encoded[tails[i]]
            keep = min(rest, room)
            out.append(Encoded(ids=head.ids + back.ids[-keep:], mean=head.mean,
                               states=np.concatenate([head.states, back.states[-keep:]])))
        return out

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
            length = -(-longest // PAD) * PAD if PAD else longest  # the padding is masked out of attention and of the results
            batch = np.zeros((len(chunk), length), dtype=np.int64)
            mask = np.zeros((len(chunk), length), dtype=np.float32)
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


JOIN_ROWS = 64  # the most token rows a query hands over (`recall.QUERY_TOKENS`, a multiple of `PAD`)
JOIN_WAIT = 0.001  # how long the worker waits for the parent's half of a layer before computing it itself
HELP, TASK, DONE, ROWS, FINISHED, REAL = range(6)  # the slots of `Join.head`
ATTENTION, FEED_FORWARD = 0, 1  # the two halves of a layer handed over (`Join.hand`)


class Join:
    """Memory shared by the query worker and the process that started it, so that the parent, once it has
    ranked everything that does not need the query's vector, computes half of each remaining layer's
    feed-forward block (two thirds of the model's arithmetic) on its own core instead of waiting.

    `head` holds int64 slots: HELP (the query the parent helps with; 0: none), TASK (the token of a block
    handed over: query × 64 + layer × 2 + block + 1, the block `ATTENTION` or `FEED_FORWARD`; `x` holds its
    input rows, ROWS how many and REAL how many are tokens, not padding), DONE (the token whose half is in
    `part`), FINISHED (the query whose vector the worker wrote). The worker hands a block over only
    while HELP names its query, and waits `JOIN_WAIT` at most for the half, then computes it itself: a parent
    that never answers costs a millisecond, never a wrong vector (a late half carries an older token).
    Linux on x86-64 only (a memfd, and stores seen in the order they were made)."""

    SIZE = 64 + 2 * JOIN_ROWS * 384 * 4

    def __init__(self, fd: int, hidden: int = 384) -> None:
        import mmap

        import numpy as np

        self.fd = fd
        self.given_up = 0  # the worker's: the query whose parent did not answer in time (`take`)
        self.buffer = mmap.mmap(fd, self.SIZE)
        self.head = np.frombuffer(self.buffer, dtype=np.int64, count=8)
        rows = JOIN_ROWS * hidden
        self.x = np.frombuffer(self.buffer, dtype=np.float32, count=rows, offset=64).reshape(JOIN_ROWS, hidden)
        self.part = np.frombuffer(self.buffer, dtype=np.float32, count=rows, offset=64 + 4 * rows).reshape(JOIN_ROWS,
                                                                                                          hidden)

    @classmethod
    def create(cls) -> "Join | None":
        import os
        import platform

        if platform.machine() not in ("x86_64", "AMD64") or not hasattr(os, "memfd_create"):
            return None
        try:
            fd = os.memfd_create("cortex-join", 0)
            os.ftruncate(fd, cls.SIZE)
            return cls(fd)
        except OSError:
            return None

    def hand(self, x: Any, seq: int, layer: int, block: int, real: int) -> int | None:
        """The worker: give a block's input to the parent if it helps with `seq`; the block's token."""
        rows = x.shape[0]
        if int(self.head[HELP]) != seq or rows > JOIN_ROWS or self.given_up == seq:
            return None
        token = seq * 64 + layer * 2 + block + 1
        self.x[:rows] = x
        self.head[ROWS] = rows
        self.head[REAL] = real
        self.head[TASK] = token
        return token

    def take(self, token: int, rows: int) -> Any:
        """The worker: the parent's half for `token`, or None after `JOIN_WAIT` (then nothing more of this
        query is handed over: a parent the system does not run costs one wait, not one a block)."""
        import time

        head = self.head
        if int(head[DONE]) != token:
            until = time.perf_counter() + JOIN_WAIT
            while int(head[DONE]) != token:
                if time.perf_counter() > until:
                    self.given_up = token // 64
                    return None
        return self.part[:rows]

    def help(self, seq: int, encoder: "Encoder", until: float) -> None:
        """The parent: compute the halves the worker hands over for `seq` until it has written the vector
        (or `until`, a perf_counter time; then the caller waits on the pipe as before)."""
        import time

        head = self.head
        done = 0
        head[HELP] = seq
        try:
            while int(head[FINISHED]) != seq:
                task = int(head[TASK])
                if task != done and task // 64 == seq:
                    rows, real = int(head[ROWS]), int(head[REAL])
                    x = self.x[:rows].copy()
                    layer, block = divmod(task % 64 - 1, 2)
                    if block == ATTENTION:
                        encoder.attention_half(x, layer, True, real, out=self.part[:rows])
                    else:
                        encoder.feed_forward_half(x, layer, True, out=self.part[:rows])
                    head[DONE] = done = task
                elif time.perf_counter() > until:
                    return
        finally:
            head[HELP] = 0


class QueryWorker:
    """A child process that embeds one query at a time with its own copy of the encoder, on the other core,
    while the resident process that started it ranks by full text and the static model: the embedding is
    most of a served prompt (threads would not overlap: most of both halves hold the GIL). Once the parent
    has ranked all it can without the vector, it computes half of each remaining block (`Join`): at 10,000
    memories the worker's ~6.3 ms became ~5.2.

    `submit(text)` hands it a query if it is ready (loaded) and idle; `collect()` waits for that query's
    sentence vector. Every failure (not started, crashed, too slow) answers False/None and the caller embeds
    the query itself. The child exits when this process closes its stdin, or dies."""

    def __init__(self, max_tokens: int) -> None:
        import os
        import subprocess
        import sys

        package_parent = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH", "")) if p))
        core = faster_core()
        if core is not None:
            env["OPENBLAS_CORETYPE"] = core
        self.join = Join.create()
        join_fd = self.join.fd if self.join is not None else -1
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from cortex.contextual import serve_queries; serve_queries()", str(max_tokens),
             str(join_fd)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            close_fds=True, pass_fds=(join_fd,) if join_fd >= 0 else ())
        self.seq = 0
        self.ready = False
        self.busy = False
        self.failed: str | None = None
        self._placement = _Placement(self.process.pid)

    def _readable(self, timeout: float) -> bool:
        import select

        assert self.process.stdout is not None
        return bool(select.select([self.process.stdout], [], [], timeout)[0])

    def _read(self, size: int) -> bytes:
        assert self.process.stdout is not None
        data = read_exactly(self.process.stdout.fileno(), size)
        if data is None:
            raise EOFError("the query worker exited")
        return data

    def submit(self, text: str) -> bool:
        """Start embedding `text`; False (nothing sent) while the worker loads, after it failed, or while it
        still works on an earlier query."""
        if self.failed is not None or self.busy:
            return False
        try:
            if not self.ready:
                if not self._readable(0.0):
                    return False
                if self._read(1) != b"R":
                    raise EOFError("the query worker could not load the model")
                self.ready = True
            data = text.encode("utf-8", "replace")
            self._placement.elsewhere()
            assert self.process.stdin is not None
            self.seq += 1
            write_all(self.process.stdin.fileno(), self.seq.to_bytes(8, "little") + len(data).to_bytes(4, "little") + data)
            self.busy = True
            return True
        except (OSError, EOFError) as exc:
            self.close(f"{exc}")
            return False

    def collect(self, timeout: float = 2.0, helper: "Encoder | None" = None) -> Any:
        """The sentence vector of the submitted query (float32), or None (nothing submitted, or it failed).
        With `helper` (this process's own encoder), this process computes half of the layers still to come
        while it waits (`Join`)."""
        import time

        import numpy as np

        if not self.busy:
            return None
        self.busy = False
        try:
            if helper is not None and self.join is not None:
                self.join.help(self.seq, helper, time.perf_counter() + min(timeout, 0.05))
            if not self._readable(timeout):
                raise TimeoutError(f"the query worker took over {timeout} s")
            size = int.from_bytes(self._read(4), "little")
            if not size:
                return None  # it could not embed this text (logged nowhere: the caller embeds it itself)
            return np.frombuffer(self._read(size), dtype=np.float32).copy()
        except (OSError, EOFError, TimeoutError) as exc:
            self.close(f"{exc}")
            return None

    def close(self, reason: str = "closed") -> None:
        self.failed = self.failed or reason
        self.busy = False
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass
        if self.process.poll() is None:
            self.process.kill()
        if self.join is not None:
            import os

            try:
                os.close(self.join.fd)
            except OSError:
                pass
        try:
            self.process.wait(timeout=1.0)
        except Exception:  # a process that will not die is the kernel's to reap
            pass


class _Placement:
    """Keeps the query worker off the CPU its parent runs on when it hands over a query.

    Waking a process blocked on a pipe is a "sync" wake-up: Linux takes it as a hint that the writer will
    sleep soon and often runs the reader on the writer's CPU, so on 2 cores the worker's embedding and the
    parent's ranking took turns on one core instead of running side by side (the parent's write took ~1 ms,
    the served prompt 12-18 ms in process, varying from run to run; with the worker kept off the parent's
    CPU 10.5-10.9 ms, docs/benchmarks.md). The parent itself is never pinned: the scheduler still moves it.
    Best effort: off where `sched_getcpu`/`sched_setaffinity` are missing, or with one CPU to use."""

    def __init__(self, pid: int) -> None:
        import os

        self.pid, self.getcpu, self.cpus, self.last = pid, None, frozenset(), -1
        try:
            import ctypes

            self.cpus = frozenset(os.sched_getaffinity(0))
            if len(self.cpus) >= 2:
                self.getcpu = ctypes.CDLL(None).sched_getcpu
        except (AttributeError, OSError):  # not Linux, or no libc symbol: the scheduler places it
            self.getcpu = None

    def elsewhere(self) -> None:
        import os

        if self.getcpu is None:
            return
        try:
            cpu = int(self.getcpu())
            if cpu != self.last and cpu in self.cpus:
                os.sched_setaffinity(self.pid, self.cpus - {cpu})
                self.last = cpu
        except OSError:  # the worker exited (its own read says so next), or the mask was refused
            self.getcpu = None


def write_all(fd: int, data: bytes) -> None:
    """os.write until all of `data` is in the pipe (a long prompt is more than one pipe buffer)."""
    import os

    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exactly(fd: int, size: int) -> bytes | None:
    """`size` bytes from the pipe, or None when it closes first."""
    import os

    out = b""
    while len(out) < size:
        chunk = os.read(fd, size - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def serve_queries() -> None:
    """The `QueryWorker` child: load the encoder, say "R", then answer each length-prefixed UTF-8 query with
    its length-prefixed float32 sentence vector (length 0 when it cannot) until stdin closes."""
    import os
    import sys

    max_tokens = int(sys.argv[1]) if len(sys.argv) > 1 else None
    join_fd = int(sys.argv[2]) if len(sys.argv) > 2 else -1
    read_fd, write_fd = sys.stdin.fileno(), sys.stdout.fileno()
    try:
        encoder = Encoder()
        encoder.join = Join(join_fd) if join_fd >= 0 else None
        if encoder.join is not None:
            for number in range(len(encoder.layers)):
                encoder._halves(number, False)  # packed now, not during the first query it hands over
    except Exception:
        os.write(write_fd, b"F")
        return
    os.write(write_fd, b"R")
    while True:
        head = read_exactly(read_fd, 12)
        if head is None:
            return
        data = read_exactly(read_fd, int.from_bytes(head[8:], "little"))
        if data is None:
            return
        encoder.seq = int.from_bytes(head[:8], "little")
        try:
            vector = encoder.sentence_vectors([data.decode("utf-8", "replace")], max_tokens=max_tokens)[0]
            payload = vector.astype("<f4").tobytes()
        except Exception:  # one text it cannot embed; the parent embeds that one itself
            payload = b""
        if encoder.join is not None:
            encoder.join.head[FINISHED] = encoder.seq
        write_all(write_fd, len(payload).to_bytes(4, "little") + payload)
