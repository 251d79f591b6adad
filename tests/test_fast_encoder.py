"""The int8 ONNX encoder that search and export use, against the fp32 torch reference."""

import json

import numpy as np
import pytest

from bm25aug.errors import UserError
from bm25aug.model.encoder import BATCH, WINDOW, encode_queries, prune
from bm25aug.model.onnx_encoder import ONNX_DIR, export_source
from bm25aug.model.loading import load_encoder

QUERIES = ["ALDH1 expression is associated with poorer prognosis in breast cancer",
           "Vitamin B12 deficiency causes neurological symptoms", "cats on mats", "a b c",
           "0-dimensional biomaterials show inductive properties.", "what is the capital of france"]


@pytest.fixture(scope="module")
def checkpoint(offline_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("fast") / "ckpt"
    offline_model.save_pretrained(path)
    return path


def test_onnx_terms_stay_close_to_fp32(checkpoint):
    """Bound: every term the fp32 model weighs at least 0.5 is kept; each query's weight vector is
    within a relative L2 error of 0.35 of fp32, 0.15 on average (measured: 0.27 at most, on
    "cats on mats"; over 100 SciFact queries 0.18 at most, where torch's int8 model reaches 0.49),
    whether encoded alone or in a batch."""
    reference, fast = load_encoder(checkpoint, "torch-fp32"), load_encoder(checkpoint, "onnx-int8")
    # Alone (search, one query) and in one padded batch (batch search and export, encode_queries),
    # where int8's activation scales are the batch's: the same bound.
    for got_all in ([fast.encode(q) for q in QUERIES], encode_queries(fast, QUERIES, progress=False, batch_size=BATCH)):
        errors = []
        for query, got in zip(QUERIES, got_all):
            ref = reference.encode(query)
            assert all(term in got for term, weight in ref.items() if weight >= 0.5), query
            terms = sorted(set(ref) | set(got))
            r, g = np.array([ref.get(t, 0.0) for t in terms]), np.array([got.get(t, 0.0) for t in terms])
            errors.append(np.linalg.norm(g - r) / np.linalg.norm(r))
        assert max(errors) <= 0.35 and np.mean(errors) <= 0.15, errors


def test_int8_batch_search_encodes_each_query_alone_unless_asked(checkpoint, tiny_wp):
    """The int8 encoder's batches share activation scales, so by default batch search encodes
    query by query and equals ``search`` exactly; ``encode_batch_size`` batches for throughput,
    and ``threads`` never changes a result."""
    from bm25aug.search.augmented import AugmentedSearcher

    _, wp, flat = tiny_wp
    fast = load_encoder(checkpoint, "onnx-int8")
    index = flat if fast.config.target == "flat" else wp
    queries = QUERIES * 3
    searcher = AugmentedSearcher.from_pretrained(checkpoint, index)
    assert [searcher.hits(t) for t in searcher.batch_search_arrays(queries, 5, 2)] == [searcher.search(q, 5) for q in queries]
    batched = AugmentedSearcher.from_pretrained(checkpoint, index, encode_batch_size=BATCH)
    assert batched.batch_search_arrays(queries, 5, 1)[0].lucene_ids.tolist() == \
        batched.batch_search_arrays(queries, 5, 2)[0].lucene_ids.tolist()
    assert batched.term_lists(queries) == [batched.bm25.indexed(t) for t in encode_queries(fast, queries, progress=False,
                                                                                            batch_size=BATCH)]


def test_threads_encode_exactly_as_one_thread(flat_model, tiny_wp, tmp_path):
    """Export, eval and batch search encode on ``threads`` threads: the int8 flat encoder (its
    Lucene analysis called from every thread) gives each query, over more than one window, the
    terms ``encode`` gives it alone, on 1, 2 and 3 threads."""
    from bm25aug.search.augmented import AugmentedSearcher

    flat_model.save_pretrained(tmp_path / "flat")
    fast = load_encoder(tmp_path / "flat", "onnx-int8")
    queries = [f"{q} {i}" if i % 7 else q for i, q in enumerate(QUERIES * 50 + ["", "caf\u00e9 \U0001f600 cats"])]
    assert len(queries) > WINDOW
    alone = [prune(fast.encode(q)) for q in queries]
    for threads in (1, 2, 3):
        assert encode_queries(fast, queries, progress=False, threads=threads) == alone, threads
    searcher = AugmentedSearcher.from_pretrained(tmp_path / "flat", tiny_wp[2])
    assert searcher.term_lists(queries, 2) == searcher.term_lists(queries) == [searcher.term_list(q) for q in queries]


def test_export_is_made_once_and_follows_the_weights(offline_model, tmp_path):
    import torch

    checkpoint = tmp_path / "ckpt"
    offline_model.save_pretrained(checkpoint)
    load_encoder(checkpoint, "onnx-int8")
    onnx_file = checkpoint / ONNX_DIR / "model.int8.onnx"
    first = onnx_file.stat().st_mtime_ns
    load_encoder(checkpoint, "onnx-int8")
    assert onnx_file.stat().st_mtime_ns == first  # reused
    with torch.no_grad():
        offline_model.weight_head.bias.add_(1.0)
    try:
        offline_model.save_pretrained(checkpoint)
    finally:
        with torch.no_grad():
            offline_model.weight_head.bias.sub_(1.0)
    fast, reference = load_encoder(checkpoint, "onnx-int8"), load_encoder(checkpoint, "torch-fp32")
    assert onnx_file.stat().st_mtime_ns != first  # new weights: exported again
    record = json.loads((checkpoint / ONNX_DIR / "model.int8.onnx.source.json").read_text())
    assert record["source"] == export_source(checkpoint)
    assert fast.encode("cats")["cats"] == pytest.approx(reference.encode("cats")["cats"], rel=0.15)


def test_another_checkpoint_of_the_same_weights_is_not_exported_again(offline_model, tmp_path, monkeypatch):
    """The export is made once per source, in the cache, and copied into each checkpoint's onnx/:
    a second checkpoint of the same weights gets the same bytes with nothing exported (a damaged
    cached copy fails ``derived_ok`` as a checkpoint's own does, and is exported again)."""
    import bm25aug.model.onnx_encoder as onnx_encoder

    monkeypatch.setattr(onnx_encoder, "CACHE_DIR", tmp_path / "cache")
    first, second = tmp_path / "first", tmp_path / "second"
    offline_model.save_pretrained(first)
    offline_model.save_pretrained(second)
    source = export_source(first)
    assert export_source(second) == source
    expected = load_encoder(first, "onnx-int8").encode("cats and lions")
    cached = tmp_path / "cache" / source / "model.int8.onnx"
    assert cached.read_bytes() == (first / ONNX_DIR / "model.int8.onnx").read_bytes()
    exports = []
    real = onnx_encoder.export_onnx
    monkeypatch.setattr(onnx_encoder, "export_onnx", lambda *a: exports.append(a) or real(*a))
    assert load_encoder(second, "onnx-int8").encode("cats and lions") == expected and exports == []
    assert (second / ONNX_DIR / "model.int8.onnx").read_bytes() == cached.read_bytes()


def test_the_export_cache_keeps_the_most_recently_used_and_nothing_else_is_removed(tmp_path, monkeypatch):
    """The cache is bounded: after each new export, only the ``CACHE_ENTRIES`` most recently used
    exports stay (a use refreshes one), and a folder there that is not an export is left alone."""
    import os

    import bm25aug.model.onnx_encoder as onnx_encoder
    from bm25aug.io import record_derived

    cache = tmp_path / "cache"
    monkeypatch.setattr(onnx_encoder, "CACHE_DIR", cache)
    monkeypatch.setattr(onnx_encoder, "CACHE_ENTRIES", 3)
    exported = []

    def fake_export(model, folder, source):  # the bookkeeping under test, not ONNX's conversion
        folder.mkdir(parents=True)
        (folder / "model.int8.onnx").write_bytes(source.encode())
        record_derived(folder / "model.int8.onnx", source)
        exported.append(source)
        return folder / "model.int8.onnx"

    monkeypatch.setattr(onnx_encoder, "export_onnx", fake_export)
    foreign = cache / "users-notes"
    foreign.mkdir(parents=True)
    (foreign / "keep.txt").write_text("mine")
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    clock, real_utime = iter(range(1_000_000, 2_000_000, 10)), os.utime

    def utime(path, *args, **kwargs):  # "now" on a clock that always moves on (mtimes can tie)
        return real_utime(path, *args, **kwargs) if args or kwargs else real_utime(path, ((t := next(clock)), t))

    monkeypatch.setattr(os, "utime", utime)
    for source in ("s1", "s2", "s3"):
        onnx_encoder.onnx_path(checkpoint, None, source)
    onnx_encoder.onnx_path(checkpoint, None, "s1")  # s1 used again: now the newest
    assert exported == ["s1", "s2", "s3"]  # the last call copied from the cache
    onnx_encoder.onnx_path(checkpoint, None, "s4")
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == ["s1", "s3", "s4", "users-notes"]
    assert (foreign / "keep.txt").read_text() == "mine"
    from filelock import FileLock

    with FileLock(str(cache / ".s3.lock")):  # s3, the least recently used, is being read by another process
        onnx_encoder.onnx_path(checkpoint, None, "s5")
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == ["s1", "s3", "s4", "s5",
                                                                                   "users-notes"]  # s3 stays


def test_every_runtime_encodes(checkpoint):
    """torch-int8 (dynamically quantized Linear layers) encodes as the others do."""
    for runtime in ("torch-fp32", "torch-int8", "onnx-int8"):
        terms = load_encoder(checkpoint, runtime).encode("vitamin B12 deficiency")
        assert "vitamin" in terms and all(w > 0 for w in terms.values()), runtime


def test_unknown_runtime(checkpoint):
    with pytest.raises(UserError, match="unknown query encoder runtime"):
        load_encoder(checkpoint, "tensorrt")


@pytest.mark.parametrize("aug_layer", [-1, 0])
def test_onnx_export_keeps_threshold_and_layer_count(aug_layer, tmp_path):
    """A model trained with ``aug_threshold`` on a cut-down encoder, its a(q) from the last layer or
    the embeddings (``aug_layer``), exports as it is: the ONNX encoder adds no term weighted at or
    below the threshold, and agrees with fp32 on the rest."""
    from bm25aug.model.augmenter import QueryAugmenter

    small = QueryAugmenter.from_encoder(target="wp", weight_floor=0.0, layers=2, aug_threshold=0.3, aug_layer=aug_layer)
    small.save_pretrained(tmp_path / "small")
    fast, reference = load_encoder(tmp_path / "small", "onnx-int8"), load_encoder(tmp_path / "small", "torch-fp32")
    query = QUERIES[1]
    own = set(fast.target.batch([query]).terms[0])
    got, ref = fast.encode(query), reference.encode(query)
    added = {t: w for t, w in got.items() if t not in own}
    assert added and min(added.values()) > 0.3
    assert all(t in got for t, w in ref.items() if w >= 0.5)


def test_onnx_graph_computes_only_live_rows(flat_model, tmp_path):
    """The export computes a(q) only on the target's live entries (for flat, the whole-word
    entries of the map, three quarters of the vocabulary): its head has one row per live entry,
    and the fp32 forward on those rows equals the full forward's live part."""
    import onnx
    import torch

    flat_model.save_pretrained(tmp_path / "flat")
    fast = load_encoder(tmp_path / "flat", "onnx-int8")
    live = torch.from_numpy(fast.target.live)
    vocab = flat_model.config.vocab_size
    assert 0.5 * vocab < len(live) < 0.9 * vocab
    enc = flat_model.tokenize(QUERIES)
    with torch.no_grad():
        full = flat_model(enc["input_ids"], enc["attention_mask"]).augmentation
        rows = flat_model(enc["input_ids"], enc["attention_mask"], rows=live).augmentation
    assert rows.shape == (len(QUERIES), len(live))
    assert torch.allclose(rows, full[:, live], rtol=1e-6, atol=1e-6)
    heads = [list(t.dims) for t in onnx.load(fast.session._model_path).graph.initializer if len(t.dims) == 2]
    assert [384, len(live)] in heads and [384, vocab] not in heads  # the head's weight, int8, pruned
    w, a = fast.session.run(None, {k: v.numpy() for k, v in enc.items()})
    assert a.shape == (len(QUERIES), len(live))
