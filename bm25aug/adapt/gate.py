"""The label-free gate: held-out pseudo-queries judged by the teacher.

An unlabelled corpus has no dev queries, so ``bm25aug adapt`` makes its own: ``dev_queries``
pseudo-queries from documents that no training query was made from. Each is judged by training's
target (the teacher's logits mixed with plain BM25's, ``--mix``) over BM25's top ``depth`` on the
served index (with ``--mix 0``, the teacher alone, over those and its own top ``depth`` over the
whole corpus), the document the query was made from left out as in training: its top ``judged``
documents are relevant, the first three with grade 2, the rest with grade 1. These judgements are the training run's dev split, so the trainer's own
``DevSelection`` picks the epoch and its ``SignificanceCheck`` is the gate: unless the adapted model
beats plain BM25 on them by a paired one-sided t-test over per-query nDCG@10 at ``--significance``,
best/ is served as plain BM25 (w = 1, a = 0). docs/adapt.md shows how its verdicts compare with
real judgements on the shared sets.
"""

from __future__ import annotations

import numpy as np

from bm25aug.data.layouts import Split
from bm25aug.adapt.queries import PREFIX

TOP_GRADE = 3  # the teacher's first this many judged documents have grade 2, the others 1


def judged_split(searcher, teacher, queries: dict[str, str], depth: int, adapt, threads: int) -> Split:
    """``queries`` with graded judgements from ``teacher`` over each one's pool (see the module);
    with ``adapt.mix``, from the same mix of the teacher's and plain BM25's logits that training
    targets, over BM25's candidates alone (whose BM25 scores are known)."""
    qids = list(queries)
    texts = [queries[q] for q in qids]
    tops = searcher.batch_search_arrays(texts, depth + 1, threads)
    source = searcher.index.doc_numbers([q[len(PREFIX):] for q in qids])
    own = teacher_tops(teacher, texts, depth) if not adapt.mix else None
    pools, bm25 = [], []
    for i, top in enumerate(tops):
        keep = top.lucene_ids != source[i]
        pool = top.lucene_ids[keep][:depth].astype(np.int64).tolist()
        bm25.append(top.scores[keep][:depth].astype(np.float32))
        seen = set(pool)
        pool += [int(r) for r in own[i] if r != source[i] and int(r) not in seen] if own is not None else []
        pools.append(pool)
    scores = [s / adapt.teacher_temperature for s in teacher.scores(texts, pools)]
    if adapt.mix:
        scores = mixed(scores, bm25, adapt.mix)
    qrels = {}
    for qid, pool, s in zip(qids, pools, scores):
        best = [pool[j] for j in np.argsort(-s, kind="stable")[:adapt.judged]]
        docids = searcher.index.docids[np.asarray(best, np.int64)] if best else []
        qrels[qid] = {str(d): 2 if rank < TOP_GRADE else 1 for rank, d in enumerate(docids)}
    return Split({q: queries[q] for q in qids if qrels[q]}, {q: r for q, r in qrels.items() if r})


def mixed(teacher: list[np.ndarray], bm25: list[np.ndarray], mix: float,
          scale: float | None = None) -> list[np.ndarray]:
    """``(1 - mix) teacher + mix bm25 / scale`` per list, ``scale`` putting BM25's scores on the
    teacher's spread (default: the median ratio of the two spreads within a list)."""
    scale = spread_ratio(teacher, bm25) if scale is None else scale
    return [(1 - mix) * t + mix * b / scale for t, b in zip(teacher, bm25)]


def spread_ratio(teacher: list[np.ndarray], bm25: list[np.ndarray]) -> float:
    """The median over lists of BM25's standard deviation over the teacher's."""
    ratios = [float(np.std(b)) / float(np.std(t)) for t, b in zip(teacher, bm25)
              if len(t) > 1 and np.std(t) > 0 and np.std(b) > 0]
    return float(np.median(ratios)) if ratios else 1.0


def teacher_tops(teacher, texts: list[str], depth: int) -> list[np.ndarray] | None:
    """The teacher's own top ``depth`` rows over the whole corpus per query, where it can search (dense)."""
    embeddings = getattr(teacher, "embeddings", None)
    if embeddings is None:
        return None
    vectors = teacher.query_vectors(texts)
    k = min(depth + 1, len(embeddings))
    tops = []
    for v in vectors:
        scores = embeddings @ v
        best = np.argpartition(-scores, k - 1)[:k]
        tops.append(best[np.argsort(-scores[best], kind="stable")])
    return tops


def verdict(selection: dict | None) -> str:
    """One line on what the gate decided (``selection.json`` of the run)."""
    if not selection:
        return "no gate ran (--significance 0)"
    word = "kept" if selection["kept"] else "served as plain BM25"
    return (f"{word}: teacher-judged nDCG@10 on {selection['queries']} held-out pseudo-queries "
            f"{selection['model']:.4f} "
            f"against plain BM25's {selection['bm25']:.4f}, one-sided p = {selection['p_value']:.2g}")
