"""The models a training run holds: the one it trains (new, ``--init-from``'s, or last/'s on
``--resume``), its ``--teacher``, and how either turns a batch of queries into boosts over an
index's term columns, whichever query side it has (``bm25aug.model.loading``)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import torch

from bm25aug.errors import UserError
from bm25aug.model.loading import is_static, load_model
from bm25aug.train.arguments import TrainConfig
from bm25aug.train.run_folder import damaged_last

log = logging.getLogger(__name__)


def new_model(c: TrainConfig, run_name: str):
    """A model on the pretrained encoder, a static table over its tokenizer, or ``--init-from``'s
    trained model; a layer count the encoder lacks stops here, before the output folder is written."""
    if c.init_from:  # its model settings (TrainConfig refuses any set here) come with it
        return heads_on(trained(c.init_from, "--init-from", c, run_name), c.init_from).train()
    if c.query_side == "static":
        from bm25aug.model.static import StaticQueryModel

        return StaticQueryModel.from_tokenizer(c.encoder, use_weights=c.use_weights, use_augmentation=c.use_augmentation,
                                               target=c.target, weight_floor=c.weight_floor,
                                               aug_threshold=c.aug_threshold, added_budget=c.added_budget).train()
    from bm25aug.model.augmenter import QueryAugmenter

    return QueryAugmenter.from_encoder(
        c.encoder, c.encoder_layers, use_weights=c.use_weights, use_augmentation=c.use_augmentation,
        max_query_length=c.max_query_length, target=c.target, weight_floor=c.weight_floor,
        aug_threshold=c.aug_threshold, aug_layer=c.aug_layer, aug_init=c.aug_init,
        feedback_terms=c.feedback_terms, **({"pooling": c.pooling} if c.pooling else {}))


def heads_on(model, source: str):
    """A model to train on from ``--init-from``: one that its run's significance check served as
    plain BM25 (both heads off, its learned weights kept) gets back the heads its run trained
    (``config.json`` beside it; else both), since with neither there is nothing to train."""
    if model.config.use_weights or model.config.use_augmentation:
        return model
    run_config = Path(model.path).parent / "config.json" if model.path else None
    try:
        saved = json.loads(run_config.read_text()) if run_config and run_config.is_file() else {}
    except (OSError, ValueError):
        saved = {}
    saved = saved if isinstance(saved, dict) else {}
    use_weights, use_augmentation = bool(saved.get("use_weights", True)), bool(saved.get("use_augmentation", True))
    if not (use_weights or use_augmentation):
        raise UserError(f"--init-from {source} has neither learned weights nor augmentation (both were ablated), so "
                        f"there is nothing to train; fix: start from the pretrained encoder (drop --init-from)")
    log.info("--init-from %s is served as plain BM25 (its run's significance check); training starts from its "
             "learned weights with %s on", source,
             " and ".join(n for n, on in (("w(q)", use_weights), ("a(q)", use_augmentation)) if on))
    model.config = replace(model.config, use_weights=use_weights, use_augmentation=use_augmentation)
    return model


def last_model(out: Path):
    """The model of last/, to resume from."""
    try:
        return load_model(out / "last").train()
    except UserError as e:
        raise damaged_last(out, str(e).split("; fix:")[0]) from None


def trained(path: str, option: str, c: TrainConfig, run_name: str):
    """A trained model named by ``option``, checked to serve this run's target."""
    from bm25aug.eval.checkpoints import resolve_checkpoint

    model = load_model(resolve_checkpoint(path, run_name, False))
    if model.config.target != c.target:
        raise UserError(f"{option} {path} serves {model.config.target} indexes, this model {c.target} "
                        f"ones; fix: pass a model trained with --target {c.target}")
    return model


def batch_boosts(model, qb, corpus, device) -> tuple[torch.Tensor, torch.Tensor]:
    """A query batch's boosts over ``corpus``'s index columns (B x T) and the a(q) its L1 penalty
    reads (contextual: over the vocabulary; static: over the columns)."""
    if is_static(model):
        return model.column_boosts(qb.terms, corpus.cmap)
    ids, attention = (to_device(torch.from_numpy(x), device) for x in (qb.input_ids, qb.attention_mask))
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):  # BM25 stays float32
        out = model(ids, attention)
    w, a = out.token_weights.float(), out.augmentation.float()
    return model.target.boosts(qb, w, a, corpus.cmap), a


def fit_static_table(model, corpora, teacher, size: int) -> None:
    """A new static model's table from the training queries (``StaticQueryModel.fit_table``): the
    expansion candidates beside each query term are the terms ``teacher`` adds for those queries,
    else the terms of their judged documents, weighted by idf."""
    queries = [e.query for c in corpora for e in c.examples]
    occurrences = [model.occurrences(q) for q in queries]
    if teacher is not None:
        from bm25aug.model.encoder import encode_queries

        lists = encode_queries(teacher, queries, progress=False)
        added = [{t: w for t, w in terms.items() if t not in set(occ)} for terms, occ in zip(lists, occurrences)]
    else:
        added = []
        for c in corpora:
            idf = c.bm25.idf.numpy()
            for e in c.examples:
                found: dict[str, float] = {}
                for row in e.positives:
                    cols, _ = c.bm25.row(row)
                    found.update((c.bm25.terms[col], float(idf[col])) for col in cols.tolist())
                added.append(found)
    model.fit_table(occurrences, added, size)


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A batch tensor on ``device``: through pinned memory, asynchronously, for CUDA."""
    return tensor.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else tensor

