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
    # with `tail`, a long text keeps its last tokens too (the middle is left out); the sentence vector is its opening's
    small = contextual.Encoder(max_tokens=32)
    room = small.max_tokens - 2
    text = long_text + " Then it pages the on-call engineer."
    full = small.tokenizer.encode(text, add_special_tokens=False).ids
    both = small.encode([text], tail=True)[0]
    assert both.ids == full[:room] + full[-room:] and both.states.shape[0] == 2 * room
    assert np.allclose(both.mean, small.encode([text])[0].mean, atol=1e-5)
    between = "cobra over urfave/cli for the command line parsing"  # longer than one window, shorter than two
    ids = small.tokenizer.encode(between * 3, add_special_tokens=False).ids
    assert room < len(ids) < 2 * room
    assert small.encode([between * 3], tail=True)[0].ids == ids  # every token once, none twice
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


def _ready(worker: contextual.QueryWorker, text: str) -> bool:
    """Submit `text` once the worker has loaded its model (within 30 s)."""
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if worker.submit(text):
            return True
        assert worker.failed is None, worker.failed
        time.sleep(0.02)
    return False


def test_the_query_worker_gives_the_vectors_this_process_would(encoder: contextual.Encoder) -> None:
    """A resident process hands its queries to a child (`QueryWorker`) that embeds them on the other core:
    the vector must be the one it would have computed itself, for a short question and a pasted log alike."""
    from cortex.recall import QUERY_TOKENS

    worker = contextual.QueryWorker(QUERY_TOKENS)
    try:
        question = "which database did we decide on?"
        pasted = question + " " + "Traceback (most recent call last): File app/auth.py line 42 " * 4000
        for text in (question, pasted, ""):
            assert _ready(worker, text)
            assert not worker.submit("another")  # one query at a time
            got = worker.collect(timeout=60)  # a loaded machine may take more than the 2 s a prompt waits
            with contextual.one_blas_thread():
                want = encoder.sentence_vectors([text], max_tokens=QUERY_TOKENS)[0]
            assert got is not None and got.shape == want.shape
            assert np.allclose(got, want, atol=1e-5)  # the worker may run other BLAS kernels (`faster_core`)
    finally:
        worker.close()
    assert worker.process.poll() is not None  # the child is gone
    assert not worker.submit(question)


def test_the_query_worker_asks_for_faster_kernels_only_where_nobody_chose_them(encoder, monkeypatch) -> None:
    """`OPENBLAS_CORETYPE` set by the person is theirs (this machine's image sets it); otherwise an AMD CPU
    with AVX-512 gets OpenBLAS's AVX-512 kernels in the query worker, and the same vectors."""
    from cortex.recall import QUERY_TOKENS

    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    assert contextual.faster_core() is None
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
        info = handle.read()
    amd_avx512 = "AuthenticAMD" in info and all(f" {flag}" in info for flag in ("avx512f", "avx512bw", "avx512vl"))
    assert contextual.faster_core() == ("SkylakeX" if amd_avx512 else None)
    worker = contextual.QueryWorker(QUERY_TOKENS)
    try:
        question = "which database did we decide on?"
        assert _ready(worker, question)
        got = worker.collect()
        with contextual.one_blas_thread():
            want = encoder.sentence_vectors([question], max_tokens=QUERY_TOKENS)[0]
        assert got is not None and np.allclose(got, want, atol=1e-5)
    finally:
        worker.close()


def test_the_query_worker_is_kept_off_the_cpu_that_hands_it_a_query() -> None:
    """Waking the worker through its pipe made Linux run it on the parent's CPU (a "sync" wake-up), so the
    embedding and the parent's ranking took turns on one core. With two CPUs or more to use, each query is
    handed over with the worker kept off the CPU the parent runs on at that moment; the parent stays free."""
    import os

    from cortex.recall import QUERY_TOKENS

    cpus = os.sched_getaffinity(0)
    worker = contextual.QueryWorker(QUERY_TOKENS)
    try:
        for n in range(3):
            assert _ready(worker, f"which database did we decide on? ({n})")
            handed_from = worker._placement.last  # the CPU this process ran on when it wrote the query
            allowed = os.sched_getaffinity(worker.process.pid)
            assert worker.collect() is not None
            if len(cpus) >= 2:
                assert handed_from in cpus and allowed == cpus - {handed_from}
            else:  # one CPU to use: nothing to keep apart, and the worker's mask is left alone
                assert allowed == cpus
        assert os.sched_getaffinity(0) == cpus  # the parent is never pinned
    finally:
        worker.close()


