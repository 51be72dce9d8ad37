"""Sentence embeddings from the static model2vec model shipped in the package.

A static model is a token → vector table. cortex reads model2vec's files itself (tokenizer, memory-mapped
table) because importing model2vec costs a hook too much; tests/test_embedding.py checks both agree.
Nothing here downloads unless a user configures a hub name. docs/model.md.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Sequence

BUNDLED_NAME = "minilm-l6-static"


class EncoderUnavailable(Exception):
    """The configured model cannot be loaded; recall falls back to full text."""


def bundled_model_path() -> Path:
    return Path(__file__).resolve().parent / "models" / BUNDLED_NAME


_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I8": "i1", "I32": "<i4", "I64": "<i8", "U8": "u1"}


def read_safetensors(path: Path) -> dict[str, Any]:
    """Tensors of a safetensors file as read-only numpy arrays, memory-mapped (no copy)."""
    import numpy as np

    with open(path, "rb") as handle:
        (header_len,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(header_len))
    base = 8 + header_len
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = np.dtype(_DTYPES[info["dtype"]])
        start, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if end == start:
            out[name] = np.zeros(shape, dtype=dtype)
            continue
        out[name] = np.memmap(path, dtype=dtype, mode="r", offset=base + start, shape=shape)
    return out


class StaticEncoder:
    """Encode texts with a model2vec folder, without model2vec (same maths as `StaticModel.encode`)."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self.folder = folder
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            tensors = read_safetensors(folder / "model.safetensors")
            self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except (OSError, ValueError, KeyError, Exception) as exc:
            raise EncoderUnavailable(f"cannot load the embedding model in {folder}: {exc}") from None
        self.embeddings = tensors["embeddings"]
        self.weights = tensors.get("weights")
        self.mapping = tensors.get("mapping")
        self.normalize = bool(config.get("normalize", False))
        self.max_length = config.get("max_length", 512)
        self.dim = int(self.embeddings.shape[1])
        self.tokenizer.no_padding()
        if self.max_length is not None:
            self.tokenizer.enable_truncation(self.max_length)
        unk = getattr(self.tokenizer.model, "unk_token", None)
        self.unk_id = self.tokenizer.token_to_id(unk) if unk else None
        self._median_token_length: int | None = None
        stat = (folder / "model.safetensors").stat()
        self.identity = f"{folder.name}:{config.get('hidden_dim', '')}:{stat.st_size}:{config.get('embedding_dtype', '')}"

    def _median_length(self) -> int:
        if self._median_token_length is None:
            import numpy as np

            vocab = self.tokenizer.get_vocab()
            self._median_token_length = int(np.median([len(token) for token in vocab]))
        return self._median_token_length

    def _cut(self, texts: Sequence[str]) -> list[str]:
        """model2vec cuts texts at max_length × median token length characters before tokenising."""
        if self.max_length is None:
            return list(texts)
        if all(len(text) <= self.max_length for text in texts):  # median ≥ 1: nothing can be cut
            return list(texts)
        limit = self.max_length * self._median_length()
        return [text[:limit] for text in texts]

    def encode(self, texts: Sequence[str]) -> Any:
        """A float32 matrix, one row per text (normalised when the model says so)."""
        import numpy as np

        texts = self._cut(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        encode_batch = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        for start in range(0, len(texts), 1024):
            batch = encode_batch(texts[start : start + 1024], add_special_tokens=False)
            for offset, encoding in enumerate(batch):
                ids = encoding.ids
                if self.unk_id is not None:
                    ids = [i for i in ids if i != self.unk_id]
                if not ids:
                    continue
                rows = self.embeddings[self.mapping[ids] if self.mapping is not None else ids]
                if self.weights is not None:
                    rows = rows * self.weights[ids][:, None]
                out[start + offset] = rows.mean(axis=0)
        if self.normalize:
            out /= np.linalg.norm(out, axis=1, keepdims=True) + 1e-32
        return out

    def encode_one(self, text: str) -> Any:
        return self.encode([text])[0]


class WordPiece:
    """A BERT uncased tokenizer in pure Python (BertNormalizer, BertPreTokenizer, WordPiece): the same ids as
    `tokenizers` gives for the bundled models (checked by the tests), without importing `tokenizers`.
    `max_length` truncates the ids (None: never)."""

    def __init__(self, folder: Path, cache_dir: Path | None = None, max_length: int | None = None) -> None:
        try:
            spec = self._load_spec(folder, cache_dir)
            model = spec["model"]
            normalizer = spec.get("normalizer") or {}
            if model.get("type") != "WordPiece" or normalizer.get("type") != "BertNormalizer" or \
                    (spec.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer":
                raise EncoderUnavailable(f"{folder}: not a BERT WordPiece tokenizer; the lean query path cannot read it")
            self.vocab: dict[str, int] = model["vocab"]
            self.unk_token = model.get("unk_token", "[UNK]")
            self.prefix = model.get("continuing_subword_prefix", "##")
            self.max_chars = int(model.get("max_input_chars_per_word", 100))
            self.lowercase = bool(normalizer.get("lowercase", True))
            strip = normalizer.get("strip_accents")
            self.strip_accents = self.lowercase if strip is None else bool(strip)
            self.clean_text = bool(normalizer.get("clean_text", True))
            self.chinese = bool(normalizer.get("handle_chinese_chars", True))
            self.specials = {t["content"]: t["id"] for t in spec.get("added_tokens", []) if t.get("special")}
            self._median: int | None = spec.get("median_token_length")
        except (OSError, ValueError, KeyError) as exc:
            raise EncoderUnavailable(f"cannot load the tokenizer in {folder}: {exc}") from None
        self.max_length = max_length
        self.unk_id = self.vocab.get(self.unk_token)

    def special_ids(self) -> tuple[int, int]:
        """The ids of [CLS] and [SEP] (EncoderUnavailable without them)."""
        cls, sep = self.vocab.get("[CLS]"), self.vocab.get("[SEP]")
        if cls is None or sep is None:
            raise EncoderUnavailable("the tokenizer has no [CLS]/[SEP]")
        return cls, sep

    @staticmethod
    def _load_spec(folder: Path, cache_dir: Path | None) -> dict[str, Any]:
        """tokenizer.json, through a marshal copy in `cache_dir` (faster to load than the JSON)."""
        import hashlib
        import importlib.util
        import marshal

        source = folder / "tokenizer.json"
        if cache_dir is None:
            return json.loads(source.read_text(encoding="utf-8"))
        stat = source.stat()
        key = hashlib.sha1(f"{source.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
        cached = cache_dir / f"tokenizer-{folder.name}-{key}.marshal"
        magic = importlib.util.MAGIC_NUMBER
        try:
            raw = cached.read_bytes()
            if raw.startswith(magic):
                spec = marshal.loads(raw[len(magic):])
                if isinstance(spec, dict):
                    return spec
        except (OSError, ValueError, EOFError, TypeError):
            pass
        spec = json.loads(source.read_text(encoding="utf-8"))
        keep = {k: spec.get(k) for k in ("model", "normalizer", "pre_tokenizer", "added_tokens")}
        import statistics

        keep["median_token_length"] = int(statistics.median(len(token) for token in spec["model"]["vocab"]))
        try:
            from cortex.files import atomic_write

            for old in cache_dir.glob(f"tokenizer-{folder.name}-*.marshal"):
                old.unlink()
            for old in cache_dir.glob("tokenizer-????????????????.marshal"):  # named before the model's name was in it
                old.unlink()
            atomic_write(cached, magic + marshal.dumps(keep))
        except OSError:
            pass  # a read-only cache still works, only slower
        return keep

    # -------------------------------------------------------- tokenizer

    @staticmethod
    def _is_punct(char: str) -> bool:
        import unicodedata

        code = ord(char)
        if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
            return True
        return unicodedata.category(char).startswith("P")

    @staticmethod
    def _is_chinese(code: int) -> bool:
        return (0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0x20000 <= code <= 0x2A6DF
                or 0x2A700 <= code <= 0x2B73F or 0x2B740 <= code <= 0x2B81F or 0x2B820 <= code <= 0x2CEAF
                or 0xF900 <= code <= 0xFAFF or 0x2F800 <= code <= 0x2FA1F)

    def _normalize(self, text: str) -> str:
        import unicodedata

        out = []
        for char in text:
            code = ord(char)
            if self.clean_text:
                if code == 0 or code == 0xFFFD:
                    continue
                if char in "\t\n\r" or unicodedata.category(char) == "Zs":
                    out.append(" ")
                    continue
                if unicodedata.category(char).startswith("C"):
                    continue
            if self.chinese and self._is_chinese(code):
                out.append(f" {char} ")
            else:
                out.append(char)
        text = "".join(out)
        if self.strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        if self.lowercase:
            text = text.lower()
        return text

    def _words(self, text: str) -> list[str]:
        words: list[str] = []
        current: list[str] = []
        for char in text:
            if char.isspace():
                if current:
                    words.append("".join(current))
                    current = []
            elif self._is_punct(char):
                if current:
                    words.append("".join(current))
                    current = []
                words.append(char)
            else:
                current.append(char)
        if current:
            words.append("".join(current))
        return words

    def _wordpiece(self, word: str) -> list[int]:
        if len(word) > self.max_chars:
            return [self.unk_id] if self.unk_id is not None else []
        ids = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    found = self.vocab[piece]
                    break
                end -= 1
            if found is None:
                return [self.unk_id] if self.unk_id is not None else []
            ids.append(found)
            start = end
        return ids

    def tokenize(self, text: str) -> list[int]:
        """Token ids as `tokenizers` gives them (no special tokens added, truncated to max_length)."""
        import re

        ids: list[int] = []
        pattern = "|".join(re.escape(token) for token in self.specials) if self.specials else None
        parts = re.split(f"({pattern})", text) if pattern else [text]
        for part in parts:
            if part in self.specials:
                ids.append(self.specials[part])
                continue
            for word in self._words(self._normalize(part)):
                ids.extend(self._wordpiece(word))
        if self.max_length is not None:
            ids = ids[: self.max_length]
        return ids


class QueryEncoder(WordPiece):
    """Embed one short text in pure Python: no numpy, no tokenizers.

    The bundled model's tokenizer (`WordPiece`) plus the mean of the token rows read straight from the
    safetensors file, without numpy's import, so a fresh process (a hook, `cortex recall`) embeds its query
    quickly. Documents are encoded in batches by
    `StaticEncoder`.
    """

    SPECIAL = ("[UNK]", "[PAD]")

    def __init__(self, folder: Path, cache_dir: Path | None = None) -> None:
        super().__init__(folder, cache_dir)
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            with open(folder / "model.safetensors", "rb") as handle:
                (header_len,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(header_len))
            info = header["embeddings"]
            if set(header) - {"embeddings", "__metadata__"}:
                raise EncoderUnavailable(f"{folder}: weights or a token mapping need the full encoder")
        except (OSError, ValueError, KeyError) as exc:
            raise EncoderUnavailable(f"cannot load the embedding model in {folder}: {exc}") from None
        self.rows, self.dim = info["shape"]
        code = {"I8": "b", "F32": "f", "F16": "e"}.get(info["dtype"])
        if code is None:
            raise EncoderUnavailable(f"{folder}: embedding dtype {info['dtype']} is not supported by the lean path")
        self.code: str = code
        self.width = {"b": 1, "f": 4, "e": 2}[code]
        self.offset = 8 + header_len + info["data_offsets"][0]
        self.path = folder / "model.safetensors"
        self.normalize = bool(config.get("normalize", False))
        self.max_length = config.get("max_length", 512)

    def _cut(self, text: str) -> str:
        """model2vec's character cut before tokenising: max_length × the median token length."""
        if self.max_length is None or len(text) <= self.max_length:
            return text
        if self._median is None:
            import statistics

            self._median = int(statistics.median(len(token) for token in self.vocab))
        return text[: self.max_length * self._median]

    # -------------------------------------------------------- encoding

    def encode_one(self, text: str) -> list[float]:
        """The text's vector as a list of floats (normalised when the model says so)."""
        import array
        import math

        ids = [i for i in self.tokenize(self._cut(text)) if i != self.unk_id]
        total = [0.0] * self.dim
        if ids:
            row_bytes = self.dim * self.width
            with open(self.path, "rb") as handle:
                for token in ids:
                    handle.seek(self.offset + token * row_bytes)
                    row = array.array(self.code, handle.read(row_bytes))
                    total = [a + b for a, b in zip(total, row)]
            total = [value / len(ids) for value in total]
        if self.normalize:
            norm = math.sqrt(sum(value * value for value in total)) + 1e-32
            total = [value / norm for value in total]
        return total


class Model2VecEncoder:
    """A model2vec `StaticModel` (any folder or hub name model2vec accepts)."""

    def __init__(self, name: str) -> None:
        try:
            from model2vec import StaticModel

            self.model = StaticModel.from_pretrained(name)
        except Exception as exc:
            raise EncoderUnavailable(f"cannot load embedding model {name!r}: {exc}") from None
        self.dim = int(self.model.dim)
        self.identity = f"model2vec:{name}:{self.dim}"

    def encode(self, texts: Sequence[str]) -> Any:
        import numpy as np

        return np.asarray(self.model.encode(list(texts)), dtype=np.float32)

    def encode_one(self, text: str) -> Any:
        return self.encode([text])[0]


def model_folder(name: str | None) -> Path | None:
    """The local model2vec folder `embedding.model` names, or None (a hub name, or nothing there)."""
    if name in (None, "", "bundled"):
        folder = bundled_model_path()
    else:
        folder = Path(str(name)).expanduser()
    return folder if (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file() else None


def model_identity(name: str | None) -> str | None:
    """What the vectors in a cache were made with, without loading the model (None: cannot tell)."""
    folder = model_folder(name)
    if folder is None:
        return None
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        size = (folder / "model.safetensors").stat().st_size
    except (OSError, ValueError):
        return None
    return f"{folder.name}:{config.get('hidden_dim', '')}:{size}:{config.get('embedding_dtype', '')}"


def load_encoder(name: str | None = "bundled") -> StaticEncoder | Model2VecEncoder:
    """The encoder for `embedding.model`: `bundled`, a local folder, or (explicitly) a hub name."""
    if name in (None, "", "bundled"):
        folder = bundled_model_path()
        if not (folder / "model.safetensors").is_file():
            raise EncoderUnavailable(f"the bundled embedding model is missing from {folder}")
        return StaticEncoder(folder)
    path = Path(str(name)).expanduser()
    if path.is_dir():
        if (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file():
            return StaticEncoder(path)
        return Model2VecEncoder(str(path))
    if str(name).startswith(("/", ".", "~")):
        raise EncoderUnavailable(f"embedding.model: no model folder at {path}")
    return Model2VecEncoder(str(name))
