"""Training arguments: one dataclass, the only place a training default is written.

The command line is generated from it (``add_arguments``/``from_args``), so each flag's help shows
the real default and the recipes that change it; named recipes are data (``bm25aug.recipes``);
the settings the model keeps take their defaults from ``AugmenterConfig`` (a test holds the three
together).
"""

from __future__ import annotations

import argparse
import os
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from bm25aug import recipes
from bm25aug.errors import UserError
from bm25aug.bm25_defaults import B, K1
from bm25aug.limits import check_all, check_choice
from bm25aug.model.config import POOLINGS, SAVED_BEFORE, TARGETS, TRAINED_SIDES, AugmenterConfig

NEGATIVES = ("bm25", "dpr")
AUG_INITS = ("embeddings", "centered", "random")
DEVICES = ("auto", "cpu", "cuda")  # bm25aug.train.trainer.resolve_device
_MODEL = AugmenterConfig()
# Settings that shape a new model; --init-from brings its model's own instead.
MODEL_SETTINGS = ("encoder", "encoder_layers", "query_side", "use_weights", "use_augmentation", "max_query_length", "pooling",
                  "weight_floor", "aug_threshold", "aug_layer", "aug_init", "feedback_terms", "expansion_terms",
                  "added_budget")
# What a static table has no use for: the encoder's settings (a recipe's among them are dropped for it).
ENCODER_SETTINGS = ("encoder_layers", "feedback_terms", "pooling", "aug_init", "aug_layer", "max_query_length", "lr",
                    "head_lr")


def _init_side(init_from: str) -> str | None:
    """The query side of the model --init-from names (a model folder or a run folder with best/, as
    training resolves it); None when it cannot be read here (training's load says why)."""
    from bm25aug.eval.checkpoints import resolve_checkpoint

    try:
        return AugmenterConfig.load(resolve_checkpoint(init_from, "", transfer=False)).query_side
    except UserError:
        return None


def check_asked_side(query_side: str | None, init_from: str | None) -> None:
    """An explicit ``--query-side`` beside ``--init-from`` must be that model's own side: the model
    brings its side, so another one asked for would be ignored without a word (the default,
    unset here, is no clash)."""
    if not (query_side and init_from) or (side := _init_side(init_from)) in (None, query_side):
        return
    raise UserError(f"--query-side {query_side} was asked for, but --init-from {init_from} is a {side} model and "
                    f"brings its own query side; fix: drop --query-side, or train a {query_side} model from the "
                    f"pretrained encoder without --init-from")


