"""``bm25aug export``: a dataset split's queries as weighted term lists (``bm25aug.model.export``).

A model that reads BM25 feedback (``--feedback-terms``) reads it from the dataset's flat index
first; its term lists are then searched like any other.
"""

from __future__ import annotations

from bm25aug.data.registry import load_dataset
from bm25aug.eval.checkpoints import resolve_checkpoint
from bm25aug.model.export import export_term_lists
from bm25aug.model.loading import load_encoder
from bm25aug.outputs import check_outputs


def run(args) -> None:
    """``bm25aug export``: a dataset split's queries as weighted term lists, one JSON line each."""
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
