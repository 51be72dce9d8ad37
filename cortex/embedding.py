"""Sentence embeddings from the static model2vec model shipped in the package.

A static model is a token → vector table. cortex reads model2vec's files itself (`tokenizers`, a memory-mapped
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
        out[name] = np.zeros(shape, dtype=dtype) if end == start else \
            np.memmap(path, dtype=dtype, mode="r", offset=base + start, shape=shape)
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
        except Exception as exc:  # a missing file, a key: tokenizers and numpy raise their own types
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
        self.identity = _identity(folder, config)

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
        return _identity(folder, json.loads((folder / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def _identity(folder: Path, config: dict[str, Any]) -> str:
    """What vectors are made with: the model folder's name, dimension, file size and dtype."""
    size = (folder / "model.safetensors").stat().st_size
    return f"{folder.name}:{config.get('hidden_dim', '')}:{size}:{config.get('embedding_dtype', '')}"


def load_encoder(name: str | None = "bundled") -> StaticEncoder | Model2VecEncoder:
    """The encoder for `embedding.model`: `bundled`, a local folder, or (explicitly) a hub name."""
    folder = model_folder(name)
    if folder is not None:
        return StaticEncoder(folder)
    if name in (None, "", "bundled"):
        raise EncoderUnavailable(f"the bundled embedding model is missing from {bundled_model_path()}")
    path = Path(str(name)).expanduser()
    if path.is_dir():
        return Model2VecEncoder(str(path))
    if str(name).startswith(("/", ".", "~")):
        raise EncoderUnavailable(f"embedding.model: no model folder at {path}")
    if not _own_choice(str(name)):
        raise EncoderUnavailable(f"embedding.model {name!r} is a model to download, which only your own config may "
                                 "ask for: set it in $CORTEX_HOME/config.yaml to allow it on this machine")
    return Model2VecEncoder(str(name))


def _own_choice(name: str) -> bool:
    """Whether the person's own config ($CORTEX_HOME/config.yaml) names this hub model: a repository's never
    makes a machine download."""
    from cortex.config import load_config
    from cortex.errors import CortexError
    from cortex.layout import global_root

    try:
        return load_config(Path(global_root()) / "config.yaml").get("embedding.model") == name
    except (CortexError, OSError):
        return False
