"""What ``bm25aug adapt`` checks before any work: before it builds an index, makes pseudo-queries
or runs the teacher over the corpus (tens of seconds to hours), so that a run it would refuse
later is refused at once (docs/reliability.md: output paths are checked before any work starts).

- the output folder: not an input, not holding what bm25aug did not write, not a finished run;
- ``--resume``: the saved run's adapt settings can be read (``check_resumed_settings`` compares
  them), and its corpus is the one given now;
- ``--index``: a flat index with what adapt reads (``bm25aug.adapt.source.resolve``);
- ``--init-from``: a model folder that holds a torch model to train (not a packaged model, not a
  reweighter: ``bm25aug.model.loading.check_torch_model``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bm25aug.errors import UserError


def corpus_file(args: argparse.Namespace) -> Path | None:
    """The corpus file a ``--dataset`` or ``--corpus`` run reads (None: ``--index``, or none given)."""
    from bm25aug.data.registry import load_dataset

    if args.corpus:
        return Path(args.corpus)
    return load_dataset(args.dataset, args.data_dir).corpus_file if args.dataset else None


def check_before_work(args: argparse.Namespace, out: Path, settings_file: Path) -> None:
    """Every check of the output folder, of ``--init-from`` and of ``--resume`` that needs no corpus read."""
    from bm25aug.io import digest, refuse_foreign
    from bm25aug.lucene.index import INDEX_ROOT
    from bm25aug.outputs import check_outputs
    from bm25aug.train.run_folder import RUN_MARKER, check_resumed_corpus, earlier_run, refuse_finished

    file = corpus_file(args)
    inputs = {"--corpus": file if args.corpus else None, "--dataset": file.parent if args.dataset and file else None,
              "--index": args.index, "--init-from": args.init_from,
              # where the corpus's index is built (read and written): never inside the run folder
              "--index-root": None if args.index else (args.index_root or INDEX_ROOT)}
    check_outputs({"--output-dir": out}, inputs, folders=("--output-dir",))
    refuse_foreign(out, RUN_MARKER, "--output-dir", earlier_run)
    refuse_finished(out, args.resume)
    if args.init_from:
        check_init_from(args.init_from)
    if not args.resume:
        return
    trained = (out / "last").exists() or (out / "best").exists()  # an epoch saved (a run stopped before: restarts)
    if trained and not settings_file.is_file():
        raise UserError(f"--resume on {out}, which holds a run but no {settings_file.name}, so the adapt settings it "
                        f"was started with (its pseudo-queries, teacher and mix) cannot be checked against these; fix: "
                        f"start over in a new --output-dir")
    if file is not None and file.is_file():
        check_resumed_corpus(out, digest(file), [file])


def check_init_from(init_from: str) -> None:
    """``--init-from`` names a folder with a torch model to train (as training resolves it)."""
    from bm25aug.eval.checkpoints import resolve_checkpoint
    from bm25aug.model.loading import check_torch_model

    check_torch_model(resolve_checkpoint(init_from, "", transfer=False))
