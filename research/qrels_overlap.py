"""How many test queries share a judged-relevant document with a training query.

    python research/qrels_overlap.py --dataset scifact

A model that learns, from training judgements, which words relevant documents hold (the static
query side's expansion lists) can only help a test query through documents its training queries
were judged against; this counts such test queries (docs/results.md, the static query side).
"""

from __future__ import annotations

import argparse

from bm25aug.data.registry import load_dataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--train", default="train")
    p.add_argument("--test", default="test")
    args = p.parse_args()
    dataset = load_dataset(args.dataset)
    train, test = dataset.split(args.train), dataset.split(args.test)
    seen = {d for rels in train.qrels.values() for d, g in rels.items() if g > 0}
    judged = [q for q, rels in test.qrels.items() if any(g > 0 for g in rels.values())]
    shared = [q for q in judged if any(g > 0 and d in seen for d, g in test.qrels[q].items())]
    print(f"{args.dataset}: {len(shared)} of {len(judged)} {args.test} queries have a relevant document that a "
          f"{args.train} query is also judged relevant to ({len(seen)} such documents)")


if __name__ == "__main__":
    main()
