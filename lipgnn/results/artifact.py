"""One paper artifact (table, figure, report blocks, claims) as a declarative record.

Each module ``lipgnn/results/artifacts/<paper>/<name>.py`` defines a module-level ``ARTIFACT``; the engine
finds them by walking the folders (files starting with ``_`` are helpers) and ``make tables|figures|report``
loop over that registry. Every callable
receives ONE DataFrame: the records of ``experiments`` (``lipgnn.store.load_records``) concatenated,
one row per record, with a ``diagnostics`` column (the free-form payload of diagnostic records) and a
``config`` column (the full config dict).

matplotlib is only named in a type annotation (string form), so importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import matplotlib.figure
    import pandas as pd

    from lipgnn.results.verdict import Claim


@dataclass(frozen=True)
class Artifact:
    """A paper artifact and how to build its outputs from run records."""

    name: str  # 'table3', 'gh_energy', 'kim_bounds': results/tables/<name>.<ext>, results/figures/<name>.{png,pdf}
    paper: str  # 'lipschitznorm' | 'guan_he' | 'kim'
    title: str  # one line
    experiments: tuple[str, ...]  # record folders under <results_dir>/runs/ it reads
    needs_history: bool = False  # load per-epoch histories (memory)
    table: Callable[[pd.DataFrame], dict[str, str]] | None = None  # {'csv','md','tex'}: exact file contents
    figure: Callable[[pd.DataFrame], matplotlib.figure.Figure] | None = None
    report: Callable[[pd.DataFrame], dict[str, str]] | None = None  # {auto-block name: markdown body}
    claims: Callable[[pd.DataFrame], list[Claim]] | None = None  # verdict objects (data, not sentences)
