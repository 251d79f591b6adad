"""Issue 76: how faithfully a dense query tower stands in for bge-small's query encoder, with no labels.

    python research/tower_fidelity.py --towers runs/tower/A runs/tower/B [--sets medquad:test ...] \\
        [--ranking-set squadshifts-wiki:test] [--timing-queries 300] [--json-out F]

On held-out queries (by default the test queries of general-open's four sets, as
research/student_fidelity.py's: only their text is read, never a judgement; no tower trains on
them, bm25aug.train.tower), each tower's unit query vector is compared with bge fp32's
(the instruction prepended on both sides, as bge is used): its mean cosine per set and over all.
bge int8's query vector is measured beside them, as a reference (a query encoder search already
ships as an option).

Then the query encode time, as search pays it: one query at a time (tokenization, the graph on one
onnxruntime thread, pooling), the towers', bge fp32's and bge int8's in the same run, interleaved
query by query, so that all meet the same load: p50 and p90 in ms.

Then the dense ranking agreement on ``--ranking-set`` (default squadshifts-wiki's test queries,
1,581 passages): the corpus vectors are the default dense model's (``load_dense_model()``: bge int8
corpus, cached), every passage scored exactly; a tower's top 10 is scored by nDCG@10 against bge
fp32's top 10 taken as graded relevance (its first 10 down to its tenth 1), with the share of
bge's top 10 it finds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

from bm25aug.data.registry import load_dataset
from bm25aug.dense.loading import load_dense_model
from bm25aug.dense.models import BGE
from bm25aug.errors import UserError
from bm25aug.eval.metrics import evaluate_qrels
from bm25aug.train.tower import teacher_vectors

SETS = ("medquad:test", "squadshifts-wiki:test", "squadshifts-reddit:test", "squadshifts-amazon:test")
FP32, INT8 = "bge-small-en-v1.5-fp32", "bge-small-en-v1.5-int8"
WARMUP = 10


def queries_of(spec: str) -> tuple[list[str], list[str]]:
    name, _, split = spec.partition(":")
    dataset = load_dataset(name)
    queries = dataset.split(split or dataset.spec.eval_split).queries
    kept = {q: t for q, t in queries.items() if t.strip()}
    return list(kept), list(kept.values())


def load_models(towers: list[str]) -> dict:
    """Each tower (its folder's ONNX graph, bge's kind) and bge int8, on one thread."""
    for tower in towers:
        if not (Path(tower) / "model.onnx").is_file():
            raise UserError(f"{tower} holds no model.onnx (a tower's ONNX export); fix: pass the folder of a finished "
                            f"run of python -m bm25aug.train.tower")
    models = {tower: load_dense_model(f"{BGE.name}={tower}", threads=1) for tower in towers}
    models[INT8] = load_dense_model(INT8, threads=1)
    return models


def encode(model, texts: list[str]) -> np.ndarray:
    """Query vectors as search makes them: int8 one query at a time (its model does so), fp32 batched."""
    return model.encode_queries(texts)


def cosines(models: dict, specs: list[str], fp32) -> tuple[dict, dict]:
    """Per set and model, the mean cosine to bge fp32's query vector; and the vectors themselves."""
    rows, vectors = {}, {}
    for spec in specs:
        _, texts = queries_of(spec)
        teacher = teacher_vectors(texts, threads=1, model=fp32)
        vectors[spec] = {FP32: teacher}
        rows[spec] = {"queries": len(texts), "models": {}}
        for name, model in models.items():
            mine = vectors[spec][name] = encode(model, texts)
            cos = (mine * teacher).sum(1)
            rows[spec]["models"][name] = {"mean_cosine": float(cos.mean()), "p5_cosine": float(np.percentile(cos, 5)),
                                          "min_cosine": float(cos.min())}
            print(f"{spec} ({len(texts)} queries) {name}: mean cosine to bge fp32 {cos.mean():.4f} "
                  f"(5th percentile {np.percentile(cos, 5):.4f})", flush=True)
    return rows, vectors


