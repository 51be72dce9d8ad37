"""The bundled contextual model (cortex.contextual): the numpy encoder agrees with the reference, and the
duplicate score tells a paraphrase from a memory on the same subject."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import numpy as np
import pytest

from cortex import contextual
from cortex.embedding import EncoderUnavailable
from tests.helpers import remember

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def encoder() -> contextual.Encoder:
    return contextual.Encoder()


def test_sentence_vectors_match_the_reference_implementation(encoder: contextual.Encoder) -> None:
    """int8 weights in numpy against all-MiniLM-L6-v2 in float32 through sentence-transformers (recorded)."""
    reference = json.loads((HERE / "data" / "minilm-reference.json").read_text(encoding="utf-8"))
    mine = encoder.encode(reference["texts"])
    for text, item, expected in zip(reference["texts"], mine, reference["vectors"]):
        expected = np.asarray(expected, dtype=np.float32)
        cosine = float(item.mean @ expected / np.linalg.norm(expected))
        assert cosine > 0.995, (text, cosine)
    # and the vectors are the texts' own: each is closest to its reference, not another's
    matrix = np.stack([np.asarray(v, dtype=np.float32) for v in reference["vectors"]])
    assert [int(np.argmax(matrix @ item.mean)) for item in mine] == list(range(len(mine)))


def test_token_states_and_long_or_empty_texts(encoder: contextual.Encoder) -> None:
    long_text = "The deploy script retries the health check. " * 200  # far over 256 tokens
    short, long, empty = encoder.encode(["cobra over urfave/cli", long_text, ""])
    assert len(short.ids) == short.states.shape[0] >= 5
    assert np.allclose(np.linalg.norm(short.states, axis=1), 1.0, atol=1e-4)
    assert len(long.ids) == encoder.max_tokens - 2  # [CLS] and [SEP] take the other two
    assert empty.ids == [] and empty.states.shape == (0, encoder.hidden)
    # with `tail`, a long text is its first and last halves in one window (the middle left out): one window's cost
    small = contextual.Encoder(max_tokens=32)
    room = small.max_tokens - 2
    text = long_text + " Then it pages the on-call engineer."
    full = small.tokenizer.encode(text, add_special_tokens=False).ids
    both = small.encode([text], tail=True)[0]
    assert both.ids == full[:room // 2] + full[-(room - room // 2):] and both.states.shape[0] == room
    other = small.encode([long_text + " Then it rolls the release back."], tail=True)[0]
    assert both.ids[:room // 2] == other.ids[:room // 2] and both.ids[-4:] != other.ids[-4:]  # same opening, end apart
    within = "cobra over urfave/cli for the command line parsing"  # one window: encoded whole, as without `tail`
    assert small.encode([within], tail=True)[0].ids == small.encode([within])[0].ids
    # batching does not change a text's vector (padding is masked out)
    alone = encoder.encode(["cobra over urfave/cli"])[0]
    assert np.allclose(alone.mean, short.mean, atol=1e-5)


def test_a_query_is_embedded_from_its_opening_tokens(encoder: contextual.Encoder) -> None:
    """Recall embeds a query's first `recall.QUERY_TOKENS` tokens: a pasted log after the question costs
    nothing more, and the vector is that of the opening alone."""
    from cortex.recall import QUERY_TOKENS

    question = "why does the login redirect loop after the session cookie moved to the gateway?"
    pasted = question + " " + "Traceback (most recent call last): File app/auth.py line 42 in refresh " * 40
    ids = encoder.tokenizer.encode(pasted, add_special_tokens=False).ids
    assert len(ids) > 4 * QUERY_TOKENS
    opening = encoder.tokenizer.decode(ids[:QUERY_TOKENS - 2])
    cut = encoder.sentence_vectors([pasted], max_tokens=QUERY_TOKENS)[0]
    assert float(cut @ encoder.sentence_vectors([opening])[0]) > 0.999
    assert float(cut @ encoder.sentence_vectors([pasted])[0]) < 0.99  # the whole text says something else


def test_a_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EncoderUnavailable, match="contextual model"):
        contextual.Encoder(tmp_path)


@pytest.mark.parametrize("text", [
    "which database did we decide on?", "naïve café façade Ångström", "日本語のテキスト 中文 한국어",
    "zero\u200bwidth\x00nul", "Traceback (most recent call last): File app/auth.py, line 42, in refresh",
    "[CLS] a [SEP] [UNK] [PAD] [MASK] tokens typed by hand", "", "   ", "snake_case camelCase kebab-case v1.2.3",
    "ΟΔΟΣ ΣΟΦΟΣ", "why does the deploy fail \U0001fae8\U0001fa77", "\U0002b820 CJK extension",
])
def test_a_query_alone_and_in_a_batch_gets_the_same_ids_and_vector(encoder: contextual.Encoder, text: str) -> None:
    """A query embedded alone has the ids and the vector it has in a batch of several."""
    batch = encoder.encode([text] * 3)[0]
    assert encoder.encode([text])[0].ids == batch.ids
    assert np.allclose(encoder.encode([text])[0].mean, batch.mean, atol=1e-6)


def test_the_unpacked_weights_are_kept_in_the_user_cache_and_rewritten_when_damaged(tmp_path, monkeypatch) -> None:
    """The first load writes the float32 weights to the user's cache; the next maps them from there (the same
    vectors); a damaged file is ignored and written again; an unwritable cache only costs time."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    texts = ["which database did we decide on?", "Chose SQLite over Postgres for the job queue"]
    first = contextual.Encoder()
    files = list((tmp_path / "cache" / "cortex").glob("minilm-l6-*.f32"))
    assert len(files) == 1 and files[0].stat().st_size > 40_000_000
    second = contextual.Encoder()
    assert isinstance(second.layers[0]["up"], np.memmap)
    expected = first.sentence_vectors(texts)
    assert np.array_equal(second.sentence_vectors(texts), expected)
    del second  # its pages are mapped: a file cut short under a mapping faults (cortex replaces, never truncates)
    gc.collect()
    with open(files[0], "r+b") as handle:  # cut short by hand
        handle.truncate(files[0].stat().st_size // 2)
    third = contextual.Encoder()
    assert not isinstance(third.layers[0]["up"], np.memmap)
    assert np.array_equal(third.sentence_vectors(texts), expected)
    assert files[0].stat().st_size > 40_000_000  # written again whole
    blocked = tmp_path / "not-a-folder"  # a cache that cannot be made (root ignores read-only modes)
    blocked.write_text("", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert np.array_equal(contextual.Encoder().sentence_vectors(texts), expected)


def test_a_resident_process_embeds_its_queries_itself(tmp_path: Path) -> None:
    """`cortex serve` and the MCP server embed each query in their own process: recall answers by it, and the
    vector kept for a repeated query is the one the encoder gives for the query as the transformer sees it."""
    import threading

    from cortex.recall import CONTEXTUAL, QUERY_TOKENS, for_transformer, recall, use_contextual
    from cortex.store import Store

    store = Store.init(tmp_path)
    remember(store, "One file, no server; the queue is small.", type="decision",
             title="Chose SQLite over Postgres for the job queue")
    remember(store, "Run the MJML build first.", type="gotcha", title="Emails render with MJML templates")
    saved = CONTEXTUAL.mode
    try:
        use_contextual("background")
        query = "which database did we pick?"
        for _ in range(2):  # the first fills the memories' vectors in a thread (a resident process answers at once)
            assert recall([store], query, limit=1).hits[0].memory.title.startswith("Chose SQLite")
            for thread in threading.enumerate():
                if thread.name == "cortex-contextual":
                    thread.join()
        want = CONTEXTUAL.get().sentence_vectors([for_transformer(query)], max_tokens=QUERY_TOKENS)[0]
        assert np.allclose(CONTEXTUAL.queries[query], want, atol=1e-6)
    finally:
        CONTEXTUAL.queries.clear()
        CONTEXTUAL.mode = saved


def test_children_get_one_blas_thread_unless_the_person_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    """One BLAS thread is asked for through the environment a child starts with (numpy reads it when it
    loads), never by calling into numpy's BLAS; a value the person set is kept."""
    from cortex.spawn import _one_blas_thread

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert _one_blas_thread()["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    assert _one_blas_thread()["OPENBLAS_NUM_THREADS"] == "2"
