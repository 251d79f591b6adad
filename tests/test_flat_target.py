"""The flat target: a model serving Lucene's English-analyzer index (Pyserini's "flat")."""

import numpy as np
import pytest
import torch

from bm25aug.model.augmenter import AugmenterConfig, QueryAugmenter


def test_flat_map_analyzes_whole_words_only(flat_model):
    fm = flat_model.target.map
    tok = flat_model.tokenizer
    mapped = dict(zip(fm.vocab_ids.tolist(), (fm.terms[t] for t in fm.term_ids.tolist())))
    ids = dict(zip(["cats", "cat", "running", "run", "the", "##s", "[CLS]", "[unused0]"],
                   tok.convert_tokens_to_ids(["cats", "cat", "running", "run", "the", "##s", "[CLS]", "[unused0]"])))
    assert mapped[ids["cats"]] == mapped[ids["cat"]] == "cat"  # stemmed entries reach one term
    assert mapped[ids["running"]] == mapped[ids["run"]] == "run"
    for unmapped in ("the", "##s", "[CLS]", "[unused0]"):  # stopword, piece, specials
        assert ids[unmapped] not in mapped
    a = np.zeros(len(tok), np.float32)
    a[[ids["cats"], ids["cat"], ids["the"]]] = [0.5, 0.25, 3.0]
    assert flat_model.target.added(flat_model.target.live_part(a)) == {"cat": 0.75}  # entries that stem alike add up
    assert ids["the"] not in flat_model.target.live and ids["cats"] in flat_model.target.live


def test_added_terms_sum_a_through_the_map_in_float32(flat_model):
    """``FlatTarget.added`` reads only a(q)'s non-zero entries; it equals the map's 0/1 matrix
    times a, bit for bit, stemming merges included."""
    target = flat_model.target
    matrix = target.map.matrix()
    rng = np.random.default_rng(0)
    merged = np.flatnonzero(np.bincount(target.map.term_ids) > 1)  # terms several entries reach
    merging = np.flatnonzero(np.isin(target.term_of, merged[:50]))
    for _ in range(50):
        a = np.zeros(target.map.vocab_size, np.float32)
        picks = np.concatenate([rng.choice(merging, 20), rng.integers(0, a.size, 30)])
        a[picks] = rng.uniform(0, 3, picks.size).astype(np.float32)
        dense = matrix.T @ a
        expected = {target.map.terms[t]: dense[t] for t in np.flatnonzero(dense > 0)}
        got = target.added(target.live_part(a))
        assert list(got) == list(expected) and all(got[t] == expected[t] for t in got)
    assert target.added(np.zeros(len(target.live), np.float32)) == {}


def test_flat_query_terms_are_lucenes_analysis_with_counts(flat_model, scifact_flat):
    from bm25aug.search.bm25 import BM25Searcher

    bare = QueryAugmenter(AugmenterConfig(encoder=flat_model.config.encoder, use_weights=False,
                                          use_augmentation=False, target="flat"),
                          flat_model.encoder, flat_model.tokenizer).eval()
    searcher = BM25Searcher(scifact_flat)
    for q in ["Cats chase cats; the cat's toys", "ALDH1 expression in breast-cancer patients \U0001F600 x",
              "0-dimensional biomaterials show inductive properties."]:
        assert bare.encode(q) == searcher.query_terms(q)


def test_w_per_flat_term_is_the_mean_over_its_words_tokens(flat_model):
    """"embryogenesis" is several WordPiece tokens and one flat term: it takes their mean w;
    "cats" appears twice: its two occurrences add up."""
    target = flat_model.target
    q = "embryogenesis cats cats"
    batch = target.batch([q])
    tokens = flat_model.tokenizer.convert_ids_to_tokens(batch.input_ids[0].tolist())
    w = np.zeros_like(batch.input_ids, dtype=np.float32)
    w[0, 1:-1] = np.arange(1, len(tokens) - 1, dtype=np.float32)  # w of token i is i
    pieces = [i for i, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]", "cats")]
    cats = [i for i, t in enumerate(tokens) if t == "cats"]
    terms = target.term_lists(batch, w, np.zeros((1, len(target.live)), np.float32))[0]
    assert len(pieces) > 1 and terms["cat"] == pytest.approx(sum(cats))
    assert list(terms) == ["cat", "embryogenesi"] and terms["embryogenesi"] == pytest.approx(np.mean(pieces))


def test_flat_target_without_a_and_w_is_bm25_flat_on_scifact(scifact, scifact_flat, flat_model):
    """Ranking and scores of every SciFact test query equal bm25-flat's (Pyserini's query)."""
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    bare = QueryAugmenter(AugmenterConfig(encoder=flat_model.config.encoder, use_weights=False,
                                          use_augmentation=False, target="flat"),
                          flat_model.encoder, flat_model.tokenizer).eval()
    flat = BM25Searcher(scifact_flat)
    augmented = AugmentedSearcher(bare, flat)
    for q in scifact.split("test").queries.values():
        assert augmented.search(q, 100) == flat.search(q, 100)


