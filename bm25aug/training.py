"""End-to-end training: contrastive loss through torch BM25 plus a df-weighted L1 on a(q).

Kept apart (as in sentence-transformers): ``TrainConfig`` (what to do), ``AugmentationLoss``
(what to minimize), ``Trainer`` (how: batches, AdamW, dev selection, checkpoints, logs).

Output directory:
``config.json`` · ``dev_split.json`` · ``hard_negatives.json`` · ``log.jsonl`` · ``curves.png`` ·
``last/`` (model + ``trainer_state.pt``, every epoch, for ``--resume``) · ``best/`` (best dev) ·
``selection.json`` (whether ``best/`` beat plain BM25 on dev, see ``TrainConfig.significance``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import pickle
import random
from collections import Counter
from io import BytesIO
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn
from bm25aug.progress import progress

from bm25aug.data import Dataset, Split
from bm25aug.errors import UserError
from bm25aug.evaluation import has_answer, per_query
from bm25aug.export import encode_queries
from bm25aug.interrupts import deferred, stop_point
from bm25aug.io import (atomic_dir, atomic_write_bytes, check_outputs, claim_folder, derived_ok, record_derived,
                        refuse_foreign, source_key, write_json, write_jsonl)
from bm25aug.limits import check_all, check_choice
from bm25aug.model import CONFIG_NAME, AugmenterConfig, QueryAugmenter
from bm25aug.model_card import card_text, finished_now, write_card
from bm25aug.pseudo import PREFIX as PSEUDO_PREFIX, with_pseudo_queries
from bm25aug.index import IndexMeta
from bm25aug.search import BM25Searcher, mean_added_terms, parallel_map
from bm25aug.tokenization import vocab_hash
from bm25aug.torch_bm25 import BM25Params, TorchBM25

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    dataset: str = "scifact"
    output_dir: str = ""
    encoder: str | None = None  # None: distilbert-base-uncased if loadable, else offline MiniLM
    encoder_layers: int | None = None  # keep only the encoder's first N layers (a cheaper query encoder)
    epochs: int = 6
    batch_size: int = 32
    lr: float = 3e-5  # encoder
    head_lr: float = 1e-3  # the two heads (new parameters, 30,522 + 1 outputs)
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    lam: float = 0.1  # λ of the sparsity penalty
    uniform_l1: bool = False  # ablation: penalty 1 for every term instead of sqrt(df/N)
    penalty_floor: float = 0.0  # the L1 penalty of a term is at least this (rare terms are otherwise nearly free)
    # The L1 penalty of an a(q) entry whose term is in none of the query's judged-relevant documents
    # is at least this (0: the paper's penalty alone). Such a term can only raise other documents.
    off_positive_penalty: float = 0.0
    # Dev checks and best/ use an exponential moving average of the weights, with this decay per
    # step (0: the raw weights). With FLOPS 0.1 chosen on dev and transfer-dev sets, two seeds: the
    # same in-domain dev scores, more of the added weight on relevant-document terms (README, levers).
    ema_decay: float = 0.99
    # Weight of SPLADE's FLOPS regularizer on a(q): the squared mean of each entry over the batch.
    # A word proposed for every query (a generic one) costs far more than one proposed for one.
    flops: float = 0.1
    # best/ must beat plain BM25 on the dev queries, by a paired one-sided t-test at this level;
    # else it is plain BM25 itself (w ≡ 1, a ≡ 0), so that a model that learned nothing is never
    # served as if it had (0: off).
    significance: float = 0.05
    # After training, gate a(q) at this quantile of the training queries' non-zero counts (0: off);
    # 0.95 rather than 0.99 leaves dev scores as they were and cuts the terms guessed on other
    # sets' dev queries by 2-13x (benchmarks/gate.py, README "Targets").
    gate_quantile: float = 0.95
    use_weights: bool = True  # ablation: w ≡ 1
    use_augmentation: bool = True  # ablation: a ≡ 0 (reweighting only)
    bag_of_words: bool = False  # ablation: score with bow(d), no idf or tf saturation
    hard_negatives: int = 1  # per query per step
    # Documents drawn uniformly from the whole corpus per step, shared by the batch's queries as
    # extra negatives (0: none). Without them the ranking loss sees only the batch's positives and
    # hard negatives, so an added word found in none of those costs nothing but its small penalty.
    random_negatives: int = 0
    pseudo_queries: int = 0  # add N pseudo-queries cut from the corpus to the training queries (bm25aug.pseudo)
    negative_depth: int = 30  # mined from the top of BM25 on the target's index, judged positives excluded
    # Where hard negatives come from: "bm25" (mined from our own index, as the paper does) or "dpr"
    # (the training JSON's hard_negative_ctxs).
    negatives: str = "bm25"
    max_query_length: int = 64
    dev_size: int = 100  # size of the seeded train slice when the dataset has no dev split
    dev_depth: int = 100
    seed: int = 13
    k1: float = 0.9
    b: float = 0.4
    threads: int = 2
    device: str = "auto"  # "auto" (CUDA when torch sees a GPU), "cpu" or "cuda" (bf16 autocast)
    # The index the model serves: "flat" (Lucene's English analyzer, Pyserini's stock indexes; the
    # default, chosen on dev and transfer-dev sets: README "Targets") or "wp" (the paper's WordPiece index).
    target: str = "flat"
    pooling: str | None = None  # a(q) from "cls", "mean" or "max" (SPLADE-style); None: the encoder's own
    # Query-term weights w are at least this: 1 keeps each query term's BM25 weight as a floor, so the
    # model can raise a term but never drop it (the paper: 0). Chosen on transfer-dev sets.
    weight_floor: float = 1.0
    aug_threshold: float = 0.0  # a(q) entries at or below this are zeroed in training and search (learned pruning)
    aug_layer: int = -1  # the encoder layer a(q) reads (0: the embeddings; -1: the last, as the paper)
    aug_init: str = "embeddings"  # the a(q) head's start: "embeddings" (tied), "centered" (tied, bias centered) or "random"
    # A trained model (a train.py output dir or its best/) for the same target and vocabulary whose
    # BM25 scores over each batch's documents this one also learns to match, as served (its gate
    # and floor), by the KL divergence of the two softmaxes, weighted by distill_weight: a cheap
    # encoder (--encoder-layers) taught by the default one.
    teacher: str | None = None
    distill_weight: float = 1.0

    def __post_init__(self) -> None:
        """Every setting checked when the config is made, before anything is read or written."""
        check_all(self)
        check_choice("--negatives", self.negatives, NEGATIVES)
        check_choice("--aug-init", self.aug_init, AUG_INITS)

    @classmethod
    def for_dataset(cls, dataset: str, **overrides) -> "TrainConfig":
        """The preset of ``dataset`` (the paper's for nq/entityquestions/msmarco), then overrides."""
        values = {**PRESETS.get(dataset, _SMALL_BEIR), **{k: v for k, v in overrides.items() if v is not None}}
        return cls(dataset=dataset, **values)


# Values of settings added after the first release, for runs saved before they existed.
_PREDATES = {"target": "wp", "weight_floor": 0.0, "pooling": None, "penalty_floor": 0.0, "negatives": "bm25",
             "aug_threshold": 0.0, "encoder_layers": None, "pseudo_queries": 0, "off_positive_penalty": 0.0,
             "ema_decay": 0.0, "flops": 0.0}
NEGATIVES = ("bm25", "dpr")
RUN_MARKER = "bm25aug_run.json"  # claims a training output folder (bm25aug.io.claim_folder)
AUG_INITS = ("embeddings", "centered", "random")
DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> torch.device:
    """``auto``: CUDA when torch sees a GPU, else CPU. ``cuda`` without one is an error."""
    if name not in DEVICES:
        raise UserError(f"unknown device {name!r}; fix: use one of {', '.join(DEVICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device cuda, but this torch ({torch.__version__}) sees no CUDA GPU; "
                        f"fix: install a CUDA build of torch on a GPU machine, or use --device cpu")
    return torch.device("cuda" if name == "cuda" or (name == "auto" and torch.cuda.is_available()) else "cpu")

# Any dataset without a preset: small sets (hundreds to a few thousand training queries), tuned on
# SciFact's train slice.
_SMALL_BEIR = dict(lr=3e-5, head_lr=1e-3, batch_size=32, lam=0.1, epochs=6, hard_negatives=1)
PRESETS: dict[str, dict] = {
    # Paper, section 3 (DistilBERT, AdamW, batch 144).
    "nq": dict(lr=3e-4, head_lr=3e-4, batch_size=144, lam=0.1, epochs=45, hard_negatives=1),
    "entityquestions": dict(lr=3e-4, head_lr=3e-4, batch_size=144, lam=0.1, epochs=10, hard_negatives=1),
    "msmarco": dict(lr=3e-5, head_lr=3e-5, batch_size=144, lam=0.025, epochs=2, hard_negatives=4),
    # On SciFact 6 epochs are 138 steps; its dev slice climbs until about epoch 11 and holds to 20, on
    # two seeds, with transfer unchanged (benchmarks/levers.py, the "20 epochs" levers). 1024 random
    # negatives (a fifth of its corpus per step): the "random negatives" levers.
    "scifact": {**_SMALL_BEIR, "epochs": 20, "random_negatives": 1024},
    "squad": dict(lr=3e-5, head_lr=1e-3, batch_size=64, lam=0.1, epochs=3, hard_negatives=1, dev_size=500),
}


class AugmentationLoss(nn.Module):
    """``-log softmax(score(q, d+))`` over positive, hard, random and in-batch negatives, + ``λ·penaltyᵀa``.

    The penalty of a vocabulary entry is ``sqrt(df/N)`` of the index term it reaches (through the
    target's map for ``flat``), at least ``penalty_floor``: with the paper's sqrt(df/N) alone a term
    in one document of 5,000 costs 0.014, so rare terms the ranking loss never sees stay in a(q)."""

    def __init__(self, bm25: TorchBM25, cmap, lam: float, uniform_l1: bool, penalty_floor: float = 0.0,
                 off_positive: float = 0.0, flops: float = 0.0, distill: float = 1.0):
        super().__init__()
        h = cmap.vocab_df(bm25.df) / bm25.num_docs
        # Terms the index lacks can never match: they get the full penalty so a(q) drops them.
        penalty = torch.ones_like(h) if uniform_l1 else torch.where(h > 0, h.sqrt(), torch.ones_like(h))
        penalty = penalty.clamp(min=penalty_floor)
        self.register_buffer("penalty", penalty)
        self.lam, self.off_positive, self.flops, self.distill = lam, off_positive, flops, distill

    def forward(self, augmentation: torch.Tensor, scores: torch.Tensor, targets: torch.Tensor,
                mask: torch.Tensor, relevant: torch.Tensor | None = None,
                teacher_scores: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """``scores``: BM25 of the batch's queries (rows) against its documents (columns).
        ``relevant`` (queries x vocabulary, bool): entries whose term is in one of the query's
        judged-relevant documents; the others cost at least ``off_positive``. ``teacher_scores``
        (same shape): a teacher's, whose softmax over the same documents the scores learn to match."""
        rank = nn.functional.cross_entropy(scores.masked_fill(mask, float("-inf")), targets)
        penalty = self.penalty
        if self.off_positive and relevant is not None:
            penalty = torch.where(relevant, penalty, penalty.clamp(min=self.off_positive))
        reg = (augmentation * penalty).sum(dim=1).mean()
        parts = {"loss": rank + self.lam * reg, "rank": rank.detach(), "reg": reg.detach()}
        if self.flops:
            flops = augmentation.mean(dim=0).square().sum()
            parts.update(loss=parts["loss"] + self.flops * flops, flops=flops.detach())
        if teacher_scores is not None:
            # Masked documents (another query's positives) leave both softmaxes; a large negative
            # rather than -inf, so that 0 * log 0 stays 0 in the divergence.
            student, teacher = (x.masked_fill(mask, -1e4).log_softmax(dim=1) for x in (scores, teacher_scores))
            distill = nn.functional.kl_div(student, teacher, log_target=True, reduction="batchmean")
            parts.update(loss=parts["loss"] + self.distill * distill, distill=distill.detach())
        return parts


@dataclass
class Example:
    qid: str
    query: str
    positives: list[int]
    negatives: list[int]


def mine_hard_negatives(searcher: BM25Searcher, split: Split, dataset: Dataset, depth: int,
                        threads: int) -> dict[str, list[str]]:
    """Top-``depth`` BM25 documents (on the target's index) that are not judged positive (nor contain an answer)."""
    qids = [q for q in split.queries if split.qrels.get(q)]
    runs = parallel_map(lambda q: searcher.search(q, depth + 20), [split.queries[q] for q in qids], qids, threads,
                        desc="mine hard negatives")
    negatives = {}
    for qid in qids:
        answers = split.answers.get(qid)
        negatives[qid] = [h.docid for h in runs[qid] if h.docid not in split.qrels[qid]
                          and not (answers and has_answer(answers, dataset.corpus[h.docid].text))][:depth]
    return negatives


def build_examples(split: Split, negatives: dict[str, list[str]], bm25: TorchBM25) -> list[Example]:
    """Training queries with the rows of their positives (judged > 0 and in the index) and negatives."""
    def rows(docids: list[str]) -> list[int]:
        return [int(r) for r in bm25.index.doc_numbers(docids) if r >= 0]

    examples, unknown, named = [], 0, 0
    for qid, rels in split.qrels.items():
        pos = rows([d for d, g in rels.items() if g > 0])
        if pos and qid in split.queries:
            ids = negatives.get(qid, [])
            examples.append(Example(qid, split.queries[qid], pos, rows(ids)))
            named, unknown = named + len(ids), unknown + len(ids) - len(examples[-1].negatives)
    if unknown:
        log.warning("%d of the %d hard negatives named for the training queries are not in the index (e.g. DPR "
                    "ids of another passage collection); they are left out", unknown, named)
    return examples


class Trainer:
    def __init__(self, config: TrainConfig, dataset: Dataset, index: Path, resume: bool = False):
        """``index``: the dataset's index of ``config.target``'s flavor."""
        if not config.output_dir:
            raise UserError("no output directory; fix: pass --output-dir DIR")
        self.config, self.dataset, self.out = config, dataset, Path(config.output_dir)
        encoder = config.encoder if config.encoder and Path(config.encoder).exists() else None
        check_outputs({"--output-dir": self.out}, {"the dataset": dataset.path, "the index": index,
                                                   "the teacher": config.teacher, "--encoder": encoder},
                      folders=("--output-dir",))
        refuse_foreign(self.out, RUN_MARKER, "--output-dir", _earlier_run)  # before a minute of loading
        _refuse_finished(self.out, resume)
        self.teacher = self._teacher()
        self.resume = resume
        _seed_everything(config.seed)
        self.device = resolve_device(config.device)
        last = self.out / "last"
        fresh = not (resume and (last / "trainer_state.pt").exists())
        if not fresh:
            self.model = QueryAugmenter.from_pretrained(last).train()
        else:  # a layer count the encoder lacks stops here, before the output dir is written
            self.model = QueryAugmenter.from_encoder(
                config.encoder, config.encoder_layers, use_weights=config.use_weights,
                use_augmentation=config.use_augmentation, max_query_length=config.max_query_length,
                target=config.target, weight_floor=config.weight_floor, aug_threshold=config.aug_threshold,
                aug_layer=config.aug_layer, aug_init=config.aug_init,
                **({"pooling": config.pooling} if config.pooling else {}))
        self._lock = claim_folder(self.out, RUN_MARKER, "a training run", "--output-dir", _earlier_run)
        try:
            _refuse_finished(self.out, resume)  # again: another run may have finished here while this one loaded
            self._check_output_dir(resume, index)
            self._prepare(index, dataset, fresh)
        except BaseException:
            self._lock.release()
            raise

    def _prepare(self, index: Path, dataset: Dataset, fresh: bool) -> None:
        """Index, loss, examples and optimizer, once the output folder is claimed."""
        config = self.config
        self.searcher = BM25Searcher(index, config.k1, config.b, tokenizer=self.model.tokenizer, flavor=config.target)
        self.model.config.vocab_hash = self.searcher.meta.vocab_hash or self.model.config.vocab_hash
        self.bm25 = TorchBM25(self.searcher.index, self.model.tokenizer.get_vocab() if config.target == "wp" else None,
                              BM25Params(config.k1, config.b, bag_of_words=config.bag_of_words))
        self.target = self.model.target
        self.cmap = self.target.columns(self.bm25)
        self.loss = AugmentationLoss(self.bm25, self.cmap, config.lam, config.uniform_l1, config.penalty_floor,
                                     config.off_positive_penalty, config.flops, config.distill_weight)
        if self.teacher is not None and vocab_hash(self.teacher.tokenizer) != vocab_hash(self.model.tokenizer):
            raise UserError(f"--teacher {self.config.teacher} has another vocabulary than this model's encoder; "
                            f"fix: pass a teacher trained on an encoder with the same vocabulary")
        self.model.to(self.device)
        self.loss.to(self.device)
        if self.teacher is not None:
            self.teacher.to(self.device)
        train, self.dev, dev_how = dataset.train_dev(config.dev_size, config.seed)
        if config.pseudo_queries:
            train = with_pseudo_queries(train, dataset.corpus, config.pseudo_queries, config.seed)
        write_json(self.out / "dev_split.json", {"how": dev_how, "qids": sorted(self.dev.queries)})
        negatives = self._negatives(train)
        self.examples = build_examples(train, negatives, self.bm25)
        if not self.examples:
            raise UserError(f"{dataset.name}: no training query has a positive document in the corpus; "
                            f"fix: check the train qrels / positive_ctxs")
        self.qrels_rows = {e.qid: set(e.positives) for e in self.examples}
        if fresh and config.aug_init == "centered":
            self.model.center_aug_head([e.query for e in self.examples])
        self._hold_out_sentences()
        # The document rows training reads up front; random negatives (and a random one for a query
        # without hard negatives) are read when first drawn.
        self.bm25.prefetch([r for e in self.examples for r in (*e.positives, *e.negatives)], desc="read document terms")
        self.steps_per_epoch = math.ceil(len(self.examples) / config.batch_size)
        self.optimizer, self.scheduler = self._optimizer()
        self.average = WeightAverage(self.model, config.ema_decay) if config.ema_decay else None

    def _hold_out_sentences(self) -> None:
        """A pseudo-query's positive becomes its document without the query's sentence (the Inverse
        Cloze Task): with the sentence left in, the document holds every query word and ranks first
        already, so the ranking loss has nothing to teach (README, levers). The whole document
        stays out of the query's negatives: it contains its positive."""
        pseudo = [e for e in self.examples if e.qid.startswith(PSEUDO_PREFIX)]
        if not pseudo:
            return
        for e, terms in zip(pseudo, self.target.batch([e.query for e in pseudo]).terms):
            e.positives = [self.bm25.held_out_row(e.positives[0], Counter(terms))]
            self.qrels_rows[e.qid].update(e.positives)

    def _check_output_dir(self, resume: bool, index: Path) -> None:
        """On --resume, the saved run must be this one: the same settings, the same corpus (its
        fingerprint, in ``data.json``), and no more epochs trained than now asked for."""
        saved, data = self.out / "config.json", self.out / "data.json"
        corpus = IndexMeta.load(index, probe=False).corpus_fingerprint
        if resume and data.exists() and _read_json(data).get("corpus_fingerprint") != corpus:
            raise UserError(f"--resume on another corpus than the saved run's ({self.dataset.corpus_file} has changed "
                            f"or is another dataset's); fix: pass the run's dataset, or a new --output-dir")
        if resume and saved.exists():
            old = _read_json(saved)
            # A setting the saved run predates had the value of its day (the paper's wp target, no
            # weight floor); a moved run folder resumes where it now is; the gate and the
            # significance check act on best/ after training, so a resume may change them.
            changed = [f.name for f in fields(TrainConfig) if f.name not in ("epochs", "threads", "output_dir",
                                                                               "gate_quantile", "device",
                                                                               "significance")
                       and old.get(f.name, _PREDATES.get(f.name, f.default)) != getattr(self.config, f.name)]
            if changed:
                raise UserError(f"--resume with settings that differ from the saved run ({', '.join(changed)}); "
                                f"fix: rerun with the same settings or a new --output-dir")
        trained = max((h.get("epoch", 0) for h in _read_jsonl(self.out / "log.jsonl")), default=0) if resume else 0
        if trained > self.config.epochs:
            raise UserError(f"--resume with --epochs {self.config.epochs}, but the saved run has trained {trained}; "
                            f"fix: pass --epochs {trained} or more")
        write_json(saved, asdict(self.config))
        write_json(data, {"dataset": self.dataset.name, "path": str(self.dataset.path), "corpus_fingerprint": corpus})

    def _negatives(self, train: Split) -> dict[str, list[str]]:
        """Hard negatives per training query, cached in the run folder for ``--resume`` and reused
        only when made from the same index, training queries and settings (a run killed before
        its first epoch left one that a rerun with other settings must not read)."""
        cache = self.out / "hard_negatives.json"
        c = self.config
        source = source_key("hard-negatives", self.searcher.meta.corpus_fingerprint, c.negatives, c.negative_depth,
                            c.target, c.k1, c.b, sorted(train.queries))
        if derived_ok(cache, source):
            return json.loads(cache.read_text())
        if c.negatives == "dpr":
            if not any(train.negatives.values()):
                raise UserError(f"{self.dataset.name}: --negatives dpr uses the training JSON's hard_negative_ctxs, "
                                f"and this one has none; fix: use --negatives bm25 (mined from the index)")
            negatives = {q: [d for d in ids if d not in train.qrels.get(q, {})][:c.negative_depth]
                         for q, ids in train.negatives.items()}
        else:
            negatives = mine_hard_negatives(self.searcher, train, self.dataset, c.negative_depth, c.threads)
        write_json(cache, negatives)
        record_derived(cache, source)
        return negatives

    def _optimizer(self):
        c = self.config
        heads = [*self.model.aug_head.parameters(), *self.model.weight_head.parameters()]
        encoder = list(self.model.encoder.parameters())
        opt = torch.optim.AdamW([{"params": encoder, "lr": c.lr}, {"params": heads, "lr": c.head_lr}],
                                weight_decay=c.weight_decay)
        total = self.steps_per_epoch * c.epochs
        warmup = int(total * c.warmup_ratio)

        def schedule(step: int) -> float:
            return (step + 1) / max(1, warmup) if step < warmup else max(0.0, (total - step) / max(1, total - warmup))

        return opt, torch.optim.lr_scheduler.LambdaLR(opt, schedule)

    # ------------------------------------------------------------------------------------ loop
    def train(self) -> dict:
        """Train, then select and gate best/. A Ctrl-C or SIGTERM ends the step in flight first
        (``bm25aug.interrupts``); last/ then holds the last finished epoch, for ``--resume``."""
        try:
            with deferred():
                return self._train()
        finally:
            self._lock.release()

    def _train(self) -> dict:
        c = self.config
        state = self._load_state() if self.resume else _fresh_state()
        log_path = self.out / "log.jsonl"
        # The log may be one epoch ahead of last/ (a kill between the two writes): keep only the
        # epochs that last/ committed, so the resumed log holds each epoch once.
        history = [h for h in _read_jsonl(log_path) if h["epoch"] <= state["epoch"]] if self.resume else []
        if not history:
            # Epoch 0 is the reference: plain BM25 (on the target's index) on the same dev queries.
            history = [{"epoch": 0, "step": 0, **self.evaluate_dev(baseline=True)}]
        write_jsonl(log_path, history)
        for epoch in range(state["epoch"], c.epochs):
            rng = random.Random(c.seed * 1000 + epoch)
            order = list(range(len(self.examples)))
            rng.shuffle(order)
            self.model.train()
            bar = progress(range(self.steps_per_epoch), desc=f"epoch {epoch + 1}/{c.epochs}", unit="step")
            sums: dict[str, float] = {}
            for i in bar:
                batch = [self.examples[j] for j in order[i * c.batch_size:(i + 1) * c.batch_size]]
                parts = self._step(batch, rng)
                state["step"] += 1
                for k, v in parts.items():
                    sums[k] = sums.get(k, 0.0) + float(v.detach())
                bar.set_postfix(loss=f"{float(parts['loss'].detach()):.3f}", reg=f"{float(parts['reg']):.2f}")
                stop_point()
            with self._served_weights():
                record = {"epoch": epoch + 1, "step": state["step"],
                          **{f"train_{k}": v / self.steps_per_epoch for k, v in sums.items()}, **self.evaluate_dev()}
                if record["dev_metric"] > state["best"]:
                    state["best"] = record["dev_metric"]
                    self.model.save_pretrained(self.out / "best")
            history.append(record)
            log.info("epoch %d: %s", epoch + 1, {k: round(v, 4) if isinstance(v, float) else v for k, v in record.items()})
            state["epoch"] = epoch + 1
            write_jsonl(log_path, history)
            self._save_state(state)
            plot_curves(history, self.out / "curves.png")
        selection = self._check_significance()
        self._calibrate_gate()
        self._write_card(history, selection)
        return {"best_dev_metric": state["best"], "history": history, "selection": selection}

    def _write_card(self, history: list[dict], selection: dict | None) -> None:
        """best/README.md: the model's card with this run's recipe, data and dev selection."""
        best = self.out / "best"
        if not (best / CONFIG_NAME).exists():
            return
        recipe = {k: v for k, v in asdict(self.config).items() if k not in ("output_dir", "threads", "device")}
        top = max(history[1:], key=lambda h: h["dev_metric"], default=history[0])
        how = json.loads((self.out / "dev_split.json").read_text())["how"]
        write_card(best, card_text(AugmenterConfig.load(best), self.model.encoder.config.num_hidden_layers, {
            "dataset": self.dataset.name, "examples": len(self.examples), "finished": finished_now(),
            "dev_how": how, "dev_queries": len(self.dev.queries), "metric": history[0]["dev_metric_name"],
            "best": top["dev_metric"], "bm25": history[0]["dev_metric"], "selection": selection,
            "recipe": json.dumps(recipe, indent=2)}))

    def _check_significance(self) -> dict | None:
        """Keep best/ only when it beats plain BM25 on the dev queries (a paired one-sided t-test
        over per-query scores at ``significance``); else best/ becomes plain BM25 (w ≡ 1, a ≡ 0).
        The outcome goes to ``selection.json``."""
        from scipy.stats import ttest_rel

        best = self.out / "best"
        saved = self.out / "selection.json"
        if not self.config.significance or not (best / CONFIG_NAME).exists():
            return None
        model = QueryAugmenter.from_pretrained(best)
        if not (model.config.use_weights or model.config.use_augmentation):
            return json.loads(saved.read_text()) if saved.exists() else None  # plain BM25 already
        name, base, _ = self._dev_scores(None)
        _, got, _ = self._dev_scores(model.to(self.device))
        qids = sorted(base)
        differs = any(got[q] != base[q] for q in qids)
        p = float(ttest_rel([got[q] for q in qids], [base[q] for q in qids], alternative="greater").pvalue) \
            if differs else 1.0
        selection = {"metric": name, "queries": len(qids), "model": float(np.mean([got[q] for q in qids])),
                     "bm25": float(np.mean([base[q] for q in qids])), "p_value": p,
                     "significance": self.config.significance, "kept": p < self.config.significance}
        write_json(saved, selection)
        if selection["kept"]:
            log.info("best/ beats plain BM25 on dev (%s, one-sided p = %.2g)", name, p)
            return selection
        log.warning("best/ does not beat plain BM25 on dev significantly (%s, one-sided p = %.2g >= %g): best/ is "
                    "now plain BM25 (w = 1, a = 0)", name, p, self.config.significance)
        model.config = replace(model.config, use_weights=False, use_augmentation=False)
        model.save_pretrained(best)
        return selection

    def _calibrate_gate(self) -> None:
        """Set the best model's ``aug_gate`` from the training queries (see ``calibrate_gate``)."""
        best = self.out / "best"
        if not self.config.gate_quantile or not (best / CONFIG_NAME).exists():
            return
        model = QueryAugmenter.from_pretrained(best)
        if not model.config.use_augmentation:
            return  # a ≡ 0: nothing to gate
        gate = calibrate_gate(model, [e.query for e in self.examples], self.config.gate_quantile)
        if model.config.aug_gate != gate:
            model.config.aug_gate = gate
            model.save_pretrained(best)
        log.info("augmentation gate: a(q) is used for queries with at most %d non-zero entries "
                 "(quantile %.2f of the training queries)", gate, self.config.gate_quantile)

    def _step(self, batch: list[Example], rng: random.Random) -> dict[str, torch.Tensor]:
        c = self.config
        queries = [e.query for e in batch]
        rows = [rng.choice(e.positives) for e in batch]
        # Documents drawn at random are drawn in external-id order, so that a seed draws the same
        # documents from every build of the index (Lucene numbers them in build order).
        by_id = self.bm25.index.by_id
        for e in batch:
            pool = e.negatives or [int(by_id[rng.randrange(self.bm25.num_docs)])]
            rows.extend(rng.sample(pool, min(c.hard_negatives, len(pool))))
        if c.random_negatives:
            drawn = rng.sample(range(self.bm25.num_docs), min(c.random_negatives, self.bm25.num_docs))
            rows.extend(by_id[drawn].tolist())
        # A document judged positive for a query is no negative for it, wherever it sits in the batch.
        mask = torch.tensor([[j != i and r in self.qrels_rows[e.qid] for j, r in enumerate(rows)]
                             for i, e in enumerate(batch)])
        qb = self.target.batch(queries)
        cuda = self.device.type == "cuda"
        ids, attention = self._inputs(qb)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):  # the encoder; BM25 stays in float32
            out = self.model(ids, attention)
        w, a = out.token_weights.float(), out.augmentation.float()
        parts = self._loss(qb, w, a, rows, mask.to(self.device), self._relevant(batch))
        self.optimizer.zero_grad(set_to_none=True)
        parts["loss"].backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        if self.average:
            self.average.update(self.model)
        return parts

    def _inputs(self, qb) -> tuple[torch.Tensor, torch.Tensor]:
        """A query batch's token ids and attention mask on the training device (the encoder's input)."""
        return tuple(_to(torch.from_numpy(x), self.device) for x in (qb.input_ids, qb.attention_mask))

    def _served_weights(self):
        """A context in which the model holds the weights that dev checks and best/ see."""
        return self.average.swapped_into(self.model) if self.average else contextlib.nullcontext()

    def _loss(self, qb, w: torch.Tensor, a: torch.Tensor, rows: list[int], mask: torch.Tensor,
              relevant: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The loss of one batch: query i's positive is document i (``benchmarks/hybrid_probe.py``
        overrides this to score two fields)."""
        scores = self.bm25.score(self.target.boosts(qb, w, a, self.cmap), rows)
        return self.loss(a, scores, torch.arange(len(qb.terms), device=self.device), mask, relevant,
                         self._teacher_scores(qb, rows))

    def _teacher(self) -> QueryAugmenter | None:
        """The ``--teacher`` model (on the CPU until the model moves), checked for its target."""
        from bm25aug.experiment import resolve_checkpoint

        if not self.config.teacher:
            return None
        teacher = QueryAugmenter.from_pretrained(resolve_checkpoint(self.config.teacher, self.dataset.name, False))
        if teacher.config.target != self.config.target:
            raise UserError(f"--teacher {self.config.teacher} serves {teacher.config.target} indexes, this model "
                            f"{self.config.target} ones; fix: pass a teacher trained with --target {self.config.target}")
        return teacher.eval()

    @torch.no_grad()
    def _teacher_scores(self, qb, rows: list[int]) -> torch.Tensor | None:
        """The teacher's BM25 scores of the batch (queries x documents), its term lists as served."""
        if self.teacher is None:
            return None
        out = self.teacher(*self._inputs(qb))
        boosts = self.teacher.target.boosts(qb, out.token_weights.float(), out.augmentation.float(), self.cmap)
        return self.bm25.score(boosts, rows)

    def _relevant(self, batch: list[Example]) -> torch.Tensor | None:
        """Queries x vocabulary: whether an a(q) entry reaches a term of one of the query's judged-
        relevant documents (for ``off_positive_penalty``; None when that is off)."""
        if not self.config.off_positive_penalty:
            return None
        rows = [sorted(self.qrels_rows[e.qid]) for e in batch]
        docs = self.bm25.doc_matrix([r for rs in rows for r in rs]).to_dense()
        owner = torch.repeat_interleave(torch.arange(len(rows)), torch.tensor([len(rs) for rs in rows]))
        found = torch.zeros(len(rows), docs.shape[1]).index_add_(0, owner, docs)
        return self.cmap.pull(found.to(self.device)) > 0

    @torch.no_grad()
    def evaluate_dev(self, baseline: bool = False) -> dict:
        """Dev quality of the exported term lists searched in Lucene, the way they will be used
        (``baseline``: the unaugmented BM25 query terms instead)."""
        self.model.eval()
        name, scores, added = self._dev_scores(None if baseline else self.model)
        self.model.train()
        return {"dev_metric": float(sum(scores.values()) / len(scores)) if scores else 0.0,
                "dev_metric_name": name, "dev_aug_terms": added}

    @torch.no_grad()
    def _dev_scores(self, model: QueryAugmenter | None) -> tuple[str, dict[str, float], float]:
        """The dev queries' metric per query (nDCG@10; QA: Acc@5, the paper's first QA metric, as
        Acc@20 saturates on small corpora) and the mean added terms, for ``model``'s term lists
        (an eval-mode model) or plain BM25's (None)."""
        qids = sorted(self.dev.queries)
        texts = [self.dev.queries[q] for q in qids]
        vectors = ([self.searcher.query_terms(t) for t in texts] if model is None
                   else [self.searcher.indexed(v) for v in encode_queries(model, texts, progress=False)])
        run = parallel_map(lambda v: self.searcher.search_terms(v, self.config.dev_depth), vectors, qids,
                           self.config.threads)
        name, scores = per_query(run, self.dev, self.dataset.corpus)
        return name, scores, mean_added_terms(self.searcher, texts, vectors)

    # ------------------------------------------------------------------------------ checkpoints
    def _save_state(self, state: dict) -> None:
        with atomic_dir(self.out / "last", CONFIG_NAME, what="a bm25aug checkpoint") as tmp:
            self.model.write_files(tmp)
            buf = BytesIO()  # serialized in memory, so a full disk is an OSError of the write, not torch's
            torch.save({"state": state, "optimizer": self.optimizer.state_dict(),
                        "scheduler": self.scheduler.state_dict(), "torch_rng": torch.get_rng_state(),
                        "average": self.average.state_dict() if self.average else None}, buf)
            (tmp / "trainer_state.pt").write_bytes(buf.getvalue())

    def _load_state(self) -> dict:
        path = self.out / "last" / "trainer_state.pt"
        if not path.exists():
            log.info("no checkpoint in %s; starting from scratch", self.out)
            self.resume = False
            return _fresh_state()
        try:
            saved = torch.load(path, weights_only=False, map_location=self.device)
        except (RuntimeError, OSError, EOFError, ValueError, pickle.UnpicklingError) as e:
            raise UserError(f"{path} is damaged ({type(e).__name__}); fix: rerun without --resume into a new "
                            f"--output-dir, or restore last/ from a copy") from None
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["torch_rng"])
        if self.average:
            self.average.load_state_dict(saved["average"])
        log.info("resuming %s after epoch %d", self.out, saved["state"]["epoch"])
        return saved["state"]


