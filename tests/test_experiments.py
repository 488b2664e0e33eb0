"""A tiny version of every experiment, end to end: sweep expansion → runs → make tables / make figures.

The sweeps are expanded by the same code as ``lipgnn sweep-status`` (Hydra's parser and BasicSweeper) and each
job is run through ``lipgnn.runs.run`` exactly as ``train.py -m`` would run it, with 1–2 epochs and tiny widths.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pandas as pd
import pytest
from conftest import compose_cfg, run_script
from omegaconf import OmegaConf

from lipgnn.identity import run_id
from lipgnn.models.builder import resolve_impl
from lipgnn.runs import run
from lipgnn.sweep import sweep_jobs

TINY = ["budget=cpu", "train.epochs=2", "model.hidden=8", "log.progress=false"]
EXPERIMENTS = {
    "table1": ["dataset=cora", "depth=2", "seed=0"],                                  # 5 variants x 2 rates
    "table2": ["dataset=cora", "depth=2", "seed=0"],                                  # GCNII, GAT-Lip
    "table3": ["dataset=cora", "depth=15", "train.lr=0.005", "dropout=none", "seed=0,1"],  # 4 variants x 2 seeds
    "fig2": ["depth=3", "train.epochs=2", "seed=0"],                                  # GAT, GAT-Lip
    "fig3": ["depth=2", "seed=0"],
    "fig4": ["depth=2", "train.lr=0.005", "seed=0", "dropout=default"],  # the 1000-epoch extra: the same runs
    "fig5": ["dataset.tree_depth=2", "dataset.num_trees=64", "variant=gcn,gin_pn,ggnn,gat,gat_pn,gat_lip", "seed=11"],
    "fig6": ["dataset=cora", "depth=2", "train.lr=0.005", "variant=gat,gat_lip,gt_ln,gt_pn", "seed=0"],
    "fig6_protocol": ["depth=2", "seed=0", "variant=gt,gt_lip,gt_lip_reference"],  # GT, GT-Lip (eq. 19, authors')
}


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import DATA_ROOT

    if DATA_ROOT is None:
        pytest.skip("Planetoid files absent")
    results = tmp_path_factory.mktemp("experiments")
    for experiment, overrides in EXPERIMENTS.items():
        for job in sweep_jobs(experiment, [*TINY, *overrides]):
            run(compose_cfg([*job, f"results_dir={results}"]))
    return results


def test_every_experiment_ran_into_its_own_folder(tiny_results: Path) -> None:
    counts = {p.name: len(list(p.glob("*.json"))) for p in (tiny_results / "runs").iterdir()}
    assert counts == {"table1": 10, "table2": 2, "table3": 8, "fig2": 2, "fig3": 2, "fig4": 2, "fig5": 6, "fig6": 4,
                      "fig6_protocol": 3}


def test_make_tables_and_figures_produce_every_file(tiny_results: Path, tmp_path: Path) -> None:
    for script in ("make_tables", "make_figures"):
        out = run_script(script, "--results-dir", str(tiny_results))
        assert out.returncode == 0, out.stderr
    expected = [f"tables/table{i}.{ext}" for i in (1, 2, 3) for ext in ("md", "tex", "csv")]
    expected += [f"figures/fig{i}.{ext}" for i in range(2, 7) for ext in ("png", "pdf")]
    for name in expected:
        assert (tiny_results / name).stat().st_size > 0, name


def test_a_table_cell_equals_the_records_it_came_from(tiny_results: Path) -> None:
    from lipgnn.results.engine import make_tables
    from lipgnn.store import load_records

    make_tables(tiny_results)
    cells = pd.read_csv(tiny_results / "tables" / "table3.csv")
    cell = cells[(cells.row == "GAT-Lip") & (cells.column == "Cora 15 layers")].iloc[0]
    df = load_records(tiny_results, "table3")
    runs = df[(df.model == "gat") & (df.norm == "lip") & (~df.residual.astype(bool))]
    tests = [100 * v for v in runs.best_test]  # one configuration, two seeds: test at the best-val epoch
    assert cell.n_runs == 2 == len(tests)
    assert cell.ours_mean == pytest.approx(round(statistics.mean(tests), 1), abs=0.051)
    assert cell.ours_std == pytest.approx(round(statistics.stdev(tests), 1), abs=0.051)
    assert cell.paper == "79.4 ± 0.7"
    # table1 shows the selected depth in parentheses and the paper's value beside ours
    table1 = (tiny_results / "tables" / "table1.md").read_text()
    assert "(2)" in table1 and "75.3 ± 0.9 (11)" in table1


@pytest.mark.parametrize("experiment", ["table3", "fig3", "fig4", "fig6", "fig6_protocol", "fig6_nonlocal",
                                        "depth_energy", "gh_energy"])
def test_experiments_pick_the_path_by_device_and_run_fused_on_cpu(experiment: str) -> None:
    """Every job says model.impl=auto: on CPU the fused path their committed records ran (so `train.py -m
    experiment=X budget=cpu` reruns them as they ran), on a GPU PyG's layers below 1M edges a step, where those
    are faster (results/bench/cuda_h100_6ce21b9/)."""
    jobs = sweep_jobs(experiment, ["budget=cpu"])
    for job in (jobs[0], jobs[-1]):
        cfg = compose_cfg(job)
        assert cfg.model.impl == "auto"
        assert resolve_impl(cfg.model.impl, cfg.model.name, "cpu") == "fused"
        assert resolve_impl(cfg.model.impl, cfg.model.name, "cuda", 88_648) == "pyg"  # PubMed on a GPU
    assert compose_cfg(["variant=gat_lip"]).model.impl == "auto"


def test_the_protocol_check_trains_as_the_authors_code_does() -> None:
    """docs/reference.md: lr 0.001 for GT, ReduceLROnPlateau on val loss (factor 0.1, patience 10), 1000 epochs,
    the last epoch's test accuracy; its records go to their own folder, out of Fig. 6's grid."""
    jobs = [job for job in sweep_jobs("fig6_protocol", ["budget=cpu"]) if "variant=gt_lip_ln" not in job]
    for job in jobs:
        cfg = compose_cfg(job)
        assert cfg.experiment_name == "fig6_protocol" and cfg.model.name == "gt" and cfg.depth == 30
        train = cfg.train
        assert (train.lr, train.epochs, train.scheduler, train.selection) == (0.001, 1000, "plateau", "last")
        assert (train.plateau_mode, train.plateau_factor, train.plateau_patience) == ("min", 0.1, 10)
        assert (cfg.model.dropout, cfg.model.attn_dropout) == (0.5, 0.3)
    norms = sorted((cfg.norm.name, cfg.norm.get("formula")) for cfg in map(compose_cfg, jobs))
    assert norms == [("lip", "paper")] * 5 + [("lip", "reference")] * 5 + [("none", None)] * 5


def test_fig4_at_the_papers_epochs_is_an_extra_of_its_grid_cheap_depths_first() -> None:
    """conf/grid/fig4_cpu.yaml's extra: PubMed 100%, depths {2,5,10,15} x GAT, GAT-Lip x lr {0.005, 0.001} x dropout
    {authors', none} x seeds 0-4 = 160 runs of 1000 epochs, launched depth by depth from the shallowest, after the
    200-epoch main sweep."""
    jobs = sweep_jobs("fig4", ["budget=cpu"])
    long = [job for job in jobs if "train.epochs=1000" in job]
    assert len(long) == 4 * 2 * 2 * 2 * 5 and jobs[-len(long):] == long
    depths = [int(next(o for o in job if o.startswith("depth=")).split("=")[1]) for job in long]
    assert depths == sorted(depths) and depths[0] == 2 and depths[-1] == 15
    values = {key: {o.split("=", 1)[1] for job in long for o in job if o.startswith(f"{key}=")}
              for key in ("variant", "train.lr", "dropout", "seed")}
    assert values == {"variant": {"gat", "gat_lip"}, "train.lr": {"0.005", "0.001"}, "dropout": {"default", "none"},
                      "seed": {"0", "1", "2", "3", "4"}}
    for job in (long[0], long[-1]):
        cfg = compose_cfg(job)
        assert (cfg.dataset.name, cfg.dataset.missing_rate, cfg.train.epochs) == ("pubmed", 100, 1000)
        assert cfg.train.checkpoint_every == 100
        dropout = "dropout=none" in job
        assert (cfg.model.dropout, cfg.model.attn_dropout) == ((0.0, 0.0) if dropout else (0.6, 0.3))
        assert cfg.train.lr in (0.005, 0.001) and cfg.model.impl == "auto"
    # The 200-epoch main sweep beside it: the file's own epochs.
    short = jobs[:-len(long)]
    assert len(short) == 2 * 4 * 2 * 5 and compose_cfg(short[-1]).train.epochs == 200


def test_gt_lip_with_the_authors_layernorm_composes_and_builds_their_block() -> None:
    """variant=gt_lip_ln is the authors' GT option lipschitznorm+layernorm: eq. 19 scores, then PyG's graph-mode
    LayerNorm before the ELU, no residual; the grid runs it on Cora at 10, 20, 30 layers, 5 seeds."""
    import torch
    from torch_geometric.nn.norm import LayerNorm

    from lipgnn.data.spec import DataSpec
    from lipgnn.models import build_model

    jobs = [job for job in sweep_jobs("fig6_protocol", ["budget=cpu"]) if "variant=gt_lip_ln" in job]
    assert len(jobs) == 3 * 5
    cfg = compose_cfg(next(job for job in jobs if "depth=30" in job))
    assert (cfg.experiment_name, cfg.dataset.name, cfg.depth, cfg.model.name) == ("fig6_protocol", "cora", 30, "gt")
    assert (cfg.norm.name, cfg.norm.layernorm, cfg.model.layer_norm, cfg.model.residual) == ("lip", "graph", "none",
                                                                                           False)
    assert (cfg.train.epochs, cfg.train.selection) == (1000, "last")
    assert sorted({o for j in jobs for o in j if o.startswith("depth=")}) == ["depth=10", "depth=20", "depth=30"]
    # The new key at its neutral value leaves every earlier GT-Lip run id where it was.
    lip = ["experiment=fig6_protocol", "budget=cpu", "variant=gt_lip", "dataset=cora", "depth=30", "seed=1"]
    plain = OmegaConf.to_container(compose_cfg(lip), resolve=True)
    without = {k: v for k, v in plain["norm"].items() if k != "layernorm"}
    assert run_id(plain) == run_id({**plain, "norm": without}) != run_id(cfg)
    spec = DataSpec(num_features=5, num_classes=3)
    model = build_model(cfg.model, cfg.norm, spec, 2)
    block = model.blocks[0]
    assert isinstance(block.layer_norm, LayerNorm) and block.layer_norm.mode == "graph"
    assert block.conv.lipschitz_norm and block.placement == "none" and not block.residual
    # conv -> LayerNorm over the whole graph -> ELU (the authors' order), checked on a forward pass.
    model.eval()
    x, edge_index = torch.randn(4, cfg.model.hidden), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    h = block.conv(x, edge_index, None)
    expected = torch.nn.functional.elu((h - h.mean()) / torch.sqrt(h.var(unbiased=False) + 1e-5))
    assert torch.allclose(block(x, edge_index), expected, atol=1e-5)


@pytest.mark.parametrize("depth,passes", [(2, 50000), (3, 50000), (4, 500), (5, 150)])
def test_fig5_extra_seeds_run_under_their_depths_pass_cap(depth: int, passes: int) -> None:
    """conf/grid/fig5_cpu.yaml's extras: seeds 12 and 13 of the GAT family at every tree depth (and of GCN, GIN, GGNN
    at d = 2) under the depth's pass cap (d = 4: 500; d = 2, 3: A&Y's 50000, which their stopping rule ends first;
    d = 5: 150), and each extra declares that cap as its epoch budget."""
    jobs = [job for job in sweep_jobs("fig5", ["budget=cpu"])
            if f"dataset.tree_depth={depth}" in job and ("seed=12" in job or "seed=13" in job)]
    assert len(jobs) == (11 if depth == 2 else 5) * 2
    for job in (jobs[0], jobs[-1]):
        cfg = compose_cfg(job)
        assert (cfg.dataset.tree_depth, cfg.train.epochs, cfg.train.train_patience) == (depth, passes, 20)
    from lipgnn.results.grid import declared_grid

    sweeps = [s for s in declared_grid("fig5", "cpu").sweeps if "extra" in s.name
              and any(p.get("dataset.tree_depth") == depth for p in s.points)]
    assert sweeps and all(s.epochs == passes for s in sweeps)
    assert math.isnan(declared_grid("fig5", "cpu").sweeps[0].epochs)  # the main sweep: one cap per depth


@pytest.mark.parametrize("experiment,cell,seeds", [
    ("fig2", {"model.name": "gat", "norm.name": "lip"}, [0, 1, 2, 3, 4]),
    ("fig3", {"model.name": "gat", "norm.name": "none", "depth": 30}, [0, 1, 2, 3, 4]),
    ("fig4", {"model.name": "gat", "norm.name": "lip", "depth": 15, "train.lr": 0.001},
     [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]),  # 200 epochs, and 1000 epochs x dropout {authors', none}
    ("fig4", {"depth": 5, "norm.name": "lip", "train.lr": 0.001, "model.dropout": 0.0}, [0, 1, 2, 3, 4]),  # 1000 only
    ("fig5", {"dataset.tree_depth": 4, "model.name": "gat", "norm.name": "lip", "norm.alpha": 2.0}, [11, 12, 13]),
    ("fig5", {"dataset.tree_depth": 5, "model.name": "gat", "norm.name": "pairnorm"}, [11, 12, 13]),
    ("fig5", {"dataset.tree_depth": 2, "model.name": "gin", "norm.name": "pairnorm"}, [11, 12, 13]),
    ("fig5", {"dataset.tree_depth": 3, "model.name": "gin", "norm.name": "pairnorm"}, [11]),
    ("fig6", {"dataset.name": "cora", "depth": 30, "model.name": "gt", "norm.name": "lip", "train.lr": 0.001},
     [0, 1, 2, 3, 4]),
    ("fig6", {"dataset.name": "pubmed", "depth": 30, "model.name": "gat", "norm.name": "lip", "train.lr": 0.005},
     [0, 1, 2, 3, 4]),
    ("fig6", {"dataset.name": "pubmed", "depth": 2, "model.name": "gat", "norm.name": "layernorm",
              "train.lr": 0.005}, [0, 1, 2]),
    ("fig6_l2", {"model.score": "l2", "model.tie_qk": False, "depth": 30, "train.lr": 0.005}, [0, 1, 2]),
    ("fig6_nonlocal", {"model.name": "gt", "norm.name": "lip", "model.nonlocal": True, "depth": 30,
                       "train.lr": 0.001}, [0, 1, 2]),
    ("fig6_nonlocal", {"model.name": "gat", "model.layer_norm": "post", "model.nonlocal": True, "depth": 30,
                       "train.lr": 0.005}, [0, 1, 2]),
    ("fig6_protocol", {"model.name": "gt", "norm.name": "none", "depth": 30}, [0, 1, 2, 3, 4]),
    ("fig6_protocol", {"norm.layernorm": "graph", "depth": 10}, [0, 1, 2, 3, 4]),
    ("fig6_protocol", {"norm.layernorm": "graph", "depth": 30}, [0, 1, 2, 3, 4]),
    ("table1", {"dataset.name": "citeseer", "dataset.missing_rate": 100, "depth": 8, "norm.name": "lip"},
     [0, 1, 2, 3, 4]),
    ("table2", {"dataset.name": "cora", "depth": 4, "model.name": "gcnii"}, [0, 1, 2, 3, 4]),
    ("table3", {"dataset.name": "pubmed", "depth": 30, "model.name": "gat", "norm.name": "lip", "train.lr": 0.005},
     [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]),  # x dropout {authors', none}
    ("table3", {"dataset.name": "cora", "depth": 15, "model.name": "gat", "norm.name": "lip", "train.lr": 0.001},
     [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]),
])
def test_every_declared_cell_has_its_seeds(experiment: str, cell: dict, seeds: list[int]) -> None:
    """Seeds are an axis of each grid: the declared grid (main sweep and extras) gives every cell the seeds its
    verdicts need: the paper's five where it runs them, three (lipgnn.results.stats.MIN_SEEDS) elsewhere."""
    from lipgnn.results.grid import declared_grid

    points = [p for p in declared_grid(experiment, "cpu").points if all(p.get(k) == v for k, v in cell.items())
              and not p.get("model.residual")]
    assert sorted(p["seed"] for p in points) == seeds
