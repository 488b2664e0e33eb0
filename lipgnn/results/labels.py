"""Names printed in tables, figures and the report: datasets, and the states of a cell without a number."""

from __future__ import annotations

OGB_DATASETS = frozenset({"ogbn-arxiv", "ogbn-proteins"})
DATASET_NAMES = {
    "cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed", "ogbn-arxiv": "ogbn-arxiv",
    "ogbn-proteins": "ogbn-proteins", "trees": "TREES",
}
DATASET_ORDER = ("cora", "citeseer", "pubmed", "ogbn-arxiv", "ogbn-proteins", "trees")

NOT_RUN = "not run"
NEEDS_OGB = "needs the OGB download"
DIVERGED = "diverged"
NOT_RUN_BUDGET = "not run in this budget"


def dataset_name(dataset: str) -> str:
    """The printed name of a dataset key (``pubmed`` -> ``PubMed``)."""
    return DATASET_NAMES.get(str(dataset).lower(), str(dataset))


def missing_text(dataset: str) -> str:
    """Why a dataset has no records: OGB sets need a download, the others were not run in this budget."""
    return NEEDS_OGB if str(dataset).lower() in OGB_DATASETS else NOT_RUN_BUDGET
