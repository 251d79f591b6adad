"""The benchmarks' own arithmetic (their timings are never tested: they print ratios in one run)."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_extrapolation_fits_a_line_through_every_size_and_never_prints_a_negative():
    scale = _load("scale")
    rows = [{"size": size, "build_s_flat": 1e-4 * size + 2, "p50_ms_augmented": p50}
            for size, p50 in ((10_000, 4.0), (100_000, 9.0), (1_000_000, 3.0))]
    line = scale.extrapolate(rows)
    assert "flat build 0.6 h" in line  # 1e-4 s a passage: 2,104 s at 21M
    assert "augmented p50 not extrapolated" in line and not re.search(r"-\d", line)
    assert "no extrapolation" in scale.extrapolate(rows[1:])  # two points are not a line to trust
