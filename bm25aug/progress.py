"""Progress bars on a terminal only, so that logs and CI output carry no progress-bar lines."""

from __future__ import annotations

import os
import sys

from tqdm import tqdm


def progress(iterable=None, *, disable: bool = False, **kwargs) -> tqdm:
    """``tqdm`` that shows itself only when stderr is a terminal (tqdm's ``disable=None``)."""
    return tqdm(iterable, disable=True if disable else None, **kwargs)


def quiet_libraries() -> None:
    """Off a terminal, silence the bars transformers and huggingface_hub draw themselves (e.g.
    "Loading weights"), which land in logs as carriage-return spam."""
    if sys.stderr.isatty():
        return
    if "huggingface_hub" not in sys.modules and "transformers" not in sys.modules:
        # Both read this when first imported (transformers' bars follow huggingface_hub's), so a
        # command that never loads a model never pays for importing them here.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        return
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as hf_logging

    disable_progress_bars()
    hf_logging.disable_progress_bar()
