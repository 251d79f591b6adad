"""The int8 ONNX Runtime copy of a contextual model, and its query encoder (search's default).

The fp32 torch ``QueryAugmenter`` is the reference; training uses it. At search time a query is
encoded alone on one thread, where PyTorch's per-operator overhead dominates; ONNX Runtime runs
the same graph with int8 weights (dynamic quantization of every MatMul) at a fraction of the cost.
``tests/test_fast_encoder.py`` bounds how far its term lists drift from the fp32 ones.

The ONNX file is exported once per source (what it is made from, below), into
``~/.cache/bm25aug/onnx/<source>/``, and copied into the checkpoint's ``<checkpoint>/onnx/`` (the
cached one is read where the checkpoint is read-only, or a training run is writing it): a copied
model folder, or another checkpoint of the same weights, is not exported again. Its record (``bm25aug.io``'s
derived files) ties it to what it came from, the weights, the model config (the heads' settings
are in the graph) and the export recipe, and holds its checksum: new weights or settings, or a
changed, truncated or swapped ``.onnx``, and it is exported again. ``AugmentedSearcher``, ``bm25aug export`` and
the server load encoders only through ``bm25aug.model.loading.load_encoder``, so all use the same one.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import warnings
from pathlib import Path

import torch
from filelock import FileLock

from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT, atomic_dir, derived_ok, digest, lock_held, record_derived, source_key
from bm25aug.model.encoder import QueryEncoder
from bm25aug.model.augmenter import CONFIG_NAME, WEIGHTS_NAME, AugmenterConfig, QueryAugmenter
from bm25aug.model.packaged import ONNX_FILE, TOKENIZER_FILE, check_packaged, damaged

log = logging.getLogger(__name__)
ONNX_DIR = "onnx"
# Bumped whenever export_onnx changes what it writes, so that older exports are made again.
RECIPE = ("outputs w and a on live entries; eager attention, onnxruntime bert fusion without SkipLayerNormalization, "
          "dynamic int8 per channel")
# ONNX Runtime's fused residual + LayerNorm kernel: left out of the graph and of the session's own
# fusions. Since onnxruntime 1.30 its CPU kernel is a scalar loop, about 5x slower than the plain
# LayerNormalization kernel after an Add (12 of them cost a query ~0.45 ms;
# ``research/profile_encoder.py`` lists the operators).
UNFUSED = ["SkipLayerNormFusion"]
CACHE_DIR = CACHE_ROOT / "onnx"
# Exports the cache keeps (about 23 MB each for MiniLM): past this, the least recently used are
# removed after each new export. Every checkpoint that could copy one holds its own copy.
CACHE_ENTRIES = 16
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)  # a cache this user may read but not write
# ONNX Runtime's advice on every dynamic quantization (a warning on the root logger): about its own
# pre-processing tool, nothing the user can act on.
ADVICE = "Please consider to run pre-processing before quantization"


def export_source(checkpoint: Path) -> str:
    """What an export is made from: the weights, the model's settings, the encoder's shape and
    the export recipe."""
    return source_key("onnx", RECIPE, *(digest(checkpoint / name) for name in
                                        (WEIGHTS_NAME, CONFIG_NAME, Path("encoder") / "config.json")))


class _OutputsGraph(torch.nn.Module):
    """The model's forward pass as ONNX sees it: token ids and mask in, w and a out (the target
    turns them into terms, outside the graph, exactly as for the torch model). a is computed on
    the target's live entries only: the head's other rows (for flat, the ## pieces and stopwords,
    a quarter of the vocabulary) reach no index term, and the export folds them away."""

    def __init__(self, model: QueryAugmenter):
        super().__init__()
        self.model = model
        self.register_buffer("rows", torch.from_numpy(model.target.live), persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(input_ids, attention_mask, rows=self.rows)
        return out.token_weights, out.augmentation


def export_onnx(model: QueryAugmenter, folder: Path, source: str) -> Path:
    """Export ``model`` to ONNX, quantize its MatMuls to int8, and write both atomically."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    # An earlier export (its record, or an older release's source.json) is replaced; a folder of anything else is not.
    with atomic_dir(folder, (f"{ONNX_FILE}.source.json", "source.json"), what="an ONNX export of bm25aug") as tmp:
        sample = model.tokenize(["an example query for tracing"], ["feedback words"])
        # Plain (eager) attention traces to MatMuls that int8 quantization covers; SDPA does not.
        saved, model.encoder.config._attn_implementation = model.encoder.config._attn_implementation, "eager"
        try:
            with warnings.catch_warnings(), torch.inference_mode():
                warnings.simplefilter("ignore")  # tracer warnings about data-dependent shapes
                torch.onnx.export(_OutputsGraph(model.eval()), (sample["input_ids"], sample["attention_mask"]),
                                  str(tmp / "model.fp32.onnx"), input_names=["input_ids", "attention_mask"],
                                  output_names=["token_weights", "augmentation"], opset_version=17, dynamo=False,
                                  dynamic_axes={"input_ids": {0: "batch", 1: "tokens"},
                                                "attention_mask": {0: "batch", 1: "tokens"},
                                                "token_weights": {0: "batch", 1: "tokens"}, "augmentation": {0: "batch"}})
        finally:
            model.encoder.config._attn_implementation = saved
        # Fuse attention, layer norms and GELU into ONNX Runtime's BERT kernels, then quantize every
        # MatMul (and the fused attention) to int8 with one scale per output channel: one scale per
        # tensor ran ~5% faster but drifted twice as far from fp32 (tests/test_fast_encoder.py).
        config, fusions = model.encoder.config, FusionOptions("bert")
        fusions.enable_skip_layer_norm = fusions.enable_bias_skip_layer_norm = False  # see UNFUSED
        fused = optimize_model(str(tmp / "model.fp32.onnx"), model_type="bert", num_heads=config.num_attention_heads,
                               hidden_size=config.hidden_size, opt_level=1, optimization_options=fusions)
        fused.save_model_to_file(str(tmp / "model.fused.onnx"))
        with _without_advice():
            quantize_dynamic(str(tmp / "model.fused.onnx"), str(tmp / ONNX_FILE), weight_type=QuantType.QInt8,
                             per_channel=True, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        for name in ("model.fp32.onnx", "model.fused.onnx"):
            (tmp / name).unlink()
        record_derived(tmp / ONNX_FILE, source)
    return folder / ONNX_FILE


@contextlib.contextmanager
def _without_advice():
    """ONNX Runtime's ``ADVICE`` left out of the root logger while the block runs (other records pass)."""
    def other(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(ADVICE)

    root = logging.getLogger()
    root.addFilter(other)
    try:
        yield
    finally:
        root.removeFilter(other)


def onnx_session(path: Path, profile: bool = False):
    """An ONNX Runtime session for an export: one thread (latency is per query; batch search
    parallelizes Lucene instead), CPU, the fusions of ``UNFUSED`` off."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.enable_profiling, options.log_severity_level = profile, 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=UNFUSED)


class OnnxQueryEncoder(QueryEncoder):
    """The ``QueryEncoder`` of a ``QueryAugmenter``'s int8 ONNX export, run by ONNX Runtime on one thread."""

    batch_exact = False  # dynamic int8: one activation scale per batch

    def __init__(self, path: Path, config: AugmenterConfig, tokenizer, target, origin: Path | None):
        """``path``: the ONNX file; ``origin``: the model folder it stands for (``encoder.path``)."""
        self.session, self.onnx_path = onnx_session(path), Path(path)  # onnx_path: the file the session runs
        self.config, self.tokenizer, self.target, self.path = config, tokenizer, target, origin
        outputs = [o.name for o in self.session.get_outputs()]
        if config.use_augmentation and "augmentation" not in outputs:  # a graph cut to w (package_build.cut)
            raise UserError(f"{path} outputs only {', '.join(outputs)}, and its model's settings use a(q); fix: "
                            f"pass the model's own folder, whose settings say use_augmentation false")

    @classmethod
    def packaged(cls, folder: Path, runtime: str) -> "OnnxQueryEncoder":
        """A packaged model's encoder (``bm25aug.model.packaged``): its ONNX file, settings and
        tokenizer, with no torch model to read them from. Each file is checked against
        ``package.json`` before it is read; a file that passes and still does not load (one
        changed with its digest) is the same one-line error."""
        from transformers import AutoTokenizer

        from bm25aug.model.targets import make_target

        onnx = check_packaged(folder, runtime)
        config = _built(folder, CONFIG_NAME, lambda: AugmenterConfig.load(folder))
        tokenizer = _built(folder, TOKENIZER_FILE, lambda: AutoTokenizer.from_pretrained(folder, use_fast=True))
        target = _built(folder, TOKENIZER_FILE, lambda: make_target(tokenizer, config))
        return _built(folder, ONNX_FILE, lambda: cls(onnx, config, tokenizer, target, folder))  # its session

    def encode_batch(self, texts: list[str], feedback: list[str] | None = None) -> list[dict[str, float]]:
        if not texts:
            return []
        batch = self.target.batch(texts, feedback)
        return self.target.term_lists(batch, *self.outputs(batch))

    def outputs(self, batch) -> tuple:
        """The graph's w (B x L) and a(q) on the target's live entries (B x live) for a ``QueryBatch``;
        a(q) is None for a graph cut to w (a model without a(q): nothing of it is computed)."""
        out = self.session.run(None, {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask})
        return out[0], (out[1] if len(out) > 1 else None)


def _built(folder: Path, file: str, make):
    """``make()``, whose failure is the one-line error of a damaged packaged model naming ``file``."""
    try:
        return make()
    except Exception as e:  # whatever the tokenizer or ONNX Runtime raises on a file they cannot read
        why = str(e).split("; fix:")[0].strip().splitlines()
        raise damaged(folder, file, f"{type(e).__name__}: {why[0][:160] if why else 'no message'}") from None


def onnx_path(checkpoint: Path, model: QueryAugmenter, source: str | None = None) -> Path:
    """The int8 export of ``checkpoint`` (whose files hash to ``source``): its own, or the cache's
    copied into it, or one exported first into the cache when neither is whole and made from
    ``source``. A checkpoint that a training run is writing (its run folder's lock is held: best/
    may be replaced at any moment) reads the cache's, with nothing copied into it."""
    source = source or export_source(checkpoint)
    own, cached = checkpoint / ONNX_DIR, CACHE_DIR / source  # a file or a link at own is not ours to replace
    if derived_ok(own / ONNX_FILE, source):
        return own / ONNX_FILE
    with _source_lock(cached, source):  # one export of a source at a time; an eviction skips a source in use
        if not derived_ok(cached / ONNX_FILE, source):
            log.info("exporting %s to ONNX (int8) in %s", checkpoint, cached)
            export_onnx(model, cached, source)
            evict_exports(cached.parent, CACHE_ENTRIES, keep=source)
        try:
            os.utime(cached)  # used now: the eviction's order (the newest, so the last it would remove)
        except OSError as e:
            if e.errno not in UNWRITABLE:
                raise
        usable = os.access(checkpoint, os.W_OK) and (not own.exists() or own.is_dir()) and not own.is_symlink() \
            and not lock_held(checkpoint.parent)
        if not usable:
            return cached / ONNX_FILE
        return copy_export(cached, own, source)


@contextlib.contextmanager
def _source_lock(cached: Path, source: str):
    """The cache's lock of one source, held while it is exported, touched or copied. A cache this
    user can read but not write (its permissions, a read-only disk) takes none where it holds the
    export whole (nothing here can export into it or evict from it): the export is only read; one
    that lacks it is the error of the lock's write (the fix: write to a disk that is not read-only)."""
    lock = FileLock(str(cached.parent / f".{cached.name}.lock"))
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except OSError as e:
        if e.errno not in UNWRITABLE or not derived_ok(cached / ONNX_FILE, source):
            raise
        lock = None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def evict_exports(root: Path, entries: int, keep: str) -> list[str]:
    """Remove all but the ``entries`` most recently used exports under ``root`` (never ``keep``),
    each under its own lock, taken without waiting (one being exported, touched or copied now stays). Only a
    folder holding an export's record is removed: nothing else there is bm25aug's. Returns the
    sources removed."""
    folders = []
    for f in root.iterdir():  # atomic_dir's hidden temporary folders (".NAME.tmp...") are another's, in flight
        try:
            if not f.name.startswith(".") and f.name != keep and f.is_dir() and not f.is_symlink() \
                    and (f / f"{ONNX_FILE}.source.json").is_file():
                folders.append((f.stat().st_mtime, f))
        except OSError:  # removed meanwhile by another process's eviction
            continue
    folders.sort(key=lambda mf: mf[0], reverse=True)
    removed = []
    for _, folder in folders[max(entries - 1, 0):]:
        # Lock files stay (0 bytes each): a waiter holds the same file, and a new one would be a second lock.
        try:
            with FileLock(str(root / f".{folder.name}.lock"), timeout=0):
                shutil.rmtree(folder, ignore_errors=True)
        except TimeoutError:  # filelock's Timeout: in use now, so not the least recently used
            continue
        removed.append(folder.name)
    return removed


def copy_export(cached: Path, own: Path, source: str) -> Path:
    """The cached export and its record copied into a checkpoint's ``onnx/`` (atomically), so that
    the checkpoint's folder carries its export when it is copied or moved; the cached one is the
    checkpoint's when that copy cannot be made (a full disk: logged)."""
    record = f"{ONNX_FILE}.source.json"
    try:
        with atomic_dir(own, (record, "source.json"), what="an ONNX export of bm25aug") as tmp:
            for name in (ONNX_FILE, record):
                shutil.copyfile(cached / name, tmp / name)
    except (OSError, UserError) as e:  # a full disk, or a folder there that bm25aug did not write
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).split("; fix:")[0]
        log.warning("the export of %s could not be copied into %s (%s); it is read from %s", own.parent, own, why,
                    cached)
        return cached / ONNX_FILE
    return own / ONNX_FILE if derived_ok(own / ONNX_FILE, source) else cached / ONNX_FILE