def test_a_dead_query_worker_leaves_recall_to_this_process(tmp_path: Path) -> None:
    """When the worker dies (killed, out of memory), a resident process's recall embeds the query itself and
    answers as before; it does not wait on the dead child."""
    import time

    from cortex.recall import CONTEXTUAL, recall, use_contextual
    from cortex.store import Store

    store = Store.init(tmp_path)
    remember(store, "One file, no server; the queue is small.", type="decision",
             title="Chose SQLite over Postgres for the job queue")
    remember(store, "Run the MJML build first.", type="gotcha", title="Emails render with MJML templates")
    saved = (CONTEXTUAL.mode, CONTEXTUAL.use_worker, CONTEXTUAL.worker, CONTEXTUAL.sent)
    try:
        use_contextual("background", worker=True)
        CONTEXTUAL.worker, CONTEXTUAL.sent = None, None
        first = recall([store], "which database did we pick?", limit=1)  # starts the worker, embeds here
        assert first.hits[0].memory.title.startswith("Chose SQLite")
        worker = CONTEXTUAL.worker
        assert worker is not None and _ready(worker, "warm") and worker.collect() is not None
        worker.process.kill()
        worker.process.wait()
        again = recall([store], "what database do we store jobs in?", limit=1)
        assert again.hits[0].memory.title.startswith("Chose SQLite")
        assert worker.failed is not None
    finally:
        if CONTEXTUAL.worker is not None:
            CONTEXTUAL.worker.close()
        CONTEXTUAL.mode, CONTEXTUAL.use_worker, CONTEXTUAL.worker, CONTEXTUAL.sent = saved


@pytest.mark.parametrize("text", [
    "which database did we decide on?", "naïve café façade Ångström", "日本語のテキスト 中文 한국어",
    "zero\u200bwidth\x00nul", "Traceback (most recent call last): File app/auth.py, line 42, in refresh",
    "[CLS] a [SEP] [UNK] [PAD] [MASK] tokens typed by hand", "", "   ", "snake_case camelCase kebab-case v1.2.3",
    "ΟΔΟΣ ΣΟΦΟΣ", "why does the deploy fail \U0001fae8\U0001fa77", "\U0002b820 CJK extension",
])
def test_a_query_is_tokenised_without_tokenizers_into_the_same_ids(encoder: contextual.Encoder, text: str) -> None:
    """One or two texts (a query) go through the pure-Python WordPiece tokenizer, batches through `tokenizers`:
    the ids, and so the vectors, are the same either way."""
    lean = encoder._token_ids([text])[0]  # the pure-Python tokenizer for ASCII, `tokenizers` for the rest
    assert lean == encoder.tokenizer.encode(text, add_special_tokens=False).ids
    batch = encoder.encode([text] * (contextual.LEAN_TEXTS + 1))[0]
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


def test_the_parent_computes_half_of_the_query_while_it_waits_and_a_silent_one_costs_nothing(encoder) -> None:
    """`QueryWorker.collect(helper=...)`: the process waiting for the vector computes half of each block the
    worker hands over (`contextual.Join`); the vector is the one either process computes alone. A parent that
    says it helps and then does nothing (the system did not run it) leaves the worker to finish alone."""
    import time

    from cortex.recall import QUERY_TOKENS

    worker = contextual.QueryWorker(QUERY_TOKENS)
    if worker.join is None:  # not Linux on x86-64: nothing is handed over, and the vectors are as before
        worker.close()
        assert contextual.Join.create() is None
        return
    try:
        helped = []
        for text in ("which database did we decide on?", "why are prices stored as whole numbers in the orders table",
                     "what broke the docker build on the release branch"):
            assert _ready(worker, text)
            got = worker.collect(helper=encoder)
            with contextual.one_blas_thread():
                want = encoder.sentence_vectors([text], max_tokens=QUERY_TOKENS)[0]
            assert got is not None and np.allclose(got, want, atol=1e-5)
            helped.append(int(worker.join.head[contextual.DONE]) // 64 == worker.seq)
        assert any(helped)  # the parent did compute blocks (a busy machine may run it too late for some)
        silent = "how do users stay logged in between visits"
        assert _ready(worker, silent)
        worker.join.head[contextual.HELP] = worker.seq  # says it helps, never does
        got = worker.collect()
        assert got is not None and np.allclose(got, encoder.sentence_vectors([silent], max_tokens=QUERY_TOKENS)[0],
                                               atol=1e-5)
    finally:
        worker.close()
