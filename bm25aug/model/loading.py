"""One way to load any model folder, whatever its query side: ``load_model(path)``.

A folder's ``bm25aug_config.json`` says which model it holds (``query_side``): the contextual
``QueryAugmenter`` (an encoder reads the query) or the ``StaticQueryModel`` (a learned table, no
encoder at query time). Training, the callbacks and the search runtimes load through here.
"""

from __future__ import annotations

from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.model.config import CONFIG_NAME, AugmenterConfig


def load_model(path: str | Path):
    """The model in ``path``: a ``QueryAugmenter`` or a ``StaticQueryModel``, in eval mode."""
    path = Path(path)
    check_torch_model(path)
    if not (path / CONFIG_NAME).exists():
        raise UserError(f"{path} is not a bm25aug checkpoint (no {CONFIG_NAME}); fix: pass the directory written "
                        f"by `python train.py` (e.g. checkpoints/<dataset>/best)")
    if AugmenterConfig.load(path).query_side == "static":
        from bm25aug.model.static import StaticQueryModel

        return StaticQueryModel.from_pretrained(path)
    from bm25aug.model.augmenter import QueryAugmenter

    return QueryAugmenter.from_pretrained(path)


def check_torch_model(path: Path) -> None:
    """Refuse a folder that holds no torch model to load or train (a packaged model, a reweighter)
    before its weights are read: ``load_model`` and ``adapt``'s preflight (``--init-from``) check here."""
    from bm25aug.model import packaged

    if packaged.is_packaged(path):
        raise UserError(f"{path.name} is a packaged model: it ships only its int8 ONNX query encoder, which searches "
                        f"but cannot be trained or loaded in torch; fix: use its full model, {packaged.full_model(path)}")
    if is_reweighter(path):
        raise UserError(f"{path} is a reweighter (static vectors and a head fitted to a contextual model), not a "
                        f"torch model: nothing in it trains; fix: search with it (load_encoder), or refit it: "
                        f"python -m bm25aug.train.reweighter --help")


def is_reweighter(folder: str | Path) -> bool:
    """Whether ``folder`` holds a reweighter (``bm25aug.model.reweighter``)."""
    folder = Path(folder)
    return (folder / CONFIG_NAME).is_file() and AugmenterConfig.load(folder).query_side == "reweighter"


def is_static(model) -> bool:
    """Whether ``model`` (or its config) is the static query side."""
    config = getattr(model, "config", model)
    return getattr(config, "query_side", "contextual") == "static"
