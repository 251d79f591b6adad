"""Metrics: pytrec_eval for qrels-judged sets, DPR answer matching for open-domain QA.

Averages are over every judged query (a query with no hits scores 0, like ``trec_eval -c``).
Capped recall is BEIR's: relevant documents in the top k divided by min(k, #relevant).
MRR@10 is the reciprocal rank of the first relevant document within the top 10.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Mapping
from functools import lru_cache

import numpy as np
import pytrec_eval
import regex

from bm25aug.data.corpus import Document
from bm25aug.search.hits import Hit

log = logging.getLogger(__name__)
QA_KS = (1, 5, 20, 100)


def _trec_run(run: dict[str, list[Hit]], qrels: dict[str, dict[str, int]], depth: int | None = None) -> dict:
    return {q: {h.docid: float(h.score) for h in run.get(q, [])[:depth]} for q in qrels}


def evaluate_qrels(run: dict[str, list[Hit]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """nDCG@10, R@100, capped R@100, MRR@10 and MAP, averaged over the judged queries."""
    qrels = {q: r for q, r in qrels.items() if r}
    trec_run, top10 = _trec_run(run, qrels), _trec_run(run, qrels, 10)
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100", "map"}).evaluate(trec_run)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    n = len(qrels)

    def mean(values) -> float:
        return float(sum(values) / n) if n else 0.0

    return {
        "ndcg@10": mean(full.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels),
        "recall@100": mean(full.get(q, {}).get("recall_100", 0.0) for q in qrels),
        "recall_cap@100": mean(capped_recall(run.get(q, []), qrels[q], 100) for q in qrels),
        "mrr@10": mean(rr.get(q, {}).get("recip_rank", 0.0) for q in qrels),
        "map": mean(full.get(q, {}).get("map", 0.0) for q in qrels),
        "num_queries": n,
    }


def capped_recall(hits: list[Hit], rels: dict[str, int], k: int) -> float:
    relevant = {d for d, g in rels.items() if g > 0}
    if not relevant:
        return 0.0
    found = sum(1 for h in hits[:k] if h.docid in relevant)
    return found / min(k, len(relevant))


# ---------------------------------------------------------------------------- DPR answer matching
_TOKEN = regex.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]", flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)


@lru_cache(maxsize=200_000)
def _tokens(text: str) -> tuple[str, ...]:
    """DPR's normalization: Unicode NFD, then its SimpleTokenizer (alphanumeric runs, other
    non-space characters one by one), lowercased."""
    return tuple(m.group().lower() for m in _TOKEN.finditer(unicodedata.normalize("NFD", text)))


def has_answer(answers: list[str], text: str) -> bool:
    """True when some answer's token sequence occurs in the text's token sequence (DPR ``has_answer``)."""
    doc = _tokens(text)
    for answer in answers:
        ans = _tokens(answer)
        if not ans:
            continue
        for i in range(len(doc) - len(ans) + 1):
            if doc[i:i + len(ans)] == ans:
                return True
    return False


def evaluate_answers(run: dict[str, list[Hit]], answers: dict[str, list[str]], corpus: Mapping[str, Document],
                     ks: tuple[int, ...] = QA_KS) -> dict[str, float]:
    """Acc@k: share of questions whose top k passages contain an answer string."""
    first = np.asarray(list(first_answer_ranks(run, answers, corpus, max(ks)).values()), dtype=float)
    metrics = {f"acc@{k}": float(np.mean(first < k)) if len(first) else 0.0 for k in ks}
    metrics["num_queries"] = len(first)
    return metrics


def first_answer_ranks(run: dict[str, list[Hit]], answers: dict[str, list[str]], corpus: Mapping[str, Document],
                       depth: int) -> dict[str, float]:
    """Per question, the 0-based rank of the first passage in the top ``depth`` with an answer (inf: none)."""
    ranks = {}
    for qid, ans in answers.items():
        rank = next((i for i, h in enumerate(run.get(qid, [])[:depth])
                     if h.docid in corpus and has_answer(ans, corpus[h.docid].text)), None)
        ranks[qid] = np.inf if rank is None else float(rank)
    return ranks


def per_query(run: dict[str, list[Hit]], split, corpus: Mapping[str, Document]) -> tuple[str, dict[str, float]]:
    """The split's main metric per judged query, nDCG@10 (or Acc@5 for QA), with its name: what
    a paired comparison of two runs on the same queries needs."""
    if split.answers:
        return "acc@5", {q: float(r < 5) for q, r in first_answer_ranks(run, split.answers, corpus, 5).items()}
    qrels = {q: r for q, r in split.judged_qrels.items() if r}
    got = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(_trec_run(run, qrels))
    return "ndcg@10", {q: got.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels}


def evaluate_split(run: dict[str, list[Hit]], split, corpus: Mapping[str, Document]) -> dict[str, float]:
    """Answer-match Acc@k for QA splits (they have answers), qrels metrics otherwise."""
    unknown = [q for q in run if q not in split.queries]
    if unknown:
        log.warning("%d of the run's %d queries are not in this split (e.g. %r); they are not scored",
                    len(unknown), len(run), unknown[0])
    if split.answers:
        return evaluate_answers(run, split.answers, corpus)
    return evaluate_qrels(run, split.judged_qrels)


def added_terms(searcher, term_lists: dict[str, dict[str, float]], split):
    """``(qid, term, weight, found)`` for each added term (not among the query's own index terms)
    of each judged query: whether it occurs in any of the query's judged-relevant documents, as the
    index stores them."""
    from bm25aug.lucene.doc_terms import DocTermReader

    reader = DocTermReader(searcher.index, pretokenized=searcher.meta.flavor == "wp")
    for qid, terms in term_lists.items():
        judged = [d for d, g in split.qrels.get(qid, {}).items() if g > 0]
        docs = [int(r) for r in searcher.index.doc_numbers(judged) if r >= 0]
        if not docs:
            continue
        relevant = set().union(*(reader.terms(d) for d in docs))
        original = searcher.query_terms(split.queries[qid])
        for t, w in terms.items():
            if t not in original:
                yield qid, t, w, t in relevant


def added_term_precision(searcher, term_lists: dict[str, dict[str, float]], split) -> dict[str, float]:
    """How much of what the model adds is on topic: of the added terms (``added_terms``), the
    share, by weight and by count, found in a judged-relevant document. Summed over the judged
    queries, then divided."""
    weight = weight_hit = count = count_hit = 0.0
    for _, _, w, found in added_terms(searcher, term_lists, split):
        weight, count = weight + w, count + 1
        weight_hit, count_hit = weight_hit + w * found, count_hit + found
    return {"added_precision_weight": weight_hit / weight if weight else 0.0,
            "added_precision_count": count_hit / count if count else 0.0}
