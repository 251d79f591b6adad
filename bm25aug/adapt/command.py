"""``bm25aug adapt``: fit the query model to a corpus with no queries and no judgements.

    bm25aug adapt --dataset NAME | --corpus FILE | --index DIR --output-dir DIR [--init-from MODEL]
                  [--query-side contextual|static] [--kind sentence|title|keyphrase|span|mix] [--loss kl|margin-mse]

Steps, each timed (wall seconds and the process's peak memory, in ``adapt.json`` and on the
card): the flat index (built when missing), the pseudo-queries, the teacher's corpus encoding
(cached), the gate's judgements, then training (candidates mined, the teacher's scores, the
epochs, the gate). The model is ``DIR/best``, loaded as any trained model.
"""

from __future__ import annotations

import argparse
import logging
import resource
import time
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path

from bm25aug.adapt.config import KINDS, LOSSES, QUERY_SIDE, TEACHERS, TRAIN_SETTINGS, AdaptConfig, defaults
from bm25aug.errors import UserError
from bm25aug.io import write_json

log = logging.getLogger(__name__)
SETTINGS_FILE = "adapt_settings.json"  # the run's AdaptConfig, for --resume to compare with
_HELP = {"kind": f"pseudo-queries: one of {', '.join(KINDS)}", "queries": "training pseudo-queries",
         "dev_queries": "held-out pseudo-queries judged by the teacher (the label-free gate)",
         "candidates": "of each query's BM25 candidates, how many a step scores",
         "loss": f"toward the teacher's scores: {' or '.join(LOSSES)}", "teacher": f"one of {', '.join(TEACHERS)}",
         "teacher_temperature": "the teacher's cosines over this are its logits",
         "mix": "the target: (1 - mix) the teacher's logits + mix plain BM25's, on the teacher's spread",
         "judged": "the gate's relevant documents per held-out query (the teacher's top N)"}
# Training settings adapt passes on to TrainConfig when given (their defaults: TRAIN_SETTINGS, else TrainConfig's).
_TRAIN_FLAGS = {"epochs": int, "batch_size": int, "lr": float, "head_lr": float, "table_lr": float,
                "expansion_terms": int, "lam": float, "flops": float, "negative_depth": int, "significance": float,
                "seed": int, "threads": int, "added_budget": int}


def add_arguments(p: argparse.ArgumentParser) -> None:
    source = p.add_argument_group("the corpus (exactly one)")
    source.add_argument("--dataset", help="a dataset name or folder (BEIR, DPR or MS MARCO layout); only its "
                                           "corpus is read")
    source.add_argument("--corpus", help="a corpus file: BEIR corpus.jsonl, DPR passages.tsv or MS MARCO "
                                         "collection.tsv")
    source.add_argument("--index", help="a stock flat Lucene index (Lucene's English analyzer) that stores its "
                                        "documents and their term vectors: Anserini's -storeRaw and -storeDocvectors")
    p.add_argument("--output-dir", required=True, help="the run folder; the adapted model is DIR/best")
    p.add_argument("--init-from", help="start from this trained model (e.g. the general model), not the pretrained "
                                       "encoder")
    p.add_argument("--query-side", choices=("contextual", "static"),
                   help=f"contextual: an encoder reads the query; static: a learned table, no encoder (default: "
                        f"{QUERY_SIDE}; with --init-from, that model's)")
    for f in fields(AdaptConfig):
        kind = type(f.default)
        p.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=kind, default=None,
                       help=f"{_HELP[f.name]} (default: {f.default})")
    for name, kind in _TRAIN_FLAGS.items():
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, default=None,
                       help=f"as `bm25aug train --{name.replace('_', '-')}`"
                            + (f" (adapt's default: {TRAIN_SETTINGS[name]})" if name in TRAIN_SETTINGS else ""))
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None)
    p.add_argument("--data-dir", help="where dataset folders are looked for (else $BM25AUG_DATA_DIR)")
    p.add_argument("--index-root", help="where the flat index is built (default: indexes/)")
    p.add_argument("--resume", action="store_true", help="continue the run in --output-dir")


def adapt_config(args: argparse.Namespace) -> AdaptConfig:
    """The ``AdaptConfig`` a parsed command line asks for."""
    return AdaptConfig(**{**defaults(), **{f.name: getattr(args, f.name) for f in fields(AdaptConfig)
                                           if getattr(args, f.name, None) is not None}})


def train_config(args: argparse.Namespace, name: str):
    """The ``TrainConfig`` of the training step: adapt's ``TRAIN_SETTINGS`` under the flags given."""
    from bm25aug.train.arguments import TrainConfig, check_asked_side

    given = {k: getattr(args, k) for k in [*_TRAIN_FLAGS, "device", "init_from", "query_side"]
             if getattr(args, k, None) is not None}
    check_asked_side(given.get("query_side"), given.get("init_from"))
    settings = dict(TRAIN_SETTINGS)
    if not given.get("init_from"):  # a new model: adapt's query side unless told otherwise
        settings["query_side"] = given.get("query_side", QUERY_SIDE)
    if settings.get("query_side") != "static":  # a table's setting: nothing for an encoder
        settings.pop("added_budget", None)
    return TrainConfig(dataset=name, output_dir=str(args.output_dir), **{**settings, **given})


