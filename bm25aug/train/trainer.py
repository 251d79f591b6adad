"""End-to-end training: the loop through BM25 computed in torch, and nothing else.

Kept apart, as in sentence-transformers: ``TrainConfig`` (``arguments``: what to do), the losses
(``losses``: what to minimize), the examples (``examples``), the run folder's rules
(``run_folder``) and what happens around the loop (``callbacks``: the weight average, dev
selection, the significance check, the gate, the model card). ``Trainer`` sets these up from a
config and runs the epochs. Research code extends it through ``compute_loss`` and callbacks.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import random
from pathlib import Path

import numpy as np
import torch
from io import BytesIO

from bm25aug.data.registry import Dataset
from bm25aug.errors import UserError
from bm25aug.eval.metrics import per_query
from bm25aug.interrupts import deferred, stop_point
from bm25aug.io import atomic_dir, claim_folder, refuse_foreign, write_jsonl
from bm25aug.model.augmenter import CONFIG_NAME, QueryAugmenter
from bm25aug.model.loading import is_static
from bm25aug.model.encoder import encode_queries
from bm25aug.tokenization import vocab_hash
from bm25aug.outputs import check_outputs
from bm25aug.progress import progress
from bm25aug.search.bm25 import mean_added_terms
from bm25aug.search.feedback import reading_feedback
from bm25aug.train.arguments import DEVICES, TrainConfig
from bm25aug.train.callbacks import TrainerCallback, default_callbacks
from bm25aug.train.corpora import TrainingCorpus, epoch_batches, load_corpus, run_name, steps_per_epoch, write_dev_split
from bm25aug.train.examples import Example
from bm25aug.train.models import batch_boosts, fit_static_table, last_model, new_model, to_device, trained
from bm25aug.train.run_folder import (RUN_MARKER, damaged_last, earlier_run, read_jsonl, record_run,
                                      refuse_finished, restarts)

log = logging.getLogger(__name__)


class Trainer:
    """``Trainer(config, dataset, index).train()``; ``index`` is the dataset's index of
    ``config.target``'s flavor. Several corpora train one model: ``Trainer(config, [d1, d2],
    [index1, index2])`` (``bm25aug.train.corpora``). ``callbacks`` replaces
    ``default_callbacks(config, model)``."""

    def __init__(self, config: TrainConfig, dataset: Dataset | list[Dataset], index: Path | list[Path],
                 resume: bool = False, callbacks: list[TrainerCallback] | None = None):
        if not config.output_dir:
            raise UserError("no output directory; fix: pass --output-dir DIR")
        datasets = list(dataset) if isinstance(dataset, (list, tuple)) else [dataset]
        indexes = [Path(i) for i in index] if isinstance(index, (list, tuple)) else [Path(index)]
        if len(datasets) != len(indexes) or len({d.name for d in datasets}) != len(datasets):
            raise UserError(f"training corpora {[d.name for d in datasets]} need one index each and distinct "
                            f"names; fix: name each dataset once")
        self.config, self.out, self.resume = config, Path(config.output_dir), resume
        self.name = run_name(datasets)
        encoder = config.encoder if config.encoder and Path(config.encoder).exists() else None
        inputs = {**{f"the dataset {d.name}": d.path for d in datasets},
                  **{f"the index {i}": i for i in indexes}, "the teacher": config.teacher, "--encoder": encoder,
                  "--init-from": config.init_from}
        check_outputs({"--output-dir": self.out}, inputs, folders=("--output-dir",))
        refuse_foreign(self.out, RUN_MARKER, "--output-dir", earlier_run)  # before a minute of loading
        refuse_finished(self.out, resume)
        self.teacher = trained(config.teacher, "--teacher", config, self.name).eval() if config.teacher else None
        _seed_everything(config.seed)
        self.device = resolve_device(config.device)
        fresh = not (resume and (self.out / "last" / "trainer_state.pt").exists())
        if resume and restarts(self.out):
            log.info("%s holds no last/ (a stop while it was written, or removed): the run restarts from its first "
                     "epoch", self.out)
        self.model = new_model(config, self.name) if fresh else last_model(self.out)
        self._lock = claim_folder(self.out, RUN_MARKER, "a training run", "--output-dir", earlier_run)
        try:
            refuse_finished(self.out, resume)  # again: another run may have finished here while this one loaded
            record_run(config, datasets, indexes, resume)
            self._prepare(datasets, indexes, fresh)
            self.callbacks = default_callbacks(config, self.model) if callbacks is None else callbacks
        except BaseException:
            self._lock.release()
            raise

    def _prepare(self, datasets: list[Dataset], indexes: list[Path], fresh: bool) -> None:
        """Corpora (indexes, losses, examples) and optimizer, once the output folder is claimed."""
        config = self.config
        self.target = self.model.target
        if self.teacher is not None and vocab_hash(self.teacher.tokenizer) != vocab_hash(self.model.tokenizer):
            raise UserError(f"--teacher {config.teacher} has another vocabulary than this model's encoder; "
                            f"fix: pass a teacher trained on an encoder with the same vocabulary")
        reads = [m.config.feedback_terms if m.config.reads_feedback else 0 for m in (self.teacher, self.model)
                 if m is not None]
        if len(set(reads)) > 1:
            raise UserError(f"--teacher {config.teacher} reads {reads[0]} feedback terms and this model {reads[1]}; "
                            f"the two read one input, so fix: pass a teacher with the same --feedback-terms")
        self.corpora: list[TrainingCorpus] = [load_corpus(config, d, i, self.model, self.out, n)
                                              for n, (d, i) in enumerate(zip(datasets, indexes))]
        if fresh and not config.init_from and is_static(self.model):
            fit_static_table(self.model, self.corpora, self.teacher, config.expansion_terms)
        wp_hash = next((c.searcher.meta.vocab_hash for c in self.corpora if c.searcher.meta.vocab_hash), None)
        self.model.config.vocab_hash = wp_hash or self.model.config.vocab_hash
        for module in (self.model, self.teacher, *(c.loss for c in self.corpora)):
            if module is not None:
                module.to(self.device)
        write_dev_split(self.corpora, self.out / "dev_split.json")
        self.examples = [e for c in self.corpora for e in c.examples]  # every corpus's, for the head and the gate
        if fresh and config.aug_init == "centered":  # never with --init-from (TrainConfig refuses it)
            self.model.center_aug_head([e.query for e in self.examples])
        # The document rows training reads up front; random negatives (and a random one for a query
        # without hard negatives) are read when first drawn.
        for c in self.corpora:
            c.bm25.prefetch([r for e in c.examples for r in (*e.positives, *e.negatives)],
                            desc=f"read document terms ({c.name})")
        self.steps_per_epoch = steps_per_epoch(self.corpora, config.batch_size, config.epoch_steps)
        self.optimizer, self.scheduler = self._optimizer()

    def _optimizer(self):
        c = self.config
        if is_static(self.model):  # a table: one parameter per term or entry
            groups = [{"params": list(self.model.parameters()), "lr": c.table_lr}]
        else:
            heads = [*self.model.aug_head.parameters(), *self.model.weight_head.parameters()]
            groups = [{"params": list(self.model.encoder.parameters()), "lr": c.lr}, {"params": heads, "lr": c.head_lr}]
        opt = torch.optim.AdamW(groups, weight_decay=c.weight_decay)
        total = self.steps_per_epoch * c.epochs
        warmup = int(total * c.warmup_ratio)

        def schedule(step: int) -> float:
            return (step + 1) / max(1, warmup) if step < warmup else max(0.0, (total - step) / max(1, total - warmup))

        return opt, torch.optim.lr_scheduler.LambdaLR(opt, schedule)

    def callback(self, kind: type) -> TrainerCallback | None:
        """The first callback of type ``kind``, if any."""
        return next((cb for cb in self.callbacks if isinstance(cb, kind)), None)

    def release(self) -> None:
        """Give up the output folder without training (``train`` releases it when it ends): for a
        caller that only times steps (``research/profile_training.py``)."""
        self._lock.release()

    # ------------------------------------------------------------------------------------ loop
    def train(self) -> dict:
        """Train, then let the callbacks select, check and gate best/. A Ctrl-C or SIGTERM ends the
        step in flight first (``bm25aug.interrupts``); last/ then holds the last finished epoch."""
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
        history = [h for h in read_jsonl(log_path) if h["epoch"] <= state["epoch"]] if self.resume else []
        for cb in self.callbacks:
            cb.on_train_begin(self, history)
        write_jsonl(log_path, history)
        for epoch in range(state["epoch"], c.epochs):
            sums = self._epoch(epoch, state)
            record = {"epoch": epoch + 1, "step": state["step"],
                      **{f"train_{k}": v / self.steps_per_epoch for k, v in sums.items()}}
            with self.served_weights():
                for cb in self.callbacks:
                    cb.on_evaluate(self, record, state)
            history.append(record)
            log.info("epoch %d: %s", epoch + 1, {k: round(v, 4) if isinstance(v, float) else v for k, v in record.items()})
            state["epoch"] = epoch + 1
            write_jsonl(log_path, history)
            self._save_state(state)
            for cb in self.callbacks:
                cb.on_epoch_end(self, history)
        result = {"best_dev_metric": state["best"], "history": history, "selection": None}
        for cb in self.callbacks:
            cb.on_train_end(self, result)
        return result

    def _epoch(self, epoch: int, state: dict) -> dict[str, float]:
        """One pass over the examples in a seeded order; the sums of the loss parts."""
        c = self.config
        rng = random.Random(c.seed * 1000 + epoch)
        batches = epoch_batches(self.corpora, c.batch_size, c.corpus_temperature, rng, c.epoch_steps)
        self.model.train()
        bar = progress(batches, desc=f"epoch {epoch + 1}/{c.epochs}", unit="step")
        sums: dict[str, float] = {}
        for batch in bar:
            parts = self.training_step(batch, rng)
            state["step"] += 1
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + float(v.detach())
            bar.set_postfix(loss=f"{float(parts['loss'].detach()):.3f}", reg=f"{float(parts['reg']):.2f}")
            stop_point()
        return sums

    def batch_rows(self, corpus: TrainingCorpus, batch: list[Example], rng: random.Random) -> list[int]:
        """The batch's documents, all from its corpus: each query's positive, its hard negatives,
        then random ones."""
        c, bm25 = self.config, corpus.bm25
        rows = [rng.choice(e.positives) for e in batch]
        # Documents drawn at random are drawn in external-id order, so that a seed draws the same
        # documents from every build of the index (Lucene numbers them in build order).
        by_id = bm25.index.by_id
        for e in batch:
            pool = e.negatives or [int(by_id[rng.randrange(bm25.num_docs)])]
            rows.extend(rng.sample(pool, min(c.hard_negatives, len(pool))))
        if c.random_negatives:
            drawn = rng.sample(range(bm25.num_docs), min(c.random_negatives, bm25.num_docs))
            rows.extend(by_id[drawn].tolist())
        return rows

    def training_step(self, batch: list[Example], rng: random.Random) -> dict[str, torch.Tensor]:
        """Forward, loss, backward, AdamW step; then the callbacks' ``on_step_end``. The batch's
        examples come from one corpus."""
        corpus = self.corpora[batch[0].corpus]
        rows = self.batch_rows(corpus, batch, rng)
        # A document judged positive for a query is no negative for it, wherever it sits in the batch.
        mask = torch.tensor([[j != i and r in corpus.qrels_rows[e.qid] for j, r in enumerate(rows)]
                             for i, e in enumerate(batch)])
        qb = self.target.batch([e.query for e in batch], [e.feedback for e in batch])
        mask, relevant = mask.to(self.device), self._relevant(corpus, batch)
        if is_static(self.model):
            boosts, a = self.model.column_boosts(qb.terms, corpus.cmap)
            parts = self.score_loss(corpus, qb, boosts, a, rows, mask, relevant)
        else:
            ids, attention = self.inputs(qb)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device.type == "cuda"):  # BM25 stays float32
                out = self.model(ids, attention)
            w, a = out.token_weights.float(), out.augmentation.float()
            parts = self.compute_loss(corpus, qb, w, a, rows, mask, relevant)
        self.optimizer.zero_grad(set_to_none=True)
        parts["loss"].backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        for cb in self.callbacks:
            cb.on_step_end(self)
        return parts

    def inputs(self, qb) -> tuple[torch.Tensor, torch.Tensor]:
        """A query batch's token ids and attention mask on the training device (the encoder's input)."""
        return tuple(to_device(torch.from_numpy(x), self.device) for x in (qb.input_ids, qb.attention_mask))

    def served_weights(self) -> contextlib.ExitStack:
        """A context in which the model holds the weights that dev checks and best/ see."""
        stack = contextlib.ExitStack()
        for cb in self.callbacks:
            stack.enter_context(cb.served_weights(self.model))
        return stack

    def compute_loss(self, corpus: TrainingCorpus, qb, w: torch.Tensor, a: torch.Tensor, rows: list[int],
                     mask: torch.Tensor, relevant: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The loss of one batch of ``corpus`` (query i's positive is document i) from the
        contextual model's w and a: the public hook for research code (``research/hybrid_probe.py``
        scores two fields)."""
        return self.score_loss(corpus, qb, self.target.boosts(qb, w, a, corpus.cmap), a, rows, mask, relevant)

    def score_loss(self, corpus: TrainingCorpus, qb, boosts: torch.Tensor, a: torch.Tensor, rows: list[int],
                   mask: torch.Tensor, relevant: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The loss of a batch's boosts over the index's columns (either query side)."""
        scores = corpus.bm25.score(boosts, rows)
        return corpus.loss(a, scores, torch.arange(len(qb.terms), device=self.device), mask, relevant,
                           self.teacher_scores(corpus, qb, rows))

    @torch.no_grad()
    def teacher_scores(self, corpus: TrainingCorpus, qb, rows: list[int]) -> torch.Tensor | None:
        """The teacher's BM25 scores of the batch (queries x documents), its term lists as served;
        None without ``--teacher``. The public hook for another teacher (``research/dense_teacher.py``)."""
        if self.teacher is None:
            return None
        return corpus.bm25.score(batch_boosts(self.teacher, qb, corpus, self.device)[0], rows)

    def _relevant(self, corpus: TrainingCorpus, batch: list[Example]) -> torch.Tensor | None:
        """Queries x vocabulary: whether an a(q) entry reaches a term of one of the query's judged-
        relevant documents (for ``off_positive_penalty``; None when that is off)."""
        if not self.config.off_positive_penalty:
            return None
        rows = [sorted(corpus.qrels_rows[e.qid]) for e in batch]
        docs = corpus.bm25.doc_matrix([r for rs in rows for r in rs]).to_dense()
        owner = torch.repeat_interleave(torch.arange(len(rows)), torch.tensor([len(rs) for rs in rows]))
        found = torch.zeros(len(rows), docs.shape[1]).index_add_(0, owner, docs)
        found = found.to(self.device)
        return (found if is_static(self.model) else corpus.cmap.pull(found)) > 0  # static: a(q) is over columns

    # ------------------------------------------------------------------------------------- dev
    @torch.no_grad()
    def evaluate_dev(self, baseline: bool = False) -> dict:
        """Dev quality of the exported term lists searched in Lucene, the way they will be used
        (``baseline``: the unaugmented BM25 query terms instead)."""
        self.model.eval()
        name, scores, added = self.dev_scores(None if baseline else self.model)
        self.model.train()
        return {"dev_metric": float(sum(scores.values()) / len(scores)) if scores else 0.0,
                "dev_metric_name": name, "dev_aug_terms": added}

    @torch.no_grad()
    def dev_scores(self, model: QueryAugmenter | None) -> tuple[str, dict[tuple[str, str], float], float]:
        """The dev queries' metric per (corpus, query) over the union of the corpora's dev sets
        (nDCG@10; QA: Acc@5, the paper's first QA metric, as Acc@20 saturates on small corpora;
        names joined by '+' when the corpora differ) and the mean added terms, for ``model``'s
        term lists (an eval-mode model) or plain BM25's (None)."""
        names, scores, added, counted = [], {}, 0.0, 0
        for c in self.corpora:
            qids = sorted(c.dev.queries)
            texts = [c.dev.queries[q] for q in qids]
            vectors = ([c.searcher.query_terms(t) for t in texts] if model is None else
                       [c.searcher.indexed(v) for v in encode_queries(reading_feedback(model, c.searcher), texts,
                                                                      progress=False)])
            tops = c.searcher.batch_search_terms_arrays(vectors, self.config.dev_depth, self.config.threads)
            run = {qid: self.dev_hits(c, qid, top) for qid, top in zip(qids, tops)}
            name, got = per_query(run, c.dev, c.dataset.corpus)
            names.append(name)
            scores.update({(c.name, q): v for q, v in got.items()})
            added += mean_added_terms(c.searcher, texts, vectors) * len(texts)
            counted += len(texts)
        return "+".join(dict.fromkeys(names)), scores, added / max(counted, 1)

    def dev_hits(self, corpus: TrainingCorpus, qid: str, top) -> list:
        """A dev query's hits as its metric reads them (a hook: adapt leaves a pseudo-query's own
        document out)."""
        return corpus.searcher.hits(top)

    # ------------------------------------------------------------------------------ checkpoints
    def _save_state(self, state: dict) -> None:
        with atomic_dir(self.out / "last", CONFIG_NAME, what="a bm25aug checkpoint") as tmp:
            self.model.write_files(tmp)
            buf = BytesIO()  # serialized in memory, so a full disk is an OSError of the write, not torch's
            torch.save({"state": state, "optimizer": self.optimizer.state_dict(),
                        "scheduler": self.scheduler.state_dict(), "torch_rng": torch.get_rng_state(),
                        "callbacks": {type(cb).__name__: cb.state_dict() for cb in self.callbacks}}, buf)
            (tmp / "trainer_state.pt").write_bytes(buf.getvalue())

    def _load_state(self) -> dict:
        path = self.out / "last" / "trainer_state.pt"
        if not path.exists():
            log.info("no checkpoint in %s; starting from scratch", self.out)
            self.resume = False
            state = _fresh_state()
            if (self.out / "best").exists():  # a restart: best/ stays until an epoch beats its dev score
                state["best"] = max((h["dev_metric"] for h in read_jsonl(self.out / "log.jsonl") if h.get("epoch")),
                                    default=-1.0)
            return state
        try:
            saved = torch.load(path, weights_only=False, map_location=self.device)
        except (RuntimeError, OSError, EOFError, ValueError, pickle.UnpicklingError) as e:
            raise damaged_last(self.out, f"{path.name} is damaged ({type(e).__name__})") from None
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["torch_rng"])
        states = saved.get("callbacks") or {"WeightAverage": saved.get("average")}  # an earlier release kept the average alone
        for cb in self.callbacks:
            if states.get(type(cb).__name__) is not None:
                cb.load_state_dict(states[type(cb).__name__])
        log.info("resuming %s after epoch %d", self.out, saved["state"]["epoch"])
        return saved["state"]


def _fresh_state() -> dict:
    """Trainer progress before the first epoch (best = -1: any dev score beats it)."""
    return {"epoch": 0, "best": -1.0, "step": 0}


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(name: str) -> torch.device:
    """``auto``: CUDA when torch sees a GPU, else CPU. ``cuda`` without one is an error."""
    if name not in DEVICES:
        raise UserError(f"unknown device {name!r}; fix: use one of {', '.join(DEVICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device cuda, but this torch ({torch.__version__}) sees no CUDA GPU; "
                        f"fix: install a CUDA build of torch on a GPU machine, or use --device cpu")
    return torch.device("cuda" if name == "cuda" or (name == "auto" and torch.cuda.is_available()) else "cpu")