def timings(models: dict, specs: list[str], n: int, seed: int = 13) -> dict:
    """p50 and p90 ms of one query's encoding per model, interleaved query by query."""
    pool = [t for spec in specs for t in queries_of(spec)[1]]
    sample = random.Random(seed).sample(pool, min(n + WARMUP, len(pool)))
    times: dict[str, list[float]] = {name: [] for name in models}
    for at, text in enumerate(sample):
        for name, model in models.items():
            start = time.perf_counter()
            model.encode_queries([text])
            if at >= WARMUP:
                times[name].append((time.perf_counter() - start) * 1000)
    out = {}
    for name, ms in times.items():
        out[name] = {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
                     "mean_ms": float(np.mean(ms)), "queries": len(ms)}
        print(f"encode one query, one thread, {name}: p50 {out[name]['p50_ms']:.2f} ms, "
              f"p90 {out[name]['p90_ms']:.2f} ms", flush=True)
    return out


def ranking(spec: str, vectors: dict) -> dict:
    """nDCG@10 of each model's top 10 against bge fp32's top 10 (graded 10 to 1), and the share of
    bge's top 10 found, over the default dense model's corpus vectors."""
    from bm25aug.lucene.index import ensure_index
    from bm25aug.search.dense import DenseSearcher

    name, _, _ = spec.partition(":")
    qids, _ = queries_of(spec)
    searcher = DenseSearcher(ensure_index(load_dataset(name), "flat", threads=1),
                             load_dense_model(None, threads=1), search="exact")
    runs = {model: {q: searcher.hits(searcher.top(v, 10)) for q, v in zip(qids, rows)}
            for model, rows in vectors.items()}
    qrels = {q: {h.docid: 10 - r for r, h in enumerate(hits)} for q, hits in runs[FP32].items()}
    out = {"queries": len(qids), "corpus": int(searcher.index.num_docs), "models": {}}
    for model, run in runs.items():
        if model == FP32:
            continue
        overlap = float(np.mean([len({h.docid for h in run[q]} & set(qrels[q])) / max(1, len(qrels[q]))
                                 for q in qids]))
        ndcg = evaluate_qrels(run, qrels)["ndcg@10"]
        out["models"][model] = {"ndcg@10_vs_bge": ndcg, "top10_overlap": overlap}
        print(f"{spec} ranking, {model}: nDCG@10 against bge fp32's top 10 {ndcg:.4f}, "
              f"share of its top 10 found {overlap:.4f}", flush=True)
    return out


def overall(rows: dict, names: list[str]) -> dict:
    total = sum(r["queries"] for r in rows.values())
    out = {}
    for name in names:
        out[name] = sum(r["models"][name]["mean_cosine"] * r["queries"] for r in rows.values()) / total
        print(f"mean over {total} queries, {name}: cosine to bge fp32 {out[name]:.4f}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--towers", nargs="+", required=True, help="tower run folders (python -m bm25aug.train.tower)")
    p.add_argument("--sets", nargs="+", default=list(SETS))
    p.add_argument("--ranking-set", default="squadshifts-wiki:test", help="'' to skip the ranking agreement")
    p.add_argument("--timing-queries", type=int, default=300)
    p.add_argument("--json-out")
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        fp32 = load_dense_model(FP32, threads=1)
        models = load_models(args.towers)
        rows, vectors = cosines(models, args.sets, fp32)
        result = {"command": " ".join(["python research/tower_fidelity.py", *sys.argv[1:]]), "sets": rows,
                  "mean_cosine": overall(rows, list(models)),
                  "encode": timings({**models, FP32: fp32}, args.sets, args.timing_queries),
                  "load_average": os.getloadavg()}
        if args.ranking_set:
            if args.ranking_set not in vectors:
                _, texts = queries_of(args.ranking_set)
                vectors[args.ranking_set] = {FP32: teacher_vectors(texts, 1, model=fp32),
                                             **{n: encode(m, texts) for n, m in models.items()}}
            result["ranking"] = {args.ranking_set: ranking(args.ranking_set, vectors[args.ranking_set])}
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
