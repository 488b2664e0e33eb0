"""`make demo`: a short end-to-end comparison that needs no download.

GAT vs GAT-Lip on TREES (generated here), plus Cora 10-layer GAT vs GAT-Lip when a local copy of Cora
exists under the data root. Each run goes through the same path as `python train.py` and writes its
record under .cache/demo; the table is built from those records with pandas.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from lipgnn.cli import CONF_DIR
from lipgnn.results.store import load_records, variant_label
from lipgnn.train.run import run

RESULTS = Path(".cache/demo")

JOBS = [
    # TREES depth 2: the root must read 4 leaves 2 hops away; d+1 = 3 layers, hidden 32 (paper §7.2).
    *[["dataset=trees", "dataset.tree_depth=2", "dataset.num_trees=1000", "dataset.batch_size=32", "depth=3",
       "model.hidden=32", "model.dropout=0", "model.attn_dropout=0", "train.epochs=30", "train.lr=0.005",
       f"norm={n}"]
      for n in ("none", "lip")],
]
CORA = [["dataset=cora", "depth=10", "train.epochs=100", "train.lr=0.005", f"norm={n}"] for n in ("none", "lip")]


def cora_available() -> bool:
    root = Path(os.environ.get("LIPGNN_DATA", "data")) / "Cora" / "raw"
    return (root / "ind.cora.graph").exists()


def main() -> int:
    jobs = JOBS + (CORA if cora_available() else [])
    if not cora_available():
        print("(Cora not found under $LIPGNN_DATA: running TREES only; see README 'Datasets')")
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        for overrides in jobs:
            cfg = compose("config", overrides=["model=gat", "model.impl=fused", f"results_dir={RESULTS}",
                                               "experiment_name=demo", *overrides])
            run(cfg)
    df = load_records(RESULTS, "demo")
    df["variant"] = [variant_label(m, n, r) for m, n, r in zip(df.model, df.norm, df.residual, strict=True)]
    table = df.pivot_table(index=["dataset", "depth"], columns="variant",
                           values="best_test", aggfunc="mean") * 100
    print("\nTest accuracy (%) at the best-validation epoch (demo budget: 1 seed, short training):")
    print(table.round(1).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
