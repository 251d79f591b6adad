"""How a dense query tower's folder (``bm25aug.dense.tower``) is made from a training run
(``bm25aug.train.tower``): ``python -m bm25aug.train.tower_build RUN OUT --name NAME``. The runtime
never imports this module."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bm25aug.dense.fetch import ONNX_FILE, TOKENIZER_FILE
from bm25aug.dense.record import RECORD
from bm25aug.dense.tower import ROLE
from bm25aug.errors import UserError


def build(run: Path, out: Path, name: str, corpus_model: str) -> Path:
    """A tower folder at ``out`` from a training run's graph and tokenizer: its record pairs it with
    ``corpus_model`` (loaded here for its digest), and its card says what it is."""
    from bm25aug.dense.fetch import PINNED
    from bm25aug.dense.loading import load_dense_model
    from bm25aug.io import atomic_dir, digest, write_json
    from bm25aug.train.tower import TEACHER

    trained = _run_record(run)
    corpus, teacher_kind = load_dense_model(corpus_model), PINNED[TEACHER].kind  # the teacher's kind, unloaded
    if corpus.kind.name != teacher_kind:
        raise UserError(f"{run} was aligned to {TEACHER}'s query vectors, and {corpus_model} is another model "
                        f"({corpus.kind.name}), whose document vectors those queries do not match; fix: pass an "
                        f"export of {teacher_kind}, e.g. {teacher_kind}-int8")
    with atomic_dir(out, RECORD, what="a bm25aug dense query tower") as tmp:
        for file in (ONNX_FILE, TOKENIZER_FILE):
            (tmp / file).write_bytes((run / file).read_bytes())
        record = {"name": name, "kind": corpus.kind.name, "role": ROLE, "corpus_model": corpus.name,
                  "corpus_digest": corpus.digest, "teacher": TEACHER,
                  "trained": {k: trained[k] for k in ("command", "kept_layers", "texts", "train_seconds",
                                                      "best_held_out_cosine") if k in trained},
                  "files": {f: digest(tmp / f) for f in (ONNX_FILE, TOKENIZER_FILE)}}
        write_json(tmp / RECORD, record)
        (tmp / "README.md").write_text(card(record), encoding="utf-8")
    return out


def _run_record(run: Path) -> dict:
    from bm25aug.train.tower import RECORD as RUN_RECORD

    try:
        record = json.loads((run / RUN_RECORD).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{run} holds no finished tower run ({RUN_RECORD}: {type(e).__name__}); fix: pass the "
                        f"--output-dir of a finished python -m bm25aug.train.tower") from None
    missing = [f for f in (ONNX_FILE, TOKENIZER_FILE) if not (run / f).is_file()]
    if missing:
        raise UserError(f"{run} lacks {', '.join(missing)}; fix: pass the --output-dir of a finished tower run")
    return record


def card(record: dict) -> str:
    trained = record.get("trained", {})
    return f"""# bm25aug dense query tower: `{record['name']}`

A query encoder for the dense peer, aligned to `{record['corpus_model']}`'s document vectors: it puts
a query (with {record['kind']}'s instruction) where {record.get('teacher') or record['kind']}'s own query
encoder puts it, with the layers {trained.get('kept_layers')} of that encoder as its start, trained
with no labels on {trained.get('texts', '?')} query texts (`{trained.get('command', '?')}`). The corpus
is encoded by `{record['corpus_model']}` as before; the tower refuses any other corpus model.

{record['kind']} is BAAI's, under the MIT license; so is this derivative.

```python
from bm25aug.dense import load_dense_model
model = load_dense_model("path/to/this/folder")
```
"""


def main(argv: list[str] | None = None) -> None:
    import argparse

    from bm25aug.dense.models import SPLIT_NAME

    parser = argparse.ArgumentParser(prog="python -m bm25aug.train.tower_build", description=build.__doc__)
    parser.add_argument("run", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--corpus-model", default="bge-small-en-v1.5-int8",
                        help=f"the pinned model whose document vectors the tower is searched against "
                             f"(the hybrid's default, {SPLIT_NAME}, encodes the corpus by this one)")
    args = parser.parse_args(argv)
    try:
        print(f"wrote {build(args.run, args.out, args.name, args.corpus_model)}")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