class WeightAverage:
    """An exponential moving average of a model's parameters, with the usual warm-up of the decay
    (``min(decay, (1 + t) / (10 + t))`` at update t), so that the first epochs do not hold on to
    the initial weights."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay, self.updates = decay, 0
        self.shadow = {name: p.detach().clone() for name, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.updates += 1
        keep = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for name, p in model.named_parameters():
            self.shadow[name].lerp_(p.detach(), 1 - keep)

    @contextlib.contextmanager
    def swapped_into(self, model: nn.Module):
        """The model holds the averaged weights inside the block, its own ones again after it."""
        params = dict(model.named_parameters())
        raw = {name: p.detach().clone() for name, p in params.items()}
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(self.shadow[name])
        try:
            yield
        finally:
            with torch.no_grad():
                for name, p in params.items():
                    p.copy_(raw[name])

    def state_dict(self) -> dict:
        return {"updates": self.updates, "shadow": self.shadow}

    def load_state_dict(self, state: dict) -> None:
        self.updates = state["updates"]
        for name, tensor in state["shadow"].items():
            self.shadow[name].copy_(tensor)


@torch.no_grad()
def calibrate_gate(model: QueryAugmenter, queries: list[str], quantile: float) -> int:
    """The ``quantile`` of the gate's count (``Target.gate_counts``) over ``queries``: the most
    terms the model proposes for queries like those it was trained on (at least 1)."""
    counts = []
    for lo in range(0, len(queries), 64):
        enc = model.tokenize(queries[lo:lo + 64])  # a(q) needs no term occurrences (no Lucene analysis)
        out = model(enc["input_ids"], enc["attention_mask"])
        counts.extend(model.target.gate_counts(model.target.live_part(out.augmentation).numpy()).tolist())
    return max(1, int(math.ceil(np.quantile(counts, quantile)))) if counts else 0


def _to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A batch tensor on ``device``: through pinned memory, asynchronously, for CUDA."""
    return tensor.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else tensor


