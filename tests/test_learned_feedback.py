"""Learned feedback (``feedback_terms``): the encoder reads the query, then RM3's new terms of a
first BM25 search. Only the query is weighted and counted; training scores what search sends; the
feedback is RM3's own terms; every search path ranks alike."""

import numpy as np
import pytest
import torch

from bm25aug.errors import UserError
from bm25aug.lucene.analysis import analyze
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.search.feedback import RM3, FeedbackEncoder, FeedbackTerms, RM3Searcher

QUERIES = ["ALDH1 expression is associated with poorer prognosis in breast cancer",
           "vitamin B12 deficiency cats cats", "\u2603"]
FEEDBACK = ["tumor stem cells", "cobalamin anemia neurological", ""]


@pytest.fixture(scope="module")
def feedback_model():
    """A flat model that reads 10 feedback terms, its weight head moved off its start (w ≡ 1) and
    no weight floor, so that a w read at the wrong position shows."""
    from bm25aug.model.augmenter import QueryAugmenter

    model = QueryAugmenter.from_encoder(target="flat", feedback_terms=10, weight_floor=0.0).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        model.weight_head.weight.normal_(std=0.05)
    return model


def test_the_query_keeps_its_positions_and_alone_is_weighted(feedback_model):
    target = feedback_model.target
    alone, read = target.batch(QUERIES, [""] * len(QUERIES)), target.batch(QUERIES, FEEDBACK)
    assert read.terms == alone.terms and read.spans == alone.spans
    sep, tok = feedback_model.tokenizer.sep_token_id, feedback_model.tokenizer
    for i, extra in enumerate(FEEDBACK):
        n = int(alone.attention_mask[i].sum())
        assert read.input_ids[i, :n].tolist() == alone.input_ids[i, :n].tolist()
        tail = read.input_ids[i, n:int(read.attention_mask[i].sum())].tolist()
        assert tail == (tok(extra, add_special_tokens=False)["input_ids"] + [sep] if extra else [])
    with torch.no_grad():
        out = feedback_model(torch.from_numpy(read.input_ids), torch.from_numpy(read.attention_mask))
        plain = feedback_model(torch.from_numpy(alone.input_ids), torch.from_numpy(alone.attention_mask))
    for i in range(len(QUERIES)):
        n = int(alone.attention_mask[i].sum())
        assert not out.token_weights[i, n:].any(), "the feedback is read, never weighted"
    assert out.token_weights[0, 1:5].min() > 0 and len(set(out.token_weights[0, 1:5].tolist())) > 1
    # What the model reads changes what it proposes (the last query has no feedback: unchanged).
    assert not torch.allclose(out.augmentation[0], plain.augmentation[0])
    assert torch.allclose(out.augmentation[2], plain.augmentation[2], atol=1e-6)


def test_training_boosts_equal_search_term_lists_with_feedback(scifact_flat, feedback_model):
    from bm25aug.train.torch_bm25 import TorchBM25

    target = feedback_model.target
    bm25 = TorchBM25(scifact_flat, None)
    cmap = target.columns(bm25)
    batch = target.batch(QUERIES, FEEDBACK)
    with torch.no_grad():
        out = feedback_model(torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask))
        boosts = target.boosts(batch, out.token_weights, out.augmentation, cmap).numpy()
    lists = target.term_lists(batch, out.token_weights.numpy(), target.live_part(out.augmentation).numpy())
    assert lists == feedback_model.encode_batch(QUERIES, FEEDBACK)
    for row, terms in zip(boosts, lists):
        in_index = {t: v for t, v in terms.items() if t in bm25.columns}
        got = {bm25.terms[c]: float(row[c]) for c in np.flatnonzero(row > 0)}
        assert got.keys() == in_index.keys()
        assert all(got[t] == pytest.approx(v, rel=1e-5) for t, v in in_index.items())


def test_feedback_is_rm3s_new_terms_spelled_as_words(scifact, scifact_flat, feedback_model):
    """Each feedback word analyzes to its RM3 term, in RM3's order, the query's own terms left out."""
    searcher = BM25Searcher(scifact_flat)
    feedback = FeedbackTerms(searcher, 10, feedback_model.tokenizer)
    rm3 = RM3Searcher(searcher, RM3(fb_terms=10))
    spelled = 0
    for query in list(scifact.split("test").queries.values())[:20]:
        terms = searcher.query_terms(query)
        expected = [t for t in rm3.relevance(terms) if t not in terms]
        words = feedback.text(query).split()
        assert [w if w == t else analyze(w)[0] for w, t in zip(words, expected)] == expected
        assert len(words) == len(expected)
        spelled += sum(w != t for w, t in zip(words, expected))
    assert spelled > 0, "stems with a vocabulary word are spelled as that word"
    assert feedback.text("") == "" and feedback.text("zzzqqq") == ""


