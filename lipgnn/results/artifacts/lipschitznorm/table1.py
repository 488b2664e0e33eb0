"""Table 1 (§7.1): accuracy in the missing-vector setting (0% / 100% of non-train features erased).

The paper's values are copied from its Table 1 (mean ± std, and the depth of the selected model); nothing we
compute is derived from them.
"""

from __future__ import annotations

import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.paper_table import PaperValue, TableSpec, build_cells, table_outputs
from lipgnn.results.paper_table import paper_value as _v
from lipgnn.results.reporting import claim_verdict, spec_findings
from lipgnn.results.verdict import Claim

COLUMNS: tuple[tuple[str, int], ...] = (
    ("cora", 0), ("cora", 100), ("citeseer", 0), ("citeseer", 100), ("pubmed", 0), ("pubmed", 100),
)
ROWS: tuple[str, ...] = ("GCN", "GGNN", "GAT", "GAT-Pn", "GAT-Lip")
PAPER: dict[str, dict[tuple[str, int], PaperValue]] = {
    "GCN": {
        ("cora", 0): _v(82.5, 1.2, 2), ("cora", 100): _v(58.8, 3.5, 2),
        ("citeseer", 0): _v(69.5, 2.1, 2), ("citeseer", 100): _v(31.3, 2.7, 2),
        ("pubmed", 0): _v(77.9, 1.4, 2), ("pubmed", 100): _v(44.9, 4.4, 2),
    },
    "GGNN": {
        ("cora", 0): _v(81.8, 2.0, 2), ("cora", 100): _v(68.2, 2.5, 6),
        ("citeseer", 0): _v(68.5, 1.9, 3), ("citeseer", 100): _v(40.5, 1.4, 5),
        ("pubmed", 0): _v(78.4, 2.1, 4), ("pubmed", 100): _v(56.6, 1.9, 4),
    },
    "GAT": {
        ("cora", 0): _v(82.3, 2.3, 2), ("cora", 100): _v(65.3, 2.1, 4),
        ("citeseer", 0): _v(69.3, 1.6, 2), ("citeseer", 100): _v(42.8, 1.6, 4),
        ("pubmed", 0): _v(77.4, 0.5, 6), ("pubmed", 100): _v(63.1, 0.7, 4),
    },
    "GAT-Pn": {
        ("cora", 0): _v(78.8, 0.6, 4), ("cora", 100): _v(73.8, 1.2, 12),
        ("citeseer", 0): _v(67.2, 0.8, 4), ("citeseer", 100): _v(51.7, 1.1, 10),
        ("pubmed", 0): _v(77.6, 1.6, 8), ("pubmed", 100): _v(70.4, 1.1, 12),
    },
    "GAT-Lip": {
        ("cora", 0): _v(83.1, 0.5, 5), ("cora", 100): _v(75.3, 0.9, 11),
        ("citeseer", 0): _v(69.1, 1.5, 3), ("citeseer", 100): _v(50.9, 1.9, 9),
        ("pubmed", 0): _v(78.9, 1.3, 5), ("pubmed", 100): _v(73.3, 1.4, 15),
    },
}

SPEC = TableSpec(
    "table1", "table1",
    "Table 1. Classification accuracy (%) in the missing-vector setting (0% / 100% of the non-train "
    "node features erased); in parentheses the number of layers of the selected model.",
    ROWS, COLUMNS, "missing_rate", PAPER,
)

SECTION = "§7.1"
QUOTE = "GAT-Lip outperforms the other methods in the 100% missing-vector setting (Cora, PubMed; Table 1)"


def table(df: pd.DataFrame) -> dict[str, str]:
    return table_outputs(df, SPEC)


def claims(df: pd.DataFrame) -> list[Claim]:
    """Per 100% column: is GAT-Lip our best row?"""
    cells = build_cells(df[df["experiment"] == SPEC.experiment] if not df.empty else df, SPEC)
    columns = [c for c in SPEC.columns if c[1] == 100]
    return [Claim("lipschitznorm", SECTION, f"{QUOTE} — {f.label}", claim_verdict(f.verdict), f.reason, f.n_runs,
                  "#claim-missing-vector") for f in spec_findings(SPEC, cells, columns)]


ARTIFACT = Artifact(name="table1", paper="lipschitznorm", title="Table 1: the missing-vector setting",
                    experiments=("table1",), table=table, claims=claims)
