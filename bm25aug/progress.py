"""Progress bars on a terminal only, so that logs and CI output carry no progress-bar lines."""

from __future__ import annotations

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
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as hf_logging

    disable_progress_bars()
    hf_logging.disable_progress_bar()