def arg(default, help: str, flag: str | None = None, choices: tuple | None = None, cli: bool = True, **kw):
    """A setting: its default, help text, and how the command line spells it (``flag``: a store-
    true/false ablation switch such as ``--no-weights``; ``cli=False``: set by the command itself)."""
    meta = {"help": help, "flag": flag, "choices": choices, "cli": cli}
    if callable(default):
        return field(default_factory=default, metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


@dataclass
class TrainConfig:
    dataset: str = arg("scifact", "the dataset's name or folder", cli=False)
    output_dir: str = arg("", "the run folder (default: $BM25AUG_CHECKPOINT_ROOT/<dataset>, else checkpoints/<dataset>)")
    encoder: str | None = arg(None, "Hugging Face model name or path (default: distilbert-base-uncased where it "
                                    "loads, else the packaged all-MiniLM-L6-v2)")
    encoder_layers: int | None = arg(None, "keep only the encoder's first N layers, a cheaper query encoder "
                                           "(0: the embeddings alone; default: all)")
    epochs: int = arg(6, "passes over the training queries")
    epoch_steps: int = arg(0, "at most this many steps an epoch, each epoch a new seeded draw from every corpus "
                              "(0: every example once an epoch)")
    batch_size: int = arg(32, "queries per step")
    lr: float = arg(3e-5, "learning rate of the encoder")
    head_lr: float = arg(1e-3, "learning rate of the two heads (new parameters, 30,522 + 1 outputs)")
    weight_decay: float = arg(0.01, "AdamW weight decay")
    warmup_ratio: float = arg(0.1, "share of the steps with a linear learning-rate warm-up")
    lam: float = arg(0.1, "λ of the df-weighted L1 penalty on a(q)")
    uniform_l1: bool = arg(False, "ablation: L1 penalty 1 for every term instead of sqrt(df/N)", flag="--uniform-l1")
    penalty_floor: float = arg(0.0, "the L1 penalty of a term is at least this (rare terms are otherwise nearly free)")
    off_positive_penalty: float = arg(0.0, "the L1 penalty of an a(q) entry whose term is in none of the query's "
                                           "relevant documents is at least this (such a term only raises others)")
    ema_decay: float = arg(0.99, "dev checks and best/ use this exponential moving average of the weights, per "
                                 "step (0: the raw weights)")
    flops: float = arg(0.1, "weight of SPLADE's FLOPS regularizer on a(q): a word proposed for every query costs "
                            "far more than one proposed for one (0: off)")
    significance: float = arg(0.05, "best/ must beat plain BM25 on dev by a paired one-sided t-test at this level, "
                                    "else it is plain BM25 (w = 1, a = 0; 0: off)")
    gate_quantile: float = arg(0.95, "after training, a(q) only for queries with at most this quantile of the "
                                     "training queries' non-zero counts (0: no gate)")
    use_weights: bool = arg(_MODEL.use_weights, "ablation: w ≡ 1", flag="--no-weights")
    use_augmentation: bool = arg(_MODEL.use_augmentation, "ablation: a ≡ 0 (reweighting only)",
                                 flag="--no-augmentation")
    bag_of_words: bool = arg(False, "ablation: score with bow(d), no idf or tf saturation", flag="--bag-of-words")
    corpus_temperature: float = arg(1.0, "several training corpora: each batch is one corpus's, drawn with "
                                         "probability proportional to its size ** (1 / T); 1 takes every example "
                                         "once an epoch, higher flattens towards uniform")
    hard_negatives: int = arg(1, "mined hard negatives per query per step")
    random_negatives: int = arg(0, "documents drawn from the whole corpus per step, shared by the batch as "
                                   "negatives (else an added word found in no batch document costs nothing)")
    pseudo_queries: int = arg(0, "add N pseudo-queries cut from the corpus (one sentence each, the rest of its "
                                 "document the positive) to the training queries")
    negative_depth: int = arg(30, "hard negatives come from this deep in BM25's ranking, judged positives excluded")
    negatives: str = arg("bm25", "hard negatives: mined with BM25 on our own index (as the paper) or DPR's "
                                 "hard_negative_ctxs", choices=NEGATIVES)
    max_query_length: int = arg(_MODEL.max_query_length, "query tokens the encoder reads")
    dev_size: int = arg(100, "size of the seeded train slice held out as dev when the dataset has no dev split")
    dev_depth: int = arg(100, "hits per dev query")
    seed: int = arg(13, "seeds the dev slice, the batches and the initialisation")
    k1: float = arg(K1, "BM25 k1 (Anserini's BEIR setting)")
    b: float = arg(B, "BM25 b (Anserini's BEIR setting)")
    threads: int = arg(lambda: max(1, os.cpu_count() or 1), "CPU threads (default: the CPU count)")
    device: str = arg("auto", "auto: CUDA when torch sees a GPU, else CPU; cuda trains under bf16 autocast",
                      choices=DEVICES)
    target: str = arg(_MODEL.target, "the index the model serves: flat (Lucene's English analyzer, Pyserini's stock "
                                     "BEIR/MS MARCO indexes) or wp (WordPiece, the paper's)", choices=TARGETS)
    pooling: str | None = arg(None, "a(q) from the [CLS] state, the mean state or SPLADE-style max over tokens "
                                    "(default: the encoder's pretraining pooling)", choices=POOLINGS)
    weight_floor: float = arg(_MODEL.weight_floor, "query-term weights w are at least this: 1 keeps each term's "
                                                   "BM25 weight as a floor (the paper: 0)")
    aug_threshold: float = arg(_MODEL.aug_threshold, "a(q) entries at or below this are zeroed, in training and "
                                                     "search alike (learned pruning)")
    aug_layer: int = arg(_MODEL.aug_layer, "the encoder layer a(q) reads: 0 (the embeddings) to N, or -1 (the last, "
                                           "as the paper); w always reads the last")
    aug_init: str = arg(_MODEL.aug_init, "the a(q) head's start: the word-embedding matrix, the same with each "
                                         "word's bias centred on the training queries, or random", choices=AUG_INITS)
    feedback_terms: int = arg(_MODEL.feedback_terms, "learned feedback: the encoder also reads RM3's top N feedback "
                                                     "terms of the query's first BM25 search, less the query's own "
                                                     "(flat target; 0: the query alone)")
    query_side: str = arg(_MODEL.query_side, "contextual: an encoder reads each query; static: a learned weight and "
                                             "expansion list per term, looked up, no encoder at query time",
                          choices=TRAINED_SIDES)
    expansion_terms: int = arg(4, "static query side: candidate added terms per query term (the terms --teacher "
                                  "adds beside it, else those of its judged documents; 0: reweighting only)")
    added_budget: int = arg(_MODEL.added_budget, "static query side: at most this many added terms a query, its "
                                                 "heaviest, in training as in search (0: every one)")
    table_lr: float = arg(0.05, "static query side: the learning rate of its table (a weight per term, a value per "
                                "expansion entry; each is its own parameter, so it moves far faster than a head)")
    init_from: str | None = arg(None, "start from this trained model (its encoder, heads and model settings) instead "
                                      "of the pretrained encoder, e.g. the general model fine-tuned on one corpus "
                                      "(same target)")
    teacher: str | None = arg(None, "a trained model whose BM25 scores over each batch this one also learns to "
                                    "match (distillation; same target and vocabulary)")
    distill_weight: float = arg(1.0, "weight of the distillation term (with --teacher)")

    def __post_init__(self) -> None:
        """Every setting checked when the config is made, before anything is read or written."""
        check_all(self)
        check_choice("--negatives", self.negatives, NEGATIVES)
        check_choice("--aug-init", self.aug_init, AUG_INITS)
        check_choice("--query-side", self.query_side, TRAINED_SIDES)
        if not (self.use_weights or self.use_augmentation):
            raise UserError("--no-weights with --no-augmentation leaves neither learned weights nor an augmentation, "
                            "so there is nothing to train; fix: drop one of the two (plain BM25 needs no training: "
                            "eval.py --method bm25-flat)")
        if self.feedback_terms:
            self._check_feedback()
        self._check_query_side()
        if self.init_from:
            defaults = {f.name: f.default for f in fields(self)}
            if set_here := [name for name in MODEL_SETTINGS if getattr(self, name) != defaults[name]]:
                flag = "--" + set_here[0].replace("_", "-")
                raise UserError(f"this run sets {flag} {getattr(self, set_here[0])} (on the command line or in its "
                                f"recipe), a model setting, but --init-from {self.init_from} brings its model's own; "
                                f"fix: leave {flag} out, or train from the pretrained encoder without --init-from")

    def _check_query_side(self) -> None:
        """Settings that mean nothing for the query side trained are refused, not ignored: the
        encoder's for a static table, the table's for an encoder. With --init-from, the side is that
        model's, read from its folder."""
        defaults = {f.name: f.default for f in fields(self)}
        side = _init_side(self.init_from) if self.init_from else self.query_side
        if side is None:
            return  # an --init-from folder this cannot read: loading it says why
        lacks = "no encoder" if side == "static" else "no static table"
        unused = ENCODER_SETTINGS if side == "static" else ("expansion_terms", "table_lr", "added_budget")
        why = (f"--init-from {self.init_from} is a {side} model, with {lacks}" if self.init_from
               else f"--query-side {side} has {lacks}")
        if bad := next((n for n in unused if getattr(self, n) != defaults[n]), None):
            flag = f"--{bad.replace('_', '-')} {getattr(self, bad)}"
            raise UserError(f"{why}, so {flag} (on the command line or in its recipe) means nothing for it; fix: "
                            f"drop {flag}, or train the other query side")

    def _check_feedback(self) -> None:
        """What learned feedback cannot be combined with."""
        clash = {"--target wp": self.target != "flat",
                 # a pseudo-query's own document is in the index: its feedback would give the answer away
                 f"--pseudo-queries {self.pseudo_queries}": bool(self.pseudo_queries),
                 "--aug-init centered": self.aug_init == "centered",  # centred on the queries alone
                 # the query's window and the feedback's must fit a BERT encoder's 512 positions
                 f"--max-query-length {self.max_query_length}": 2 * self.max_query_length + 1 > 512}
        if bad := next((flag for flag, clashes in clash.items() if clashes), None):
            raise UserError(f"--feedback-terms {self.feedback_terms} cannot be combined with {bad} (learned feedback "
                            f"needs the flat target, no pseudo-queries, an uncentred a(q) head and a query window of "
                            f"at most 255 tokens); fix: leave one of the two out")

    @classmethod
    def for_dataset(cls, dataset: str, recipe: str | None = None, **overrides) -> "TrainConfig":
        """Defaults, then the dataset's own recipe, then ``recipe``, then ``overrides`` (None: unset)."""
        values = {}
        for name in (recipes.for_dataset(dataset), recipe):
            if name:
                values.update(recipes.settings(name))
        given = {k: v for k, v in overrides.items() if v is not None}
        merged = {**values, **given}
        check_asked_side(given.get("query_side"), merged.get("init_from"))
        side = _init_side(merged["init_from"]) if merged.get("init_from") else merged.get("query_side")
        if side == "static":  # a recipe's encoder settings: not for a table
            values = {k: v for k, v in values.items() if k not in ENCODER_SETTINGS}
        values.update(given)
        unknown = values.keys() - {f.name for f in fields(cls)}
        if unknown:
            raise UserError(f"unknown training settings {sorted(unknown)}; fix: see `bm25aug train --help`")
        return cls(dataset=dataset, **values)


def saved_value(saved: dict, name: str):
    """A setting of a run folder's ``config.json``; one it predates had the first release's value."""
    if name in saved:
        return saved[name]
    if name in SAVED_BEFORE:
        return SAVED_BEFORE[name]
    legacy = recipes.settings(recipes.LEGACY)
    return legacy[name] if name in legacy else default(name)


def default(name: str):
    f = next(f for f in fields(TrainConfig) if f.name == name)
    return f.default_factory() if f.default is MISSING else f.default


def _value_type(annotation: str):
    """``int``, ``float``, ``str`` or ``bool`` from a field's (string) annotation."""
    hint = typing.get_type_hints(TrainConfig)[annotation]
    if isinstance(hint, types.UnionType):
        hint = next(t for t in typing.get_args(hint) if t is not type(None))
    return hint


def _help(f) -> str:
    text = f.metadata["help"]
    if "default" not in text:
        text += f" (default: {default(f.name)})"
    changed = [f"{name} {recipes.settings(name)[f.name]}" for name in recipes.names()
               if f.name in recipes.settings(name)]
    return text + (f"; recipes: {', '.join(changed)}" if changed else "")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; each defaults to None (unset), so that recipes apply under the flags."""
    parser.add_argument("--recipe", choices=recipes.names(),
                        help="a named recipe (bm25aug/recipes/), applied over the dataset's own recipe")
    for f in fields(TrainConfig):
        meta = f.metadata
        if not meta["cli"]:
            continue
        kind = _value_type(f.name)
        if kind is bool:
            parser.add_argument(meta["flag"], dest=f.name, action="store_const", const=not default(f.name),
                                default=None, help=meta["help"])
        else:
            parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=kind, choices=meta["choices"],
                                default=None, help=_help(f))


def from_args(args: argparse.Namespace, dataset: str, output_root: Path) -> TrainConfig:
    """The config a parsed command line asks for (``output_dir`` defaults to ``output_root/<dataset>``,
    and ``output_root/<dataset>-static`` for the static query side, so that it never lands on the
    contextual model of the same data)."""
    overrides = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if f.metadata["cli"]}
    suffix = "-static" if overrides.get("query_side") == "static" else ""
    overrides["output_dir"] = overrides["output_dir"] or str(output_root / f"{dataset}{suffix}")
    return TrainConfig.for_dataset(dataset, args.recipe, **overrides)
