"""Export augmented queries as weighted term lists any Lucene/Pyserini user can search.

One JSON line per query: ``{"id": qid, "text": query, "vector": {token: weight}}`` with
``weight = w·(bow + a)`` (the ``vector`` field as in Pyserini's JSON vector collections). Each
``(token, weight)`` becomes ``BoostQuery(TermQuery(contents:token), weight)``.

A model that reads BM25 feedback (``--feedback-terms``) reads it from the dataset's flat index
first; its term lists are then searched like any other.
"""

from __future__ import annotations

from pathlib import Path

from bm25aug.io import write_jsonl
from bm25aug.outputs import check_outputs
from bm25aug.model.encoder import QueryEncoder, encode_queries


def export_term_lists(model: QueryEncoder, queries: dict[str, str], path: str | Path, top_k: int | None = None,
                      threshold: float = 0.0, batch_size: int | None = None, threads: int = 1) -> int:
    """Write one weighted term list per query (atomically), encoded on ``threads`` threads (the
    same lists on any number); returns the number written. The file may not be, or lie inside,
    the folder the model was loaded from."""
    check_outputs({"the term-list file": path}, {"the model": model.path})
    qids = list(queries)
    vectors = encode_queries(model, [queries[q] for q in qids], top_k=top_k, threshold=threshold,
                             batch_size=batch_size, threads=threads)
    write_jsonl(path, ({"id": q, "text": queries[q], "vector": v} for q, v in zip(qids, vectors)))
    return len(qids)


def run(args) -> None:
    """``bm25aug export``: a dataset split's queries as weighted term lists, one JSON line each."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.eval.checkpoints import resolve_checkpoint
    from bm25aug.model.onnx_encoder import load_encoder
    from bm25aug.outputs import check_outputs

    dataset = load_dataset(args.dataset, args.data_dir)
    checkpoint = resolve_checkpoint(args.checkpoint, dataset.name, False)
    check_outputs({"--output": args.output}, {"the dataset": dataset.path, "--checkpoint": args.checkpoint,
                                              "the model": checkpoint})
    split = dataset.split(dataset.spec.eval_split if args.split is None else args.split)
    model = load_encoder(checkpoint, args.runtime)
    if model.config.reads_feedback:  # learned feedback: each query's RM3 terms come from the dataset's index
        from bm25aug.lucene.index import ensure_index
        from bm25aug.search.bm25 import BM25Searcher
        from bm25aug.search.feedback import reading_feedback

        index = ensure_index(dataset, "flat", args.index_root, args.threads)
        model = reading_feedback(model, BM25Searcher(index, flavor="flat"))
    n = export_term_lists(model, split.queries, args.output, top_k=args.top_k, threshold=args.threshold,
                          batch_size=args.encode_batch_size, threads=args.threads)
    print(f"wrote {n} weighted term lists to {args.output}")
