"""Training corpora: everything a training example is scored against, one bundle per corpus.

A model trained on several corpora (``train.py --dataset scifact nfcorpus squad``) sees each
example through its own corpus: torch BM25 over that index's statistics, the term map of the
target onto that index, a df-weighted L1 penalty from that index's document frequencies, hard and
random negatives from that corpus, and that corpus's dev queries. Batches never mix corpora, so
in-batch negatives are the example's own corpus's too (as sentence-transformers' multi-dataset
batch samplers keep each batch to one dataset).

``epoch_batches`` decides which corpus each step draws from: ``corpus_temperature`` 1 takes every
example once an epoch (corpora in proportion to their size); a higher temperature draws each
step's corpus with probability proportional to ``size ** (1 / T)``, flattening towards uniform, so
that a small corpus is not drowned by a large one.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from bm25aug.data.layouts import Split
from bm25aug.data.registry import Dataset
from bm25aug.errors import UserError
from bm25aug.io import write_json
from bm25aug.model.loading import is_static
from bm25aug.model.targets import ColumnMap
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.search.feedback import FeedbackTerms
from bm25aug.train.arguments import TrainConfig
from bm25aug.train.examples import Example, build_examples, hard_negatives, hold_out_sentences
from bm25aug.train.losses import AugmentationLoss, DfWeightedL1
from bm25aug.train.pseudo import with_pseudo_queries
from bm25aug.train.torch_bm25 import BM25Params, TorchBM25


@dataclass
class TrainingCorpus:
    """One corpus of a training run: its index, its statistics and its examples."""

    dataset: Dataset
    searcher: BM25Searcher
    bm25: TorchBM25
    cmap: ColumnMap
    loss: AugmentationLoss
    examples: list[Example]
    qrels_rows: dict[str, set[int]]  # training query -> rows of its judged-positive documents
    dev: Split
    dev_how: str

    @property
    def name(self) -> str:
        return self.dataset.name


def load_corpus(config: TrainConfig, dataset: Dataset, index: Path, model, out: Path, number: int) -> TrainingCorpus:
    """The bundle of corpus ``number`` of a run: index statistics, loss, dev split and examples
    (hard negatives mined once and cached in the run folder)."""
    searcher = BM25Searcher(index, config.k1, config.b, tokenizer=model.tokenizer, flavor=config.target)
    bm25 = TorchBM25(searcher.index, model.tokenizer.get_vocab() if config.target == "wp" else None,
                     BM25Params(config.k1, config.b, bag_of_words=config.bag_of_words))
    cmap = model.target.columns(bm25)
    df = bm25.df if is_static(model) else cmap.vocab_df(bm25.df)  # what a(q) is over: columns, or the vocabulary
    l1 = DfWeightedL1(df, bm25.num_docs, config.uniform_l1, config.penalty_floor, config.off_positive_penalty)
    loss = AugmentationLoss(l1, config.lam, config.flops, config.distill_weight)
    train, dev, dev_how = dataset.train_dev(config.dev_size, config.seed)
    if config.pseudo_queries:
        train = with_pseudo_queries(train, dataset.corpus, config.pseudo_queries, config.seed)
    cache = out / f"hard_negatives.{dataset.name}.json"
    examples = build_examples(train, hard_negatives(config, searcher, dataset, train, cache), bm25, number)
    if not examples:
        raise UserError(f"{dataset.name}: no training query has a positive document in the corpus; "
                        f"fix: check the train qrels / positive_ctxs")
    qrels_rows = {e.qid: set(e.positives) for e in examples}
    hold_out_sentences(examples, qrels_rows, model.target, bm25)
    if model.config.reads_feedback:
        feedback = FeedbackTerms(searcher, model.config.feedback_terms, model.tokenizer)
        for e, text in zip(examples, feedback.texts([e.query for e in examples], desc=f"feedback ({dataset.name})")):
            e.feedback = text
    return TrainingCorpus(dataset, searcher, bm25, cmap, loss, examples, qrels_rows, dev, dev_how)


def run_name(datasets: list[Dataset]) -> str:
    """The name of a run over ``datasets`` (its default folder, its record): their names joined by '+'."""
    return "+".join(d.name for d in datasets)


def write_dev_split(corpora: list[TrainingCorpus], path: Path) -> None:
    """``dev_split.json``: how each corpus's dev queries were chosen, and which they are."""
    if len(corpora) == 1:
        write_json(path, {"how": corpora[0].dev_how, "qids": sorted(corpora[0].dev.queries)})
    else:
        hows = [c.dev_how if "queries" in c.dev_how else f"{c.dev_how} ({len(c.dev.queries)} queries)" for c in corpora]
        write_json(path, {"how": "union of " + "; ".join(f"{c.name}: {how}" for c, how in zip(corpora, hows)),
                          "qids": {c.name: sorted(c.dev.queries) for c in corpora}})


def steps_per_epoch(corpora: list[TrainingCorpus], batch_size: int, cap: int = 0) -> int:
    """Batches of one corpus each: every corpus's examples cut into batches, summed (at most
    ``cap`` when set)."""
    steps = sum(math.ceil(len(c.examples) / batch_size) for c in corpora)
    return min(steps, cap) if cap else steps


def epoch_batches(corpora: list[TrainingCorpus], batch_size: int, temperature: float,
                  rng: random.Random, cap: int = 0) -> list[list[Example]]:
    """One epoch's batches (see ``_epoch_batches``), the first ``cap`` of them when set: each
    epoch then trains on another seeded draw from every corpus (``--epoch-steps``)."""
    batches = _epoch_batches(corpora, batch_size, temperature, rng)
    return batches[:cap] if cap else batches


def _epoch_batches(corpora: list[TrainingCorpus], batch_size: int, temperature: float,
                   rng: random.Random) -> list[list[Example]]:
    """One epoch's batches, each from a single corpus, in a seeded order.

    Each corpus's examples are shuffled and cut into batches. A lone corpus keeps that order and
    draws nothing more (so a one-corpus run is the run it always was). With several, temperature 1
    interleaves all batches at random (each example once); any other temperature draws each step's
    corpus with probability proportional to ``size ** (1 / T)``, cycling through that corpus's
    shuffled examples, as many steps as temperature 1 would take. Each pass over a corpus ends
    in its partial batch, so a small corpus cycled often trains on more short batches."""
    streams = [_shuffled_batches(c.examples, batch_size, rng) for c in corpora]
    if len(corpora) == 1:
        return streams[0]
    if temperature == 1.0:
        batches = [b for stream in streams for b in stream]
        rng.shuffle(batches)
        return batches
    # size ** (1/T) in log space, relative to the largest: no overflow at a low temperature.
    logs = [math.log(len(c.examples)) / temperature for c in corpora]
    weights = [math.exp(x - max(logs)) for x in logs]
    drawn = rng.choices(range(len(corpora)), weights=weights, k=steps_per_epoch(corpora, batch_size))
    position = [0] * len(corpora)
    batches = []
    for c in drawn:
        if position[c] == len(streams[c]):  # this corpus is used up: a new shuffled pass over it
            streams[c], position[c] = _shuffled_batches(corpora[c].examples, batch_size, rng), 0
        batches.append(streams[c][position[c]])
        position[c] += 1
    return batches


def _shuffled_batches(examples: list[Example], batch_size: int, rng: random.Random) -> list[list[Example]]:
    order = list(range(len(examples)))
    rng.shuffle(order)
    return [[examples[j] for j in order[i:i + batch_size]] for i in range(0, len(order), batch_size)]
