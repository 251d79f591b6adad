"""What happens around the training loop, one job per callback (as Hugging Face's and
sentence-transformers' ``TrainerCallback``\\ s): the weight average, dev evaluation with best-model
selection, the curves, the significance check, the augmentation gate and the model card.

``default_callbacks`` is what ``train.py`` runs; research code passes its own list to ``Trainer``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from dataclasses import asdict, replace
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from bm25aug.io import atomic_write_bytes, write_json
from bm25aug.model.augmenter import CONFIG_NAME, AugmenterConfig, QueryAugmenter
from bm25aug.model.card import card_text, finished_now, write_card
from bm25aug.model.loading import is_static, load_model
from bm25aug.train.arguments import TrainConfig

if TYPE_CHECKING:
    from bm25aug.train.trainer import Trainer

log = logging.getLogger(__name__)


class TrainerCallback:
    """Hooks the trainer calls, in list order. ``state`` is the trainer's progress (``epoch``,
    ``step``, ``best``), saved in last/ for --resume; ``record`` is an epoch's log line."""

    def on_train_begin(self, trainer: Trainer, history: list[dict]) -> None: ...
    def on_step_end(self, trainer: Trainer) -> None: ...
    def on_evaluate(self, trainer: Trainer, record: dict, state: dict) -> None: ...
    def on_epoch_end(self, trainer: Trainer, history: list[dict]) -> None: ...
    def on_train_end(self, trainer: Trainer, result: dict) -> None: ...

    def served_weights(self, model: nn.Module) -> contextlib.AbstractContextManager:
        """A context in which ``model`` holds the weights dev checks and best/ see."""
        return contextlib.nullcontext()

    def state_dict(self) -> dict | None:
        return None

    def load_state_dict(self, state: dict) -> None: ...


