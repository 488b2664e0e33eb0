"""The floor of a scored split: the accuracy of a model that learnt nothing beyond the class prior.

A verdict is "not comparable" when both compared arms sit within ``verdict.FLOOR_MARGIN`` of it
(docs/verdicts.md). The report reads records only, so the floors of the Planetoid public splits are declared
here as the majority class's count over the split's size; ``tests/test_floors.py`` recounts them from the
datasets wherever ``$LIPGNN_DATA`` holds them. Alon & Yahav's TREES-NeighborsMatch at tree depth d has 2^d
balanced classes (one per leaf label), so its floor is chance, 2^−d.
"""

from __future__ import annotations

import math

#: (dataset, split) → (nodes of the split's majority class, nodes of the split), Planetoid public split; "all":
#: every node, the floor of a seeded random split (``dataset.split=random``), whose splits draw the graph's shares.
MAJORITY: dict[tuple[str, str], tuple[int, int]] = {
    ("cora", "all"): (818, 2708), ("citeseer", "all"): (701, 3327), ("pubmed", "all"): (7875, 19717),
    ("cora", "train"): (20, 140), ("cora", "val"): (158, 500), ("cora", "test"): (319, 1000),
    ("citeseer", "train"): (20, 120), ("citeseer", "val"): (116, 500), ("citeseer", "test"): (231, 1000),
    ("pubmed", "train"): (20, 60), ("pubmed", "val"): (208, 500), ("pubmed", "test"): (413, 1000),
}


def floor(dataset: str, split: str = "test", tree_depth: float | None = None) -> float | None:
    """The floor of ``split`` of ``dataset`` as a fraction (None when not declared): TREES at ``tree_depth``,
    else the majority-class share of a Planetoid public split."""
    name = str(dataset).lower()
    if name == "trees" or (tree_depth is not None and math.isfinite(float(tree_depth))):
        return 2.0 ** -int(tree_depth) if tree_depth is not None and math.isfinite(float(tree_depth)) else None
    counts = MAJORITY.get((name, split))
    return counts[0] / counts[1] if counts else None