def test_torch_bm25_equals_lucene_on_scifact_flat(scifact, scifact_flat):
    """Raw Lucene scores of weighted flat queries (query terms plus added ones) vs torch."""
    from bm25aug.lucene.reader import LuceneIndex
    from bm25aug.search.bm25 import BM25Searcher
    from bm25aug.train.torch_bm25 import TorchBM25

    bm25 = TorchBM25(scifact_flat, None)
    index, searcher = LuceneIndex(scifact_flat), BM25Searcher(scifact_flat)
    rng = np.random.default_rng(0)
    terms_pool = list(bm25.columns)
    worst = 0.0
    for q in list(scifact.split("test").queries.values())[:20]:
        terms = {t: float(c * rng.uniform(0.1, 3)) for t, c in searcher.query_terms(q).items() if t in bm25.columns}
        terms.update({str(t): float(rng.uniform(0.01, 1)) for t in rng.choice(terms_pool, 10)})
        docs, lucene = index.raw_top(index.weighted_query(terms), 100)
        boosts = torch.zeros(1, len(bm25.columns))
        for t, w in terms.items():
            boosts[0, bm25.columns[t]] = w
        ours = bm25.score(boosts, docs.tolist())[0].numpy()
        assert bm25.docids.tolist() == index.docids.tolist()
        worst = max(worst, float(np.max(np.abs(ours - lucene) / lucene)))
    index.close()
    assert worst < 1e-4


def test_training_boosts_equal_search_term_lists(scifact_flat, flat_model):
    """What training scores (torch, index columns) is what search sends to Lucene (numpy, strings)."""
    from bm25aug.train.torch_bm25 import TorchBM25

    target = flat_model.target
    bm25 = TorchBM25(scifact_flat, None)
    cmap = target.columns(bm25)
    queries = ["ALDH1 expression is associated with poor outcome in breast cancer",
               "vitamin B12 deficiency cats cats", "\u2603"]
    batch = target.batch(queries)
    with torch.no_grad():
        out = flat_model(torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask))
        boosts = target.boosts(batch, out.token_weights, out.augmentation, cmap).numpy()
    lists = target.term_lists(batch, out.token_weights.numpy(), target.live_part(out.augmentation).numpy())
    for row, terms in zip(boosts, lists):
        in_index = {t: v for t, v in terms.items() if t in bm25.columns}
        got = {bm25.terms[c]: float(row[c]) for c in np.flatnonzero(row > 0)}
        assert got.keys() == in_index.keys()
        assert all(got[t] == pytest.approx(v, rel=1e-5) for t, v in in_index.items())


@pytest.mark.parametrize("target", ["wp", "flat"])
def test_long_query_keeps_every_term(target, offline_model, scifact_wp, scifact_flat):
    """A 290-word query (over 300 WordPiece tokens): terms beyond the encoder's 64-token window keep their BM25 weight."""
    from bm25aug.search.bm25 import BM25Searcher

    model = QueryAugmenter(AugmenterConfig(encoder=offline_model.config.encoder, target=target, use_augmentation=False, weight_floor=0.0,
                                           vocab_hash=offline_model.config.vocab_hash),
                           offline_model.encoder, offline_model.tokenizer).eval()
    with torch.no_grad():
        model.weight_head.bias.fill_(0.5)  # w ≡ 0.5 inside the window
    words = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega cell tumor gene protein "
             "mouse rat plasma serum kidney liver heart brain lung bone skin blood muscle nerve").split()
    query = " ".join(f"{w}{i}" if i % 3 else w for i, w in enumerate(words * 10))
    searcher = BM25Searcher(scifact_wp if target == "wp" else scifact_flat, tokenizer=model.tokenizer)
    plain = searcher.query_terms(query)
    terms = model.encode(query)
    assert sum(plain.values()) >= 250 and terms.keys() == plain.keys()  # nothing lost
    outside = [t for t in plain if terms[t] == plain[t]]  # only beyond the window: BM25's count
    assert outside and sum(terms.values()) < sum(plain.values())  # inside: w = 0.5 per occurrence


def test_gate_counts_only_entries_that_reach_a_term(flat_model):
    """Entries of a(q) that reach no flat term (## pieces, stopwords) add nothing, so the gate does
    not count them: with ``aug_gate`` 1, one whole-word entry passes however many dead ones fire."""
    from dataclasses import replace

    from bm25aug.model.targets import make_target

    tok = flat_model.tokenizer
    target = make_target(tok, replace(flat_model.config, aug_gate=1))
    batch = target.batch(["cats chase mice"])
    a = np.zeros((1, len(tok)), np.float32)
    a[0, tok.convert_tokens_to_ids(["##s", "##ing", "the", "and"])] = 2.0  # dead: reach no term
    a[0, tok.convert_tokens_to_ids("dog")] = 0.5
    w = np.ones_like(batch.input_ids, dtype=np.float32)
    assert target.use_augmentation(batch, target.live_part(a)).tolist() == [True]
    assert target.term_lists(batch, w, target.live_part(a))[0]["dog"] == pytest.approx(0.5)
    a[0, tok.convert_tokens_to_ids("bird")] = 0.5  # a second live entry: over the gate
    assert target.use_augmentation(batch, target.live_part(a)).tolist() == [False]
    assert "dog" not in target.term_lists(batch, w, target.live_part(a))[0]
