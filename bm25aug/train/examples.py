"""Training examples: each training query with the index rows of its positives and hard negatives."""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bm25aug.data.layouts import Split
from bm25aug.data.registry import Dataset
from bm25aug.errors import UserError
from bm25aug.eval.metrics import has_answer
from bm25aug.io import derived_ok, record_derived, source_key, write_json
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.train.pseudo import PREFIX as PSEUDO_PREFIX
from bm25aug.train.torch_bm25 import TorchBM25

log = logging.getLogger(__name__)


@dataclass
class Example:
    qid: str
    query: str
    positives: list[int]  # rows of its corpus's index
    negatives: list[int]
    corpus: int = 0  # which of the run's training corpora (``bm25aug.train.corpora``)
    feedback: str = ""  # what a learned-feedback model reads after the query (``FeedbackTerms``)


def mine_hard_negatives(searcher: BM25Searcher, split: Split, dataset: Dataset, depth: int,
                        threads: int) -> dict[str, list[str]]:
    """Top-``depth`` BM25 documents (on the target's index) that are not judged positive (nor contain an answer)."""
    qids = [q for q in split.queries if split.qrels.get(q)]
    tops = searcher.batch_search_arrays([split.queries[q] for q in qids], depth + 20, threads, desc="mine hard negatives")
    negatives = {}
    for qid, top in zip(qids, tops):
        answers = split.answers.get(qid)
        negatives[qid] = [d for d in searcher.docids[top.lucene_ids].tolist() if d not in split.qrels[qid]
                          and not (answers and has_answer(answers, dataset.corpus[d].text))][:depth]
    return negatives


def hard_negatives(config, searcher: BM25Searcher, dataset: Dataset, train: Split, cache: Path) -> dict[str, list[str]]:
    """Hard negatives per training query, cached in the run folder (``cache``) for ``--resume`` and
    reused only when made from the same index, training queries and settings (a run killed before
    its first epoch left one that a rerun with other settings must not read)."""
    c = config
    source = source_key("hard-negatives", searcher.meta.corpus_fingerprint, c.negatives, c.negative_depth,
                        c.target, c.k1, c.b, sorted(train.queries))
    if derived_ok(cache, source):
        return json.loads(cache.read_text())
    if c.negatives == "dpr":
        if not any(train.negatives.values()):
            raise UserError(f"{dataset.name}: --negatives dpr uses the training JSON's hard_negative_ctxs, "
                            f"and this one has none; fix: use --negatives bm25 (mined from the index)")
        negatives = {q: [d for d in ids if d not in train.qrels.get(q, {})][:c.negative_depth]
                     for q, ids in train.negatives.items()}
    else:
        negatives = mine_hard_negatives(searcher, train, dataset, c.negative_depth, c.threads)
    write_json(cache, negatives)
    record_derived(cache, source)
    return negatives


def build_examples(split: Split, negatives: dict[str, list[str]], bm25: TorchBM25, corpus: int = 0) -> list[Example]:
    """Training queries with the rows of their positives (judged > 0 and in the index) and negatives
    (``corpus``: the corpus's number in the run)."""
    def rows(docids: list[str]) -> list[int]:
        return [int(r) for r in bm25.index.doc_numbers(docids) if r >= 0]

    examples, unknown, named = [], 0, 0
    for qid, rels in split.qrels.items():
        pos = rows([d for d, g in rels.items() if g > 0])
        if pos and qid in split.queries:
            ids = negatives.get(qid, [])
            examples.append(Example(qid, split.queries[qid], pos, rows(ids), corpus))
            named, unknown = named + len(ids), unknown + len(ids) - len(examples[-1].negatives)
    if unknown:
        log.warning("%d of the %d hard negatives named for the training queries are not in the index (e.g. DPR "
                    "ids of another passage collection); they are left out", unknown, named)
    return examples


def hold_out_sentences(examples: list[Example], qrels_rows: dict[str, set[int]], target, bm25: TorchBM25) -> None:
    """A pseudo-query's positive becomes its document without the query's sentence (the Inverse
    Cloze Task): with the sentence left in, the document holds every query word and ranks first
    already, so the ranking loss has nothing to teach (docs/levers.md). The whole document stays
    out of the query's negatives: it contains its positive."""
    pseudo = [e for e in examples if e.qid.startswith(PSEUDO_PREFIX)]
    if not pseudo:
        return
    for e, terms in zip(pseudo, target.batch([e.query for e in pseudo]).terms):
        e.positives = [bm25.held_out_row(e.positives[0], Counter(terms))]
        qrels_rows[e.qid].update(e.positives)
