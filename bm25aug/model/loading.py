"""One way to find and load any model, by what its folder records about itself.

``locate(name_or_path)`` is the only code that turns what a user passes into a model folder: a
packaged model's bare name (``"general"``: ``bm25aug.model.packaged.resolve``), a training run's
folder (its ``best/``), or a model folder as given. ``kind(folder)`` is the only code that says
what a folder holds, from its records, never from which other files it happens to have:

* a packaged model records itself in its manifest, ``package.json`` (written by
  ``bm25aug.model.package_build``): ``packaged``, a runtime-only int8 ONNX encoder;
* every other model folder records its kind in ``bm25aug_config.json``'s ``query_side``, written
  by whatever saved it: ``contextual`` (``QueryAugmenter``), ``static`` (``StaticQueryModel``) or
  ``reweighter`` (``Reweighter``). A config saved before the field existed is ``contextual``, the
  only kind there was: ``AugmenterConfig.load`` reads it so (its legacy path, the one place).

``load_encoder`` (search, export, the server) and ``load_model`` (training: torch models only)
then call the kind's loader (``ENCODERS``). A new model kind is a new ``query_side`` value (or
manifest), its class, and one entry there.
"""

from __future__ import annotations

from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.io import lock_held
from bm25aug.limits import RUNTIMES, check_choice
from bm25aug.model import packaged
from bm25aug.model.config import CONFIG_NAME, AugmenterConfig

PACKAGED = "packaged"
TORCH_KINDS = ("contextual", "static")  # what training loads, and load_model returns
BEST = "best"  # the model a training run selected on its dev set (bm25aug.train.callbacks.DevSelection)


def locate(name_or_path: str | Path) -> Path:
    """The model folder an argument names: the packaged model for its bare name, a training run's
    ``best/`` for the run's folder, else the folder as given. A folder that records no model is
    refused here, in one line."""
    folder = packaged.resolve(name_or_path)  # the bare name "general" is resolved here, and only here
    if packaged.is_packaged(folder):
        return folder  # its files are checked before any is read (check_packaged, check_files)
    if (folder / BEST).is_dir():
        folder = folder / BEST
    if not (folder / CONFIG_NAME).exists():
        raise UserError(f"{folder} is not a bm25aug checkpoint (no {CONFIG_NAME}); fix: pass the directory written "
                        f"by `python train.py` (e.g. checkpoints/<dataset>/best), or a packaged model's name "
                        f"({', '.join(packaged.names())})")
    return folder


def kind(folder: Path) -> str:
    """What ``folder`` (as ``locate`` gives it) holds: ``packaged``, or its config's ``query_side``."""
    return PACKAGED if packaged.is_packaged(folder) else AugmenterConfig.load(folder).query_side


def load_encoder(name_or_path: str | Path, runtime: str = "onnx-int8"):
    """The query encoder of a model (a folder, a run folder or a packaged model's name), for
    search and export: ``onnx-int8`` (default: fastest on CPU), ``torch-int8`` or ``torch-fp32``
    (the reference). Anything with ``encode``, ``tokenizer`` and ``config``."""
    check_choice("query encoder runtime", runtime, RUNTIMES)
    folder = locate(name_or_path)
    return ENCODERS[kind(folder)](folder, runtime)


def _packaged_encoder(folder: Path, runtime: str):
    from bm25aug.model.onnx_encoder import OnnxQueryEncoder

    return OnnxQueryEncoder.packaged(folder, runtime)  # its files are checked before any is read


def _reweighter(folder: Path, runtime: str):
    from bm25aug.model.reweighter import Reweighter

    return Reweighter.from_folder(folder)  # no encoder: numpy lookups and a tiny head, every runtime the same


def _static(folder: Path, runtime: str):
    return load_model(folder)  # a table lookup: nothing to export or quantize, every runtime is the same


def _contextual(folder: Path, runtime: str):
    from bm25aug.model.onnx_encoder import OnnxQueryEncoder, onnx_path

    model, source = _read(folder)
    if runtime == "torch-fp32":
        return model
    if runtime == "torch-int8":
        return model.quantized()
    return OnnxQueryEncoder(onnx_path(folder, model, source), model.config, model.tokenizer, model.target, model.path)


ENCODERS = {PACKAGED: _packaged_encoder, "reweighter": _reweighter, "static": _static, "contextual": _contextual}


def _read(checkpoint: Path, tries: int = 3):
    """The contextual model of ``checkpoint``; while a training run writes its folder, also the
    hash of the files it was read from, read again until the files did not change while read."""
    from bm25aug.model.onnx_encoder import export_source

    if not lock_held(checkpoint.parent):
        return load_model(checkpoint), None
    for _ in range(tries):
        try:
            source = export_source(checkpoint)
            model = load_model(checkpoint)
            if export_source(checkpoint) == source:
                return model, source
        except (UserError, OSError):
            pass  # replaced half-way through: read it again
    raise UserError(f"{checkpoint} kept changing while it was read (a training run is writing its folder); fix: "
                    f"wait for that run to end, or copy the model folder elsewhere and pass the copy")


def load_model(path: str | Path):
    """The torch model in the model folder ``path``: a ``QueryAugmenter`` or a ``StaticQueryModel``,
    in eval mode."""
    path = Path(path)
    check_torch_model(path)
    if not (path / CONFIG_NAME).exists():
        raise UserError(f"{path} is not a bm25aug checkpoint (no {CONFIG_NAME}); fix: pass the directory written "
                        f"by `python train.py` (e.g. checkpoints/<dataset>/best)")
    if kind(path) == "static":
        from bm25aug.model.static import StaticQueryModel

        return StaticQueryModel.from_pretrained(path)
    from bm25aug.model.augmenter import QueryAugmenter

    return QueryAugmenter.from_pretrained(path)


def check_torch_model(path: Path) -> None:
    """Refuse a folder that holds no torch model to load or train (a packaged model, a reweighter)
    before its weights are read: ``load_model`` and ``adapt``'s preflight (``--init-from``) check here."""
    if packaged.is_packaged(path):
        raise UserError(f"{path.name} is a packaged model: it ships only its int8 ONNX query encoder, which searches "
                        f"but cannot be trained or loaded in torch; fix: use its full model, {packaged.full_model(path)}")
    if (path / CONFIG_NAME).is_file() and kind(path) == "reweighter":
        raise UserError(f"{path} is a reweighter (static vectors and a head fitted to a contextual model), not a "
                        f"torch model: nothing in it trains; fix: search with it (load_encoder), or refit it: "
                        f"python -m bm25aug.train.reweighter --help")


def is_static(model) -> bool:
    """Whether ``model`` (a loaded model, or its config) is the static query side."""
    config = getattr(model, "config", model)
    return getattr(config, "query_side", "contextual") == "static"