def check_resumed_settings(file: Path, adapt: AdaptConfig, resume: bool) -> None:
    """``--resume`` continues a run only with the adapt settings it was started with (training's own
    are checked by the trainer)."""
    if not (resume and file.is_file()):
        return
    from bm25aug.train.run_folder import read_json

    saved, now = read_json(file), asdict(adapt)
    if differ := [k for k in now if saved.get(k) != now[k]]:
        flags = ", ".join(f"--{k.replace('_', '-')} {saved.get(k)} then, {now[k]} now" for k in differ)
        raise UserError(f"--resume with adapt settings that differ from the saved run ({flags}); fix: rerun with the "
                        f"same settings or a new --output-dir")


class Steps:
    """Wall seconds of each step and the process's peak resident memory after it (JVM included)."""

    def __init__(self):
        self.cost: dict[str, dict] = {}

    @contextmanager
    def step(self, name: str):
        start = time.perf_counter()
        yield
        self.cost[name] = {"seconds": round(time.perf_counter() - start, 1),
                           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
        log.info("adapt: %s took %.0f s", name, self.cost[name]["seconds"])


def run(args: argparse.Namespace) -> None:
    from bm25aug.adapt import card, source
    from bm25aug.adapt.gate import judged_split, verdict
    from bm25aug.adapt.queries import make_queries
    from bm25aug.adapt.teacher import make_teacher
    from bm25aug.adapt.trainer import AdaptTrainer, PseudoDataset
    from bm25aug.search.bm25 import BM25Searcher

    out = Path(args.output_dir)
    if out.exists() and (out / "best").exists() and not args.resume:
        raise UserError(f"{out} already holds an adapted model; fix: pass a new --output-dir, or --resume")
    adapt = adapt_config(args)
    train_config(args, "corpus")  # every setting checked before any work
    from bm25aug.adapt.preflight import check_before_work

    check_before_work(args, out, out / SETTINGS_FILE)  # and the output folder, and what --resume needs
    check_resumed_settings(out / SETTINGS_FILE, adapt, args.resume)
    steps, start = Steps(), time.perf_counter()
    with steps.step("index"):
        src = source.resolve(args.dataset, args.corpus, args.index, args.data_dir, args.index_root,
                             getattr(args, "threads", None))
    config = train_config(args, src.name)
    with steps.step("pseudo-queries"):
        dev = make_queries(src.corpus, adapt.kind, adapt.dev_queries, config.seed + 1)
        train = make_queries(src.corpus, adapt.kind, adapt.queries, config.seed,
                             skip={q.split(":", 1)[1] for q in dev})
    if not train or not dev:  # every kind falls back to a span of 8-16 words
        raise UserError(f"{src.name}: {len(dev)} held-out and {len(train)} training pseudo-queries from its "
                        f"{len(src.corpus):,} documents (--dev-queries {adapt.dev_queries} are drawn first, and a "
                        f"document of fewer than 8 words gives none); fix: pass a smaller --dev-queries, or a corpus "
                        f"with more or longer documents")
    with steps.step("teacher: corpus encoding"):
        searcher = BM25Searcher(src.index, config.k1, config.b, flavor="flat")
        teacher = make_teacher(adapt.teacher, searcher.index)
    with steps.step("gate judgements"):
        judged = judged_split(searcher, teacher, dev, config.negative_depth, adapt, config.threads)
    with steps.step("train"):
        trainer = AdaptTrainer(config, PseudoDataset(src, train, judged), src.index, teacher, adapt, args.resume)
        write_json(out / SETTINGS_FILE, asdict(adapt))
        result = trainer.train()
    encode = teacher.encode_seconds
    info = {"corpus": src.name, "documents": len(src.corpus), "adapt": asdict(adapt), "depth": config.negative_depth,
            "teacher": teacher.name, "start": config.init_from or ("a new static table" if config.query_side == "static"
                                                                      else "the pretrained encoder"),
            "train_queries": len(trainer.examples), "dev_queries": len(judged.queries),
            "gate": verdict(result.get("selection")), "selection": result.get("selection"), "scale": trainer.scale,
            "teacher_corpus_encoding_s": round(encode, 1), "cost": steps.cost,
            "total_s": round(time.perf_counter() - start, 1)}
    card.write(out, info)
    print(f"adapted {src.name} -> {out / 'best'} in {info['total_s']:.0f} s (the teacher's corpus encoding: "
          f"{encode:.0f} s{', cached' if steps.cost['teacher: corpus encoding']['seconds'] < encode else ''}); gate: "
          f"{info['gate']}")