def _refuse_finished(out: Path, resume: bool) -> None:
    """A run folder with a model in it (best/ or last/) is continued with --resume, never trained
    over; without last/ it cannot be continued, and training again would replace best/."""
    finished = [name for name in ("best", "last") if (out / name).exists()]
    if finished and not resume:
        raise UserError(f"{out} already holds a training run ({' and '.join(finished)}/); fix: pass --resume "
                        f"to continue it, or choose another --output-dir")
    if resume and finished and not (out / "last" / "trainer_state.pt").exists():
        raise UserError(f"{out} holds best/ but no last/ to resume from, and training again would replace "
                        f"best/; fix: choose another --output-dir, or remove {out / 'best'} to train this folder again")


def _earlier_run(folder: Path) -> bool:
    """A run folder written before folders were claimed with a marker: its settings, and a
    checkpoint bm25aug wrote (last/ with the trainer's state, or best/ with the model config)."""
    try:
        saved = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    ours = (folder / "last" / "trainer_state.pt").exists() or (folder / "best" / CONFIG_NAME).exists()
    return isinstance(saved, dict) and {"dataset", "lam"} <= saved.keys() and ours


def _fresh_state() -> dict:
    """Trainer progress before the first epoch (best = -1: any dev score beats it)."""
    return {"epoch": 0, "best": -1.0, "step": 0}


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _read_json(path: Path) -> dict:
    """A run folder's JSON record; a damaged one is one error line."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise UserError(f"{path} is damaged ({type(e).__name__}); fix: restore it, or train into a new "
                        f"--output-dir") from None
    if not isinstance(saved, dict):
        raise UserError(f"{path} is damaged (not a JSON object); fix: restore it, or train into a new --output-dir")
    return saved


def _read_jsonl(path: Path) -> list[dict]:
    """A run folder's log, one JSON object a line; a damaged one is one error line."""
    if not path.exists():
        return []
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (ValueError, OSError) as e:
        raise UserError(f"{path} is damaged ({type(e).__name__}); fix: restore it, or train into a new "
                        f"--output-dir") from None
    if not all(isinstance(r, dict) for r in rows):
        raise UserError(f"{path} is damaged (a line is not a JSON object); fix: restore it, or train into a new "
                        f"--output-dir")
    return rows


def plot_curves(history: list[dict], path: Path) -> None:
    """Training loss and dev metric per epoch, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    trained = [h for h in history if "train_loss" in h]
    ax1.plot([h["epoch"] for h in trained], [h["train_rank"] for h in trained], "o-", label="contrastive")
    ax1.plot([h["epoch"] for h in trained], [h["train_loss"] for h in trained], "s--", label="total (with λ·L1)")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("training loss")
    ax1.legend()
    ax2.plot(epochs, [h["dev_metric"] for h in history], "o-", color="C2")
    ax2.set_xlabel("epoch (0: plain BM25)")
    ax2.set_ylabel(f"dev {history[0]['dev_metric_name']}")
    ax3 = ax2.twinx()
    ax3.plot(epochs, [h["dev_aug_terms"] for h in history], "x:", color="C3")
    ax3.set_ylabel("added terms / query", color="C3")
    fig.tight_layout()
    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