class WeightAverage(TrainerCallback):
    """An exponential moving average of the model's parameters, updated after each step, with the
    usual warm-up of the decay (``min(decay, (1 + t) / (10 + t))`` at update t), so that the first
    epochs do not hold on to the initial weights. Dev checks and best/ see the average."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay, self.updates = decay, 0
        self.shadow = {name: p.detach().clone() for name, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.updates += 1
        keep = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for name, p in model.named_parameters():
            self.shadow[name].lerp_(p.detach(), 1 - keep)

    def on_step_end(self, trainer: Trainer) -> None:
        self.update(trainer.model)

    @contextlib.contextmanager
    def served_weights(self, model: nn.Module):
        """The model holds the averaged weights inside the block, its own ones again after it."""
        params = dict(model.named_parameters())
        raw = {name: p.detach().clone() for name, p in params.items()}
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(self.shadow[name])
        try:
            yield
        finally:
            with torch.no_grad():
                for name, p in params.items():
                    p.copy_(raw[name])

    def state_dict(self) -> dict:
        return {"updates": self.updates, "shadow": self.shadow}

    def load_state_dict(self, state: dict) -> None:
        self.updates = state["updates"]
        for name, tensor in state["shadow"].items():
            self.shadow[name].copy_(tensor)


class DevSelection(TrainerCallback):
    """Epoch 0 is the reference, plain BM25 on the same dev queries; each epoch's dev score goes
    into its log line, and a better one than any before is saved as best/."""

    def on_train_begin(self, trainer: Trainer, history: list[dict]) -> None:
        if not history:
            history.append({"epoch": 0, "step": 0, **trainer.evaluate_dev(baseline=True)})

    def on_evaluate(self, trainer: Trainer, record: dict, state: dict) -> None:
        record.update(trainer.evaluate_dev())
        if record["dev_metric"] > state["best"]:
            state["best"] = record["dev_metric"]
            trainer.model.save_pretrained(trainer.out / "best")


class Curves(TrainerCallback):
    """``curves.png``: training loss and dev metric per epoch, redrawn after each."""

    def on_epoch_end(self, trainer: Trainer, history: list[dict]) -> None:
        plot_curves(history, trainer.out / "curves.png")


class SignificanceCheck(TrainerCallback):
    """Keep best/ only when it beats plain BM25 on the dev queries (a paired one-sided t-test over
    per-query scores at ``level``); else best/ becomes plain BM25 (w ≡ 1, a ≡ 0), so that a model
    that learned nothing is never served as if it had. The outcome goes to ``selection.json``
    and ``result["selection"]``."""

    def __init__(self, level: float):
        self.level = level

    def on_train_end(self, trainer: Trainer, result: dict) -> None:
        from scipy.stats import ttest_rel

        best, saved = trainer.out / "best", trainer.out / "selection.json"
        if not (best / CONFIG_NAME).exists():
            return
        model = load_model(best)
        if not (model.config.use_weights or model.config.use_augmentation):
            result["selection"] = json.loads(saved.read_text()) if saved.exists() else None  # plain BM25 already
            return
        name, base, _ = trainer.dev_scores(None)
        _, got, _ = trainer.dev_scores(model.to(trainer.device))
        qids = sorted(base)
        differs = any(got[q] != base[q] for q in qids)
        p = float(ttest_rel([got[q] for q in qids], [base[q] for q in qids], alternative="greater").pvalue) \
            if differs else 1.0
        selection = {"metric": name, "queries": len(qids), "model": float(np.mean([got[q] for q in qids])),
                     "bm25": float(np.mean([base[q] for q in qids])), "p_value": p,
                     "significance": self.level, "kept": p < self.level}
        write_json(saved, selection)
        result["selection"] = selection
        if selection["kept"]:
            log.info("best/ beats plain BM25 on dev (%s, one-sided p = %.2g)", name, p)
            return
        log.warning("best/ does not beat plain BM25 on dev significantly (%s, one-sided p = %.2g >= %g): best/ is "
                    "now plain BM25 (w = 1, a = 0)", name, p, self.level)
        model.config = replace(model.config, use_weights=False, use_augmentation=False)
        model.save_pretrained(best)


class GateCalibration(TrainerCallback):
    """Set best/'s ``aug_gate`` at ``quantile`` of the training queries' counts (``calibrate_gate``)."""

    def __init__(self, quantile: float):
        self.quantile = quantile

    def on_train_end(self, trainer: Trainer, result: dict) -> None:
        best = trainer.out / "best"
        if not (best / CONFIG_NAME).exists():
            return
        model = load_model(best)
        if not model.config.use_augmentation or is_static(model):
            return  # a ≡ 0, or a table whose expansion lists are short by design: nothing to gate
        examples = trainer.examples
        gate = calibrate_gate(model, [e.query for e in examples], self.quantile, [e.feedback for e in examples])
        if model.config.aug_gate != gate:
            model.config.aug_gate = gate
            model.save_pretrained(best)
        log.info("augmentation gate: a(q) is used for queries with at most %d non-zero entries "
                 "(quantile %.2f of the training queries)", gate, self.quantile)


class ModelCard(TrainerCallback):
    """best/README.md: the model's card with this run's recipe, data, dev selection and metrics."""

    def on_train_end(self, trainer: Trainer, result: dict) -> None:
        best = trainer.out / "best"
        if not (best / CONFIG_NAME).exists():
            return
        history = result["history"]
        recipe = {k: v for k, v in asdict(trainer.config).items() if k not in ("output_dir", "threads", "device")}
        top = max(history[1:], key=lambda h: h["dev_metric"], default=history[0])
        how = json.loads((trainer.out / "dev_split.json").read_text())["how"]
        layers = 0 if is_static(trainer.model) else trainer.model.encoder.config.num_hidden_layers
        write_card(best, card_text(AugmenterConfig.load(best), layers, {
            "dataset": trainer.name, "examples": len(trainer.examples), "finished": finished_now(),
            "dev_how": how, "dev_queries": sum(len(c.dev.queries) for c in trainer.corpora),
            "metric": history[0]["dev_metric_name"],
            "best": top["dev_metric"], "bm25": history[0]["dev_metric"], "selection": result.get("selection"),
            "recipe": json.dumps(recipe, indent=2)}))


def default_callbacks(config: TrainConfig, model: nn.Module) -> list[TrainerCallback]:
    """The callbacks ``config`` asks for, in the order they must run."""
    callbacks: list[TrainerCallback] = [WeightAverage(model, config.ema_decay)] if config.ema_decay else []
    callbacks += [DevSelection(), Curves()]
    if config.significance:
        callbacks.append(SignificanceCheck(config.significance))
    if config.gate_quantile:
        callbacks.append(GateCalibration(config.gate_quantile))
    return [*callbacks, ModelCard()]


@torch.no_grad()
def calibrate_gate(model: QueryAugmenter, queries: list[str], quantile: float, feedback: list[str] | None = None) -> int:
    """The ``quantile`` of the gate's count (``Target.gate_counts``) over ``queries`` (each with
    its ``feedback``, for a learned-feedback model): the most terms the model proposes for queries
    like those it was trained on (at least 1)."""
    counts = []
    for lo in range(0, len(queries), 64):
        # a(q) needs no term occurrences (no Lucene analysis)
        enc = model.tokenize(queries[lo:lo + 64], None if feedback is None else feedback[lo:lo + 64])
        out = model(enc["input_ids"], enc["attention_mask"])
        counts.extend(model.target.gate_counts(model.target.live_part(out.augmentation).numpy()).tolist())
    return max(1, int(math.ceil(np.quantile(counts, quantile)))) if counts else 0


def plot_curves(history: list[dict], path: Path) -> None:
    """Training loss and dev metric per epoch, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    trained = [h for h in history if "train_loss" in h]
    ax1.plot([h["epoch"] for h in trained], [h["train_rank"] for h in trained], "o-", label="contrastive")
    ax1.plot([h["epoch"] for h in trained], [h["train_loss"] for h in trained], "s--", label="total (with λ·L1)")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("training loss")
    ax1.legend()
    ax2.plot(epochs, [h["dev_metric"] for h in history], "o-", color="C2")
    ax2.set_xlabel("epoch (0: plain BM25)")
    ax2.set_ylabel(f"dev {history[0]['dev_metric_name']}")
    ax3 = ax2.twinx()
    ax3.plot(epochs, [h["dev_aug_terms"] for h in history], "x:", color="C3")
    ax3.set_ylabel("added terms / query", color="C3")
    fig.tight_layout()
    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
