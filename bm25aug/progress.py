"""Progress bars on a terminal only, so that logs and CI output carry no progress-bar lines."""

from __future__ import annotations

from tqdm import tqdm


def progress(iterable=None, *, disable: bool = False, **kwargs) -> tqdm:
    """``tqdm`` that shows itself only when stderr is a terminal (tqdm's ``disable=None``)."""
    return tqdm(iterable, disable=True if disable else None, **kwargs)
