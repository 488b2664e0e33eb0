"""The training path's start-up imports only what every run needs (issue #20, "Start-up").

``ogb`` (pandas and scikit-learn, ~7 s here), ``wandb`` and ``matplotlib`` are imported where they are used:
the OGB loaders, ``logger=wandb`` and the plotting of results. A module-level import of any of them in the
modules ``train.py`` loads would add seconds to every run, so a fresh interpreter checks what they pull in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFERRED = ("ogb", "wandb", "matplotlib", "sklearn")


def _imported_after(code: str) -> set[str]:
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(m for m in {DEFERRED!r} if m in sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_training_path_defers_slow_optional_imports() -> None:
    # What train.py's task function imports: the CLI, then the run (trainer, models, data, fused layers).
    assert _imported_after("import lipgnn.cli, lipgnn.runs, lipgnn.models, lipgnn.data") == set()


def test_the_probe_sees_an_import() -> None:
    # The check itself can fail: a module imported by the probed code is reported.
    assert _imported_after("import lipgnn.cli, matplotlib") == {"matplotlib"}
