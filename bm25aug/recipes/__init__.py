"""Named training recipes, as data: ``<name>.yaml`` holds a description and the settings it changes
(and, for a model trained on several corpora, the ``datasets`` it trains on).

``python train.py --dataset X`` starts from ``TrainConfig``'s defaults (the small-set preset, tuned
on SciFact's train slice), applies the recipe named after the dataset when there is one, then
``--recipe NAME`` when given, then the flags. ``first-release`` also tells what a run folder or model
config saved before a setting existed meant by leaving it out.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

from bm25aug.errors import UserError

RECIPE_DIR = Path(__file__).parent
LEGACY = "first-release"


def names() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


@cache
def _read(name: str) -> dict:
    path = RECIPE_DIR / f"{name}.yaml"
    if not path.exists():
        raise UserError(f"unknown recipe {name!r}; fix: use one of {', '.join(names())}")
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or not isinstance(raw.get("settings"), dict) or "description" not in raw:
        raise UserError(f"{path} needs a 'description' and a 'settings' mapping; fix: restore it from git")
    return raw


def settings(name: str) -> dict:
    """The settings recipe ``name`` changes (a copy)."""
    return dict(_read(name)["settings"])


def description(name: str) -> str:
    return " ".join(str(_read(name)["description"]).split())


def datasets(name: str) -> list[str]:
    """The training datasets recipe ``name`` names (``datasets:``, for multi-corpus recipes), if any."""
    return [str(d) for d in _read(name).get("datasets") or []]


def for_dataset(dataset: str) -> str | None:
    """The recipe named after ``dataset``, if there is one."""
    return dataset if (RECIPE_DIR / f"{dataset}.yaml").exists() else None