def test_every_path_ranks_alike_and_threads_change_nothing(scifact, scifact_flat, feedback_model, tmp_path):
    """One query at a time, batch search on 1 and 2 threads and ``term_lists`` (what the server
    and export use) agree (the int8 encoder encodes query by query); the ONNX export stays close
    to fp32."""
    from bm25aug.model.loading import load_encoder
    from bm25aug.search.augmented import AugmentedSearcher

    feedback_model.save_pretrained(tmp_path / "fb")
    searcher = AugmentedSearcher.from_pretrained(tmp_path / "fb", scifact_flat)
    assert isinstance(searcher.encoder, FeedbackEncoder)
    queries = list(scifact.split("test").queries.values())[:12] + [""]
    one = [searcher.search_arrays(q, 100) for q in queries]
    for threads in (1, 2):
        for a, b in zip(one, searcher.batch_search_arrays(queries, 100, threads)):
            assert np.array_equal(a.lucene_ids, b.lucene_ids) and np.array_equal(a.scores, b.scores)
    assert searcher.term_lists(queries, 2) == [searcher.term_list(q) for q in queries]
    reference = FeedbackEncoder(load_encoder(tmp_path / "fb", "torch-fp32"), BM25Searcher(scifact_flat))
    for query in queries[:6]:
        ref, got = reference.encode(query), searcher.encoder.encode(query)
        terms = sorted(set(ref) | set(got))
        r, g = np.array([ref.get(t, 0.0) for t in terms]), np.array([got.get(t, 0.0) for t in terms])
        assert np.linalg.norm(g - r) <= 0.35 * np.linalg.norm(r), query


def test_a_feedback_model_needs_its_index(feedback_model, scifact_wp, tmp_path):
    from bm25aug.model.export import export_term_lists
    from bm25aug.train.arguments import TrainConfig

    with pytest.raises(UserError, match="reads BM25 feedback"):
        feedback_model.encode("a query")
    with pytest.raises(UserError, match="reads BM25 feedback"):
        export_term_lists(feedback_model, {"q": "a query"}, tmp_path / "terms.jsonl")
    assert not (tmp_path / "terms.jsonl").exists()
    with pytest.raises(UserError, match="flat index"):
        FeedbackTerms(BM25Searcher(scifact_wp), 10, feedback_model.tokenizer)
    for clash in (dict(target="wp"), dict(pseudo_queries=100), dict(aug_init="centered"), dict(max_query_length=300)):
        with pytest.raises(UserError, match="cannot be combined with"):
            TrainConfig(feedback_terms=10, **clash)
    with pytest.raises(UserError, match="--feedback-terms"):
        TrainConfig(feedback_terms=-1)


def test_a_model_served_as_plain_bm25_searches_nothing_first(feedback_model, scifact_flat, tmp_path):
    """The significance check leaves a model that did not beat BM25 as w ≡ 1, a ≡ 0: it reads
    nothing, so its feedback would cost a search for nothing."""
    from dataclasses import replace

    from bm25aug.model.augmenter import QueryAugmenter
    from bm25aug.search.augmented import AugmentedSearcher

    feedback_model.save_pretrained(tmp_path / "plain")
    plain = QueryAugmenter.from_pretrained(tmp_path / "plain")
    plain.config = replace(plain.config, use_weights=False, use_augmentation=False)
    searcher = AugmentedSearcher(plain, BM25Searcher(scifact_flat))
    assert not isinstance(searcher.encoder, FeedbackEncoder)
    query = "vitamin B12 deficiency cats cats"
    assert searcher.term_list(query) == searcher.bm25.indexed(searcher.bm25.query_terms(query))


def test_a_typed_sep_stays_in_the_query(feedback_model):
    """The model takes what follows the first [SEP] for feedback: a "[SEP]" typed in a query is
    read as [UNK], so the words after it keep their weights."""
    target, tok = feedback_model.target, feedback_model.tokenizer
    batch = target.batch(["cats [SEP] dogs"], ["tails"])
    row = batch.input_ids[0, :int(batch.attention_mask[0].sum())].tolist()
    assert row.count(tok.sep_token_id) == 2 and tok.unk_token_id in row
    with torch.no_grad():
        out = feedback_model(torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask))
    dogs = row.index(tok.convert_tokens_to_ids("dogs"))
    assert out.token_weights[0, dogs] > 0


def test_export_reads_the_datasets_index_first(scifact, scifact_flat, feedback_model, tmp_path):
    """``bm25aug export`` of a feedback model writes the term lists the searcher sends."""
    import json

    from bm25aug.cli import main
    from bm25aug.search.augmented import AugmentedSearcher

    feedback_model.save_pretrained(tmp_path / "fb")
    out = tmp_path / "terms.jsonl"
    assert main(["export", "--checkpoint", str(tmp_path / "fb"), "--dataset", "scifact", "--runtime", "torch-fp32",
                 "--output", str(out), "--index-root", str(scifact_flat.parent)]) in (0, None)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    searcher = AugmentedSearcher.from_pretrained(tmp_path / "fb", scifact_flat, runtime="torch-fp32")
    queries = [line["text"] for line in lines]
    assert [searcher.bm25.indexed(line["vector"]) for line in lines] == searcher.term_lists(queries)
