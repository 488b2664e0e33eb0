"""Table 2 (§7.1): GAT-Lip vs GCNII on ogbn-arxiv (0%) and Cora/PubMed (100% missing vectors).

Also the report block of the §7.1 missing-vector claim, which reads Table 1's 100% columns beside Table 2.
The GCNII ogbn-arxiv entry is the public OGB leaderboard value (asterisk in the paper, no depth given);
ogbn-arxiv values are printed with two decimals.
"""

from __future__ import annotations

import pandas as pd

from lipgnn.results.artifact import Artifact
from lipgnn.results.artifacts.lipschitznorm import table1
from lipgnn.results.labels import NEEDS_OGB
from lipgnn.results.paper_table import PaperValue, TableSpec, build_cells, table_outputs
from lipgnn.results.paper_table import paper_value as _v
from lipgnn.results.reporting import LEGEND, Finding, cell_comparison, cells_table, paper_effect, runs_line
from lipgnn.results.stats import LEGEND as VERDICT_LEGEND
from lipgnn.results.verdict import Claim

COLUMNS: tuple[tuple[str, int], ...] = (("ogbn-arxiv", 0), ("cora", 100), ("pubmed", 100))
ROWS: tuple[str, ...] = ("GCNII", "GAT-Lip")
PAPER: dict[str, dict[tuple[str, int], PaperValue]] = {
    "GCNII": {
        ("ogbn-arxiv", 0): PaperValue(72.74, None, None, "72.74 (-)*"),
        ("cora", 100): _v(74.9, 0.4, 14),
        ("pubmed", 100): _v(73.9, 0.3, 16),
    },
    "GAT-Lip": {
        ("ogbn-arxiv", 0): PaperValue(74.62, 1.1, 8, "74.62 ± 1.1 (8)"),
        ("cora", 100): _v(75.3, 0.9, 11),
        ("pubmed", 100): _v(73.3, 1.4, 15),
    },
}
FOOTNOTE = "* reported result of the public OGB leaderboard (paper's Table 2)."

SPEC = TableSpec(
    "table2", "table2",
    "Table 2. GAT-Lip vs GCNII: accuracy (%) on ogbn-arxiv (0%) and Cora/PubMed (100% missing "
    "vectors); in parentheses the number of layers of the selected model.",
    ROWS, COLUMNS, "missing_rate", PAPER, FOOTNOTE,
)

SECTION = "§7.1"
QUOTE_MARGIN = "GAT-Lip can outperform GCNII in the 0% setting of Ogbn-arxiv with a margin of > 1.5%"
QUOTE_TIE = ("on the 100% settings of Cora and PubMed GAT-Lip and GCNII using a number of layers > 10 achieve "
             "similar accuracies without a clear lead")
MARGIN = 1.5       # points, the paper's own margin
# "Similar, without a clear lead": equivalence when the paired difference stays within ± this many points,
# the size the paper itself calls a clear lead on ogbn-arxiv.
TIE_BAND = 1.5
# "using a number of layers > 10": the depths the tie claim is about.
PAPER_MIN_DEPTH = 10


def _of(df: pd.DataFrame, experiment: str) -> pd.DataFrame:
    return df[df["experiment"] == experiment] if not df.empty else df


def table(df: pd.DataFrame) -> dict[str, str]:
    return table_outputs(df, SPEC)


def findings(df: pd.DataFrame) -> list[tuple[str, Finding]]:
    """(quote, finding) pairs: the ogbn-arxiv margin claim and the Cora/PubMed 100% tie claims, the latter at the
    paper's depths (more than ``PAPER_MIN_DEPTH`` layers: the cell selected among those depths only)."""
    runs = _of(df, "table2")
    by = {(c.row, c.column): c for c in build_cells(runs, SPEC)}
    deep = {(c.row, c.column): c for c in build_cells(runs, SPEC, deeper_than=PAPER_MIN_DEPTH)}
    out = []
    for column in SPEC.columns:
        label = SPEC.column_label(column)
        lip, gcnii = by[("GAT-Lip", label)], by[("GCNII", label)]
        if column[0] == "ogbn-arxiv":
            out.append((QUOTE_MARGIN, cell_comparison(f"{label}, GAT-Lip ahead of GCNII by > {MARGIN:g}", lip,
                                                      gcnii, margin=MARGIN)))
        else:
            # The paper's claim is about models deeper than 10 layers: judged there; the depths our validation
            # selects over the whole grid are named beside it.
            lip_deep, gcnii_deep = deep[("GAT-Lip", label)], deep[("GCNII", label)]
            depths = (f"at more than {PAPER_MIN_DEPTH} layers (the paper's claim): GAT-Lip {lip_deep.ours_depth}, "
                      f"GCNII {gcnii_deep.ours_depth} layers; over every depth validation selects GAT-Lip "
                      f"{lip.ours_depth}, GCNII {gcnii.ours_depth}")
            out.append((QUOTE_TIE, cell_comparison(f"{label}, GAT-Lip and GCNII without a clear lead", lip_deep,
                                                   gcnii_deep, tie_band=TIE_BAND, what=depths,
                                                   paper=paper_effect(lip, gcnii))))
    return out


def claims(df: pd.DataFrame) -> list[Claim]:
    return [Claim("lipschitznorm", SECTION, f"{quote} — {f.label}", f.verdict, f.reason, f.n_runs,
                  "#claim-missing-vector", p_value=f.p_value, n_seeds=f.n_seeds,
                  dirty=f.dirty, scale=f.scale, runs=f.runs) for quote, f in findings(df)]


def report(df: pd.DataFrame) -> dict[str, str]:
    """Tables 1–2 at 100% missing vectors (and Table 2's ogbn-arxiv): is GAT-Lip our best row?"""
    lines = ["Paper (§7.1): with 100% missing vectors GAT-Lip is best on Cora and PubMed (Table 1; GAT-Pn is best "
             "on CiteSeer), and GAT-Lip vs GCNII shows no clear lead on Cora/PubMed 100% while GAT-Lip leads "
             "ogbn-arxiv 0% by > 1.5 points (Table 2). Numbers below are the tables' cells "
             "(`results/tables/table{1,2}`), with the selected depth in parentheses.", ""]
    for spec, judged in ((table1.SPEC, table1.findings(df)), (SPEC, findings(df))):
        frame = _of(df, spec.experiment)
        cells = build_cells(frame, spec)
        columns = [c for c in spec.columns if c[1] == 100 or spec.name == "table2"]
        lines += [f"**{spec.title.split('.')[0]}** — {runs_line(frame, spec.experiment)}", ""]
        lines += cells_table(spec, cells, columns)
        lines += ["", "Verdicts:"]
        lines += [f"- “{quote}”: {f.label}: **{f.verdict}** — {f.reason}" for quote, f in judged]
        lines.append("")
    lines += [LEGEND, VERDICT_LEGEND, f"{NEEDS_OGB}: the OGB datasets are not mirrored here; download them into "
              "the data root and run the experiment. The 0% columns of Table 1 are in `results/tables/table1.md`."]
    return {"claim-missing-vector": "\n".join(lines)}


ARTIFACT = Artifact(name="table2", paper="lipschitznorm", title="Table 2: GAT-Lip vs GCNII",
                    experiments=("table2", "table1"), table=table, report=report, claims=claims)
