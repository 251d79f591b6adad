"""The inference-free reweighter (issue 51, ``general-static``): what is served is what was fitted,
any word gets a weight from its pieces, a damaged folder is one line, it never adds a term, and it
ranks alike on every path."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from bm25aug.errors import UserError
from bm25aug.model import packaged
from bm25aug.model.reweighter import WEIGHTS_FILE, Reweighter
from bm25aug.train import reweighter as fitting

TEXTS = ["what are the symptoms of glaucoma ?", "who wrote the declaration of independence",
         "battery life of this phone is great", "is it safe to take aspirin daily", "zyxoflux blorptide reactor"]


@pytest.fixture(scope="module")
def small_fit(tmp_path_factory):
    """A reweighter fitted in seconds: the packaged contextual model labels a few texts."""
    from bm25aug.model.loading import load_encoder

    teacher = load_encoder("general")
    labels = fitting.teacher_labels(teacher, TEXTS * 4, tmp_path_factory.mktemp("labels") / "labels.json")
    reader, vocabulary = fitting.featurizer(teacher)
    examples = fitting.Examples(reader, TEXTS * 4, labels)
    settings = fitting.FitSettings(dim=8, hidden=16, epochs=3, batch=8)
    fitted = fitting.fit(examples, vocabulary.shape[1], settings, progress=False)
    folder = tmp_path_factory.mktemp("fit") / "model"
    folder.mkdir()
    from copy import deepcopy

    from bm25aug.model.reweighter import write_folder

    write_folder(folder, fitting.tables(fitted, vocabulary), packaged.PACKAGED_ROOT / "general", deepcopy(teacher.config))
    return Reweighter.from_folder(folder), fitted, examples, folder


def test_the_runtime_serves_what_torch_fitted(small_fit):
    """Each query's term list at search time is, per term, the sum over its chunks of exp(max(y, 0))
    of torch's y for that chunk (the vectors ship in float16: within 1%)."""
    model, fitted, examples, _ = small_fit
    weights = iter(np.exp(np.maximum(fitted["predicted"], 0)).tolist())
    assert len(fitted["predicted"]) == len(examples.target)
    for text, served in zip(TEXTS * 4, model.encode_batch(TEXTS * 4)):
        expected: dict[str, float] = {}
        for word in text.split():
            terms = model.chunk(word)[0]
            weight = next(weights) if terms else None
            for term in terms:
                expected[term] = expected.get(term, 0.0) + weight
        assert served.keys() == expected.keys(), text
        np.testing.assert_allclose([served[t] for t in expected], list(expected.values()), rtol=1e-2)
    assert next(weights, None) is None  # every fitted example was served


def test_every_query_term_gets_a_weight_and_nothing_is_added(small_fit):
    from bm25aug.lucene.analysis import analyze

    model = small_fit[0]
    for text in [*TEXTS, "an unseen word: quixotrylliance, twice quixotrylliance"]:
        terms = model.encode(text)
        counts = {t: analyze(text).count(t) for t in set(analyze(text))}
        assert set(terms) == set(counts), text  # the analyzer's terms, no more
        for t, w in terms.items():
            assert np.isfinite(w) and w >= counts[t] - 1e-6, (text, t, w)  # at least BM25's own weight per occurrence
    assert model.encode("") == {} and model.encode("the of and") == {}
    assert model.encode_batch(TEXTS) == [model.encode(t) for t in TEXTS]


def test_it_searches_a_stock_index_on_every_path_alike(small_fit, tmp_path):
    from test_packaged import assert_every_path_alike
    from test_stock_index import pyserini_index

    assert_every_path_alike(str(small_fit[3]), pyserini_index(tmp_path / "stock.flat"))


def test_a_damaged_or_wrong_folder_is_one_line(small_fit, tmp_path):
    from bm25aug.model.loading import load_model
    from bm25aug.model.loading import load_encoder

    copy = tmp_path / "model"
    shutil.copytree(small_fit[3], copy)
    (copy / WEIGHTS_FILE).write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match="cannot be read.*fix:"):
        load_encoder(copy)
    from safetensors.numpy import load_file, save_file

    tables = load_file(str(small_fit[3] / WEIGHTS_FILE))
    tables["v"][0] = np.nan
    save_file(tables, str(copy / WEIGHTS_FILE))
    with pytest.raises(UserError, match="^NaN or infinite values in v of .*fix: fit it again"):
        load_encoder(copy)
    with pytest.raises(UserError, match="reweighter.*nothing in it trains"):
        load_model(small_fit[3])
    with pytest.raises(UserError, match="not a reweighter"):
        Reweighter.from_folder(packaged.PACKAGED_ROOT / "general")


