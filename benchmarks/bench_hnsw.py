"""The dense peer's HNSW index (``bm25aug.dense.hnsw``) against exact search, on one dataset's
eval queries: the build's seconds, recall@10 and recall@100 of the HNSW run against the exact
run for each ``efSearch``, and each search's p50 latency (query vectors encoded beforehand, so
only the search is timed).

    python benchmarks/bench_hnsw.py [--dataset scifact] [--dense-model bge-small-en-v1.5-int8] \
        [--ef 100 200 500 1000] [--rebuild] [--json-out FILE]

The corpus is encoded through the embeddings cache (once per corpus and model) and the HNSW index
built through its own (``--rebuild``: built again, for its time). Record with nothing else running.
"""

from __future__ import annotations

import argparse
import json
import sys
import os
import shutil
import time

import numpy as np

from bm25aug.data.registry import load_dataset
from bm25aug.dense import hnsw
from bm25aug.dense.embeddings import corpus_embeddings
from bm25aug.dense.loading import load_dense_model
from bm25aug.io import write_json
from bm25aug.lucene.index import ensure_index
from bm25aug.lucene.reader import LuceneIndex


def recall(found, truth, k: int) -> float:
    """The mean share of each exact top k that the approximate top k holds."""
    shares = [len(set(f.lucene_ids[:k].tolist()) & set(t.lucene_ids[:k].tolist())) / min(k, len(t.lucene_ids))
              for f, t in zip(found, truth)]
    return float(np.mean(shares))


def timed(search, vectors, k: int) -> tuple[list, float]:
    """Each vector's top k and the p50 milliseconds of one search."""
    tops, seconds = [], []
    for vector in vectors:
        start = time.perf_counter()
        tops.append(search(vector, k))
        seconds.append(time.perf_counter() - start)
    return tops, round(1000 * float(np.median(seconds)), 2)


def run(name: str, model_name: str, efs: list[int], rebuild: bool) -> dict:
    dataset = load_dataset(name)
    index = LuceneIndex(ensure_index(dataset, "flat"))
    model = load_dense_model(model_name)
    rows, encode_seconds = corpus_embeddings(index, model)
    folder = hnsw.default_folder(index, model)
    if rebuild:
        shutil.rmtree(folder, ignore_errors=True)
    hnsw.build_hnsw(index, model, rows)
    built = json.loads((folder / hnsw.RECORD).read_text(encoding="utf-8"))
    split = dataset.split(dataset.spec.eval_split)
    vectors = model.encode_queries(list(split.queries.values()))
    exact, exact_ms = timed(rows.top, vectors, 100)
    result = {"dataset": name, "model": model.name, "documents": len(rows), "queries": len(vectors),
              "encode_seconds": encode_seconds, "build_seconds": built["build_seconds"], "M": hnsw.M,
              "efC": hnsw.EF_CONSTRUCTION, "exact_p50_ms": exact_ms, "load": list(os.getloadavg()), "ef": {}}
    for ef in efs:
        hnsw.EF_SEARCH = ef
        graph = hnsw.HnswIndex(folder, index, model, rows)
        found, ms = timed(graph.search, vectors, 100)
        result["ef"][ef] = {"recall@10": round(recall(found, exact, 10), 4),
                            "recall@100": round(recall(found, exact, 100), 4), "p50_ms": ms}
        print(name, "ef", ef, result["ef"][ef], flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--dense-model", default="bge-small-en-v1.5-int8")
    parser.add_argument("--ef", type=int, nargs="+", default=[100, 200, 500, 1000])
    parser.add_argument("--rebuild", action="store_true", help="build the HNSW index again, for its time")
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args()
    result = {"command": "python benchmarks/bench_hnsw.py " + " ".join(sys.argv[1:]),
              **run(args.dataset, args.dense_model, args.ef, args.rebuild)}  # docs/search.md's table is made from it
    print(json.dumps(result, indent=2))
    if args.json_out:
        write_json(args.json_out, result)


if __name__ == "__main__":
    main()
