"""Every example script runs end to end in its smoke setting (PYMC_CRF_SMOKE=1, Agg backend)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
# Seconds per script: the smoke runs take ~20 s of CPU, but a fresh process also imports PyMC and
# loads (or, on a cold numba cache, compiles) the engines, which on a loaded machine takes minutes.
TIMEOUT = 900


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} >= {"quick_start.py", "loopy_graphs.py", "model_comparison.py",
                                      "semi_supervised.py", "hcrf_japanese_vowels.py",
                                      "conll2000_chunking.py", "conll2000_posterior.py", "ptb_pos.py",
                                      "weizmann_horses.py"}


# The examples' smoke runs (each a new process importing PyMC and compiling its models: 16-47 s
# with empty caches on 2 cores, docs/benchmarks.md, "Cold start") run in CI after the default
# suite (`pytest -m heavy_smoke`), which keeps the default run within its time budget.
HEAVY = {"quick_start", "loopy_graphs", "model_comparison", "semi_supervised",
         "hcrf_japanese_vowels", "conll2000_posterior", "conll2000_chunking", "ptb_pos",
         "weizmann_horses"}


@pytest.mark.parametrize("script", [pytest.param(p, marks=pytest.mark.heavy_smoke)
                                    if p.stem in HEAVY else p for p in EXAMPLES],
                         ids=[p.stem for p in EXAMPLES])
def test_example_runs_in_smoke_mode(script, tmp_path):
    env = dict(os.environ, PYMC_CRF_SMOKE="1", MPLBACKEND="Agg", PYMC_CRF_FIGURES=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if proc.stdout.startswith("skipped:"):  # real-data examples without ../shared/data
        pytest.skip(proc.stdout.strip())
    figures = sorted(tmp_path.glob(f"{script.stem}_*.png"))
    assert figures, f"{script.name} saved no figures"
    assert all(f.stat().st_size > 5000 for f in figures)  # not blank canvases
    assert "Traceback" not in proc.stderr