def test_a_batch_across_chunks_and_a_replaced_store_ranks_as_one_query_alone(small_fit, tmp_path, monkeypatch):
    """A light encoder's batch search is cut into ``PIECE``-query chunks, each one ``encode_batch``
    call; with room for 16 chunks, the projections move to a fresh store between those calls.
    Neither changes a ranking, on 1 or 2 threads, blank and repeated queries included."""
    from bm25aug.model import reweighter
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.batch import PIECE
    from bm25aug.search.bm25 import BM25Searcher
    from test_stock_index import pyserini_index

    stock = pyserini_index(tmp_path / "stock.flat")
    queries = [f"{TEXTS[i % len(TEXTS)]} {'lion roar battery'.split()[i % 3]} word{i}" for i in range(2 * PIECE + 7)]
    queries[3], queries[PIECE] = "", "   "
    queries[PIECE + 1] = queries[1]
    alone = [Reweighter.from_folder(small_fit[3]).encode(q) for q in queries]
    monkeypatch.setattr(reweighter, "PROJECTED_CACHE", 16)
    fresh = Reweighter.from_folder(small_fit[3])
    searcher = AugmentedSearcher(fresh, BM25Searcher(str(stock)))
    one_by_one = [searcher.search_arrays(q, 5) for q in queries]
    stores = set()
    for threads in (1, 2):
        batch = searcher.batch_search_arrays(queries, 5, threads=threads)
        stores.add(id(fresh._store))
        assert len(batch) == len(queries)
        for got, want in zip(batch, one_by_one):
            assert got.lucene_ids.tolist() == want.lucene_ids.tolist() and got.scores.tolist() == want.scores.tolist()
    assert len(stores) == 2  # the second batch started on a fresh store
    assert [fresh.encode(q) for q in queries] == alone


def reference(model: Reweighter, text: str) -> dict[str, float]:
    """The fitted formula (module docstring), for one query, in float64 from the folder's tables."""
    h = {name: t.astype(np.float64) for name, t in model.head.items()}
    chunks = [model.chunk(c) for c in text.split()]
    if not any(c[0] for c in chunks):
        return {}
    x = np.stack([c[1] for c in chunks]).astype(np.float64)
    context = sum(c[2].astype(np.float64) for c in chunks) / max(sum(c[3] for c in chunks), 1)
    m, zero = len(chunks), np.zeros((1, x.shape[1]))
    left, right = np.concatenate([zero, x[:-1]]), np.concatenate([x[1:], zero])
    position = np.stack([np.arange(m) / m, np.full(m, 1 / m)], axis=1)
    pre = (x @ h["w_self"] + left @ h["w_left"] + right @ h["w_right"] + position @ h["w_position"]
           + context @ h["w_context"] + h["bias"])
    weights = np.exp(np.maximum(np.maximum(pre, 0) @ h["v"] + h["v_bias"], 0))
    out: dict[str, float] = {}
    for (terms, *_), w in zip(chunks, weights):
        for t in terms:
            out[t] = out.get(t, 0.0) + float(w)
    return out


def test_batches_follow_the_formula_as_the_table_grows_and_threads_share_it(small_fit, monkeypatch):
    """Served weights equal the formula computed in float64 from the folder's own tables, for every
    query of a batch: one-word, stopword-only and empty queries, a chunk over ``CHUNK_CHARS``
    characters (never kept), over 1,024 distinct words (the table grows) and a store replaced
    between batches, with two threads encoding at once."""
    from concurrent.futures import ThreadPoolExecutor

    from bm25aug.model import reweighter

    long = "x" * 70 + "glaucoma"
    queries = [*TEXTS, "glaucoma", "the of and", "", f"{long} symptoms", f"aspirin {long}"]
    queries += [f"word{i} glaucoma{i} q{i}x" for i in range(600)]  # 1,200 distinct new words
    monkeypatch.setattr(reweighter, "PROJECTED_CACHE", 1100)  # 1,024 rows, then 1,100, then 1,024 more
    model = Reweighter.from_folder(small_fit[3])
    first = model.encode_batch(queries)
    store = model._store
    assert store.used > 1100 and store.table.shape[1] == 1100 + 1024 and long not in store.entries
    for got, text in zip(first, queries):
        want = reference(model, text)
        assert got.keys() == want.keys(), text
        np.testing.assert_allclose([got[t] for t in want], list(want.values()), rtol=1e-5, err_msg=text)
    with ThreadPoolExecutor(2) as pool:  # the store fills and is replaced while both threads encode
        runs = list(pool.map(lambda part: [model.encode_batch(part[i:i + 7]) for i in range(0, len(part), 7)],
                             [queries[::-1], queries * 2]))
    assert sum(runs[0], [])[::-1] == first and sum(runs[1], []) == first * 2
    assert model._store is not store
    assert max(w for terms in first for w in terms.values()) > 1.05  # the fit moves weights off the floor
