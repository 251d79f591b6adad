"""Two checkouts of bm25aug, searching the same term lists, alternately in one run: QPS and ratios.

    python benchmarks/ab_term_lists.py --base DIR [--dataset scifact] [--rounds 4] [--json-out F]

``--base`` is another checkout (e.g. ``git worktree add /tmp/base 2a6de7d``); this one is "new".
Each round runs a child process per checkout, base first then new, then new first then base,
so the machine's wander hits both alike. A child, on the dataset's flat index and test queries:

* augmented: ``AugmentedSearcher.batch_search_arrays`` over every query, encoding included;
* term lists: ``BM25Searcher.batch_search_terms_arrays`` over the pre-encoded term lists;
* one by one: ``search_terms_arrays`` per term list (what the server does for one request);

QPS on 1 and 2 threads, the median of 3 batches after a warm-up. The model is an untrained flat
model saved to a temporary folder (the same encoder, so the same encoding cost as a trained one;
its term lists are the queries' own terms, weighted). The median of the rounds is printed, and
new's QPS over base's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
from bm25aug.data.registry import load_dataset
from bm25aug.lucene.index import ensure_index
from bm25aug.search.augmented import AugmentedSearcher
from bm25aug.search.bm25 import BM25Searcher

model, dataset = sys.argv[1], sys.argv[2]
ds = load_dataset(dataset)
split = ds.split("test")
queries = list(split.queries.values())
index = ensure_index(ds, "flat")
augmented = AugmentedSearcher.from_pretrained(model, index)
bm25 = BM25Searcher(index)
lists = augmented.term_lists(queries)

def qps(fn, n, repeats=3, warm_s=3.0):
    start = time.perf_counter()
    while time.perf_counter() - start < warm_s:
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    return n / sorted(times)[len(times) // 2]

out = {}
for threads in (1, 2):
    out[f"augmented t{threads}"] = qps(lambda: augmented.batch_search_arrays(queries, 1000, threads), len(queries))
    out[f"term lists t{threads}"] = qps(lambda: bm25.batch_search_terms_arrays(lists, 1000, threads), len(lists))
out["one by one"] = qps(lambda: [bm25.search_terms_arrays(t, 1000) for t in lists], len(lists))
print(json.dumps(out))
"""


def child(tree: Path, model: Path, dataset: str) -> dict:
    env = {"BM25AUG_INDEX_ROOT": str(Path(__file__).resolve().parents[1] / "indexes"), **os.environ,
           "PYTHONPATH": str(tree)}
    run = subprocess.run([sys.executable, "-c", CHILD, str(model), dataset], env=env, cwd=tree,
                         capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"error: the child in {tree} failed: {run.stderr.strip().splitlines()[-1:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _commit(tree: Path) -> str:
    """The checkout's commit, and whether its working tree differs from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=tree, capture_output=True,
                           text=True)
    return (head.stdout.strip() or str(tree)) + (" with uncommitted changes" if dirty.stdout.strip() else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True, help="the other checkout (its repository root)")
    p.add_argument("--dataset", default="scifact")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--json-out")
    args = p.parse_args()
    new, base = Path(__file__).resolve().parents[1], Path(args.base).resolve()
    if not (base / "bm25aug").is_dir():
        sys.exit(f"error: --base {base} holds no bm25aug package; fix: pass a checkout's root")
    from bm25aug.model.augmenter import QueryAugmenter

    runs: dict[str, list[dict]] = {"base": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        QueryAugmenter.from_encoder(target="flat").eval().save_pretrained(model)
        for r in range(args.rounds):
            for name in (("base", "new") if r % 2 == 0 else ("new", "base")):
                started = time.perf_counter()
                runs[name].append(child(base if name == "base" else new, model, args.dataset))
                print(f"round {r + 1} {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    keys = list(runs["new"][0])
    medians = {name: {k: statistics.median(run[k] for run in runs[name]) for k in keys} for name in runs}
    print(f"| path | base QPS | new QPS | new / base |\n|---|---|---|---|")
    for k in keys:
        print(f"| {k} | {medians['base'][k]:,.0f} | {medians['new'][k]:,.0f} | {medians['new'][k] / medians['base'][k]:.2f}x |")
    if args.json_out:
        command = "python benchmarks/ab_term_lists.py " + " ".join(sys.argv[1:])
        Path(args.json_out).write_text(json.dumps({"command": command, "base": _commit(base), "new": _commit(new),
                                                   "dataset": args.dataset, "rounds": runs, "medians": medians},
                                                  indent=1) + "\n")


if __name__ == "__main__":
    main()
