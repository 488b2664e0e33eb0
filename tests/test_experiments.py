"""A tiny version of every experiment, end to end: sweep expansion → runs → make tables / make figures.

The sweeps are expanded by the same code as ``lipgnn sweep-status`` (Hydra's parser and BasicSweeper) and each
job is run through ``lipgnn.runs.run`` exactly as ``train.py -m`` would run it, with 1–2 epochs and tiny widths.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, compose_cfg
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
    "fig2": ["depth=3", "train.epochs=2"],                                            # GAT, GAT-Lip
    "fig3": ["depth=2"],
    "fig4": ["depth=2", "train.lr=0.005"],
    "fig5": ["dataset.tree_depth=2", "dataset.num_trees=64", "variant=gcn,gin_pn,ggnn,gat,gat_pn,gat_lip"],
    "fig6": ["dataset=cora", "depth=2", "train.lr=0.005", "variant=gat,gat_lip,gt_ln,gt_pn"],
    "fig6_protocol": ["depth=2", "seed=0"],                          # GT, GT-Lip (eq. 19, authors' formula)
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
    for script in ("make_tables.py", "make_figures.py"):
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--results-dir", str(tiny_results)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
    expected = [f"tables/table{i}.{ext}" for i in (1, 2, 3) for ext in ("md", "tex", "csv")]
    expected += [f"figures/fig{i}.{ext}" for i in range(2, 7) for ext in ("png", "pdf")]
    for name in expected:
        assert (tiny_results / name).stat().st_size > 0, name


def test_a_table_cell_equals_the_records_it_came_from(tiny_results: Path) -> None:
    from lipgnn.results.engine import make_tables
    from lipgnn.results.store import load_records

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
    jobs = sweep_jobs("fig6_protocol", ["budget=cpu"])
    for job in jobs:
        cfg = compose_cfg(job)
        assert cfg.experiment_name == "fig6_protocol" and cfg.model.name == "gt" and cfg.depth == 30
        train = cfg.train
        assert (train.lr, train.epochs, train.scheduler, train.selection) == (0.001, 1000, "plateau", "last")
        assert (train.plateau_mode, train.plateau_factor, train.plateau_patience) == ("min", 0.1, 10)
        assert (cfg.model.dropout, cfg.model.attn_dropout) == (0.5, 0.3)
    norms = sorted((cfg.norm.name, cfg.norm.get("formula")) for cfg in map(compose_cfg, jobs))
    assert norms == [("lip", "paper")] * 2 + [("lip", "reference")] * 2 + [("none", None)] * 2


def test_fig4_at_the_papers_epochs_composes_its_declared_grid_cheap_depths_first() -> None:
    """conf/grid/fig4_cpu_1000.yaml: PubMed 100%, depths {2,5,10,15} x GAT, GAT-Lip x lr {0.005, 0.001} x dropout
    {authors', none} x seeds {0, 1} = 64 runs of 1000 epochs, launched depth by depth from the shallowest."""
    jobs = sweep_jobs("fig4", ["budget=cpu", "grid=fig4_cpu_1000"])
    assert len(jobs) == 4 * 2 * 2 * 2 * 2
    depths = [int(next(o for o in job if o.startswith("depth=")).split("=")[1]) for job in jobs]
    assert depths == sorted(depths) and depths[0] == 2 and depths[-1] == 15
    values = {key: {o.split("=", 1)[1] for job in jobs for o in job if o.startswith(f"{key}=")}
              for key in ("variant", "train.lr", "dropout", "seed")}
    assert values == {"variant": {"gat", "gat_lip"}, "train.lr": {"0.005", "0.001"}, "dropout": {"default", "none"},
                      "seed": {"0", "1"}}
    for job in (jobs[0], jobs[-1]):
        cfg = compose_cfg(job)
        assert (cfg.dataset.name, cfg.dataset.missing_rate, cfg.train.epochs) == ("pubmed", 100, 1000)
        dropout = "dropout=none" in job
        assert (cfg.model.dropout, cfg.model.attn_dropout) == ((0.0, 0.0) if dropout else (0.6, 0.3))
        assert cfg.train.lr in (0.005, 0.001) and cfg.model.impl == "auto"
    # The 200-epoch grid is unchanged beside it.
    assert len(sweep_jobs("fig4", ["budget=cpu"])) == 2 * 4 * 2


def test_gt_lip_with_the_authors_layernorm_composes_and_builds_their_block() -> None:
    """variant=gt_lip_ln is the authors' GT option lipschitznorm+layernorm: eq. 19 scores, then PyG's graph-mode
    LayerNorm before the ELU, no residual; its extra sweep runs it on Cora at 10, 20, 30 layers, 2 seeds."""
    import torch
    from torch_geometric.nn.norm import LayerNorm

    from lipgnn.data.spec import DataSpec
    from lipgnn.identity import run_id
    from lipgnn.models import build_model

    jobs = sweep_jobs("fig6_protocol", ["budget=cpu", "grid=fig6_protocol_cpu_ln"])
    assert len(jobs) == 3 * 2
    cfg = compose_cfg(jobs[-1])
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


@pytest.mark.parametrize("grid,depth,passes,variants", [
    ("fig5_cpu_seeds", 4, 500, 5), ("fig5_cpu_seeds_d2", 2, 50000, 5), ("fig5_cpu_seeds_d3", 3, 50000, 5),
    ("fig5_cpu_seeds_d5", 5, 150, 5),
])
def test_fig5_extra_seeds_give_the_gat_comparisons_three_seeds(grid: str, depth: int, passes: int,
                                                                variants: int) -> None:
    """conf/grid/fig5_cpu_seeds*.yaml: seeds 12 and 13 of the GAT family at one tree depth under the cpu grid's pass
    cap there (d = 4: 500; d = 2, 3: A&Y's 50000, which their stopping rule ends first; d = 5: 150), with the same
    run ids a plain fig5 launch of those points gets, and counted in the declared grid (GAT-Pn's too)."""
    jobs = sweep_jobs("fig5", ["budget=cpu", f"grid={grid}"])
    assert len(jobs) == variants * 2
    for job in (jobs[0], jobs[-1]):
        cfg = compose_cfg(job)
        assert (cfg.dataset.tree_depth, cfg.train.epochs, cfg.train.train_patience) == (depth, passes, 20)
        plain = [o for o in job if not o.startswith("grid=")]
        assert run_id(cfg) == run_id(compose_cfg(plain))
    assert {int(o.split("=")[1]) for job in jobs for o in job if o.startswith("seed=")} == {12, 13}
    from lipgnn.results.grid import declared_grid

    points = [p for p in declared_grid("fig5", "cpu").points if p.get("dataset.tree_depth") == depth
              and p.get("model.name") == "gat" and p.get("norm.name") == "lip" and p.get("norm.alpha") == 2.0]
    assert sorted(p["seed"] for p in points) == [11, 12, 13]
    pn = [p for p in declared_grid("fig5", "cpu").points if p.get("dataset.tree_depth") == depth
          and p.get("model.name") == "gat" and p.get("norm.name") == "pairnorm"]
    assert sorted(p["seed"] for p in pn) == [11, 12, 13]


def test_fig6_protocol_layernorm_option_has_five_seeds_at_every_depth() -> None:
    """conf/grid/fig6_protocol_cpu_ln_seeds.yaml: seeds 2-4 of GT-Lip + graph-mode LayerNorm at 10 and 20 layers, with
    the run ids a plain launch gets, so that with fig6_protocol_cpu_ln.yaml's seeds 0-1 (and the 30-layer extra seeds)
    each of its depths has the five seeds the protocol check's 30-layer cells have."""
    jobs = sweep_jobs("fig6_protocol", ["budget=cpu", "grid=fig6_protocol_cpu_ln_seeds"])
    assert len(jobs) == 2 * 3
    for job in jobs:
        cfg = compose_cfg(job)
        assert (cfg.dataset.name, cfg.norm.layernorm, cfg.train.epochs) == ("cora", "graph", 1000)
        assert cfg.depth in (10, 20) and cfg.seed in (2, 3, 4)
        assert run_id(cfg) == run_id(compose_cfg([o for o in job if not o.startswith("grid=")]))
    from lipgnn.results.grid import declared_grid

    for depth in (10, 20, 30):
        points = [p for p in declared_grid("fig6_protocol", "cpu").points if p.get("depth") == depth
                  and p.get("norm.layernorm") == "graph"]
        assert sorted(p["seed"] for p in points) == [0, 1, 2, 3, 4], depth


def test_fig5_extra_seeds_of_the_other_gnns_at_depth_2() -> None:
    """conf/grid/fig5_cpu_seeds_d2_others.yaml: seeds 12 and 13 of GCN, GIN and GGNN, each with and without PairNorm,
    at tree depth 2 under the cpu grid's cap there, with the run ids a plain fig5 launch gets, so that every
    depth-2 cell of the figure has seeds 11-13."""
    jobs = sweep_jobs("fig5", ["budget=cpu", "grid=fig5_cpu_seeds_d2_others"])
    assert len(jobs) == 6 * 2
    for job in jobs:
        cfg = compose_cfg(job)
        assert (cfg.dataset.tree_depth, cfg.train.epochs, cfg.train.train_patience) == (2, 50000, 20)
        assert cfg.model.name in ("gcn", "gin", "ggnn") and cfg.seed in (12, 13)
        plain = [o for o in job if not o.startswith("grid=")]
        assert run_id(cfg) == run_id(compose_cfg(plain))
    from lipgnn.results.grid import declared_grid

    for model in ("gcn", "gin", "ggnn"):
        for norm in ("none", "pairnorm"):
            points = [p for p in declared_grid("fig5", "cpu").points if p.get("dataset.tree_depth") == 2
                      and p.get("model.name") == model and p.get("norm.name") == norm]
            assert sorted(p["seed"] for p in points) == [11, 12, 13], (model, norm)


def test_fig2_seeds_3_and_4() -> None:
    """conf/grid/fig2_cpu_seeds_34.yaml: seeds 3 and 4 of GAT and GAT-Lip, with the run ids a plain launch gets."""
    jobs = sweep_jobs("fig2", ["budget=cpu", "grid=fig2_cpu_seeds_34"])
    assert len(jobs) == 2 * 2
    assert {compose_cfg(job).seed for job in jobs} == {3, 4}
    for job in jobs:
        plain = [o for o in job if not o.startswith("grid=")]
        assert run_id(compose_cfg(job)) == run_id(compose_cfg(plain))


@pytest.mark.parametrize("experiment,grid,size,cell,seeds", [
    ("table1", "table1_cpu_seeds", 5 * 3 * 2 * 3,
     {"dataset.name": "citeseer", "dataset.missing_rate": 100, "depth": 8, "norm.name": "lip"}, (2,)),
    ("table1", "table1_cpu_seeds_34", 5 * 3 * 2 * 3 * 2,
     {"dataset.name": "pubmed", "dataset.missing_rate": 0, "depth": 2, "model.name": "ggnn"}, (3, 4)),
    ("table2", "table2_cpu_seeds", 2 * 2 * 3, {"dataset.name": "pubmed", "depth": 16, "norm.name": "lip"}, (2,)),
    ("table2", "table2_cpu_seeds_34", 2 * 2 * 3 * 2, {"dataset.name": "cora", "depth": 4, "model.name": "gcnii"},
     (3, 4)),
])
def test_extra_seed_grids_give_every_table_cell_its_paired_seeds(experiment: str, grid: str, size: int, cell: dict,
                                                                 seeds: tuple[int, ...]) -> None:
    """conf/grid/table{1,2}_cpu_seeds.yaml: seed 2 of the cpu grid; table{1,2}_cpu_seeds_34.yaml: seeds 3 and 4;
    each with the run ids a plain launch of those points gets, so that with seeds 0-1 every declared point has the
    paper's five seeds."""
    jobs = sweep_jobs(experiment, ["budget=cpu", f"grid={grid}"])
    assert len(jobs) == size
    for job in (jobs[0], jobs[-1]):
        cfg = compose_cfg(job)
        assert cfg.seed in seeds and (cfg.train.epochs, cfg.train.lr) == (200, 0.005)
        plain = [o for o in job if not o.startswith("grid=")]
        assert run_id(cfg) == run_id(compose_cfg(plain))
    assert {int(o.split("=")[1]) for job in jobs for o in job if o.startswith("seed=")} == set(seeds)
    from lipgnn.results.grid import declared_grid

    declared = [0, 1, 2, 3, 4]
    points = [p for p in declared_grid(experiment, "cpu").points if all(p.get(k) == v for k, v in cell.items())]
    assert sorted(p["seed"] for p in points) == declared


@pytest.mark.parametrize("grid,dataset", [("table3_cpu_seeds", "cora"), ("table3_cpu_seeds_pubmed", "pubmed")])
def test_table3_extra_seeds_complete_the_30_layer_cells_to_five_runs(grid: str, dataset: str) -> None:
    """The headline 30-layer cells: seeds 2-4 of table3_cpu.yaml's lr x dropout grid, so that with the
    main grid's seeds 0-1 every 30-layer cell has the paper's 5 runs (the declared grid counts both files)."""
    jobs = sweep_jobs("table3", ["budget=cpu", f"grid={grid}"])
    assert len(jobs) == 4 * 2 * 2 * 3
    cfgs = [compose_cfg(job) for job in (jobs[0], jobs[-1])]
    assert all((c.dataset.name, c.depth, c.train.epochs) == (dataset, 30, 200) for c in cfgs)
    assert {int(o.split("=")[1]) for job in jobs for o in job if o.startswith("seed=")} == {2, 3, 4}
    from lipgnn.results.grid import declared_grid

    grid_points = declared_grid("table3", "cpu").points
    cell = [p for p in grid_points if p.get("dataset.name") == dataset and p.get("depth") == 30
            and p.get("model.name") == "gat" and p.get("norm.name") == "lip" and not p.get("model.residual")
            and p.get("train.lr") == 0.005]
    assert sorted(p["seed"] for p in cell) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]  # x dropout {authors', none}


@pytest.mark.parametrize("experiment,grid,size,fixed", [
    ("table3", "table3_cpu_seeds_d15_34", 4 * 2 * 2 * 2, {"dataset.name": "cora", "depth": 15}),
    ("table3", "table3_cpu_seeds_d15_pubmed_34", 4 * 2 * 2 * 2, {"dataset.name": "pubmed", "depth": 15}),
    ("fig3", "fig3_cpu_seeds_34", 2 * 4 * 2, {"dataset.name": "cora"}),
    ("fig4", "fig4_cpu_seeds_34", 2 * 4 * 2 * 2, {"dataset.name": "pubmed", "dataset.missing_rate": 100}),
    ("fig6_protocol", "fig6_protocol_cpu_seeds_34", 4 * 2, {"dataset.name": "cora", "depth": 30, "train.epochs": 1000}),
])
def test_seeds_3_4_grids_complete_their_points_to_five_runs(experiment: str, grid: str, size: int,
                                                            fixed: dict) -> None:
    """conf/grid/*_seeds*_34.yaml: seeds 3 and 4 of points that had three, with the run ids a plain launch gets, so
    that those points have five paired seeds (Table 3's 15-layer cells like its 30-layer ones; Fig. 3's depths; Fig. 4's
    200-epoch points; the authors'-protocol GT and GT-Lip at 30 layers)."""
    jobs = sweep_jobs(experiment, ["budget=cpu", f"grid={grid}"])
    assert len(jobs) == size
    for job in (jobs[0], jobs[-1]):
        cfg = compose_cfg(job)
        assert all(OmegaConf.select(cfg, k) == v for k, v in {"train.epochs": 200, **fixed}.items())
        assert run_id(cfg) == run_id(compose_cfg([o for o in job if not o.startswith("grid=")]))
    assert {int(o.split("=")[1]) for job in jobs for o in job if o.startswith("seed=")} == {3, 4}


def test_fig4_1000_epoch_seed_2_is_the_1000_epoch_grid_at_seed_2() -> None:
    """conf/grid/fig4_cpu_1000_seed2.yaml: fig4_cpu_1000.yaml's 32 runs per seed at seed 2 (the same run ids a launch
    of that grid with seed=2 gets), so that every 1000-epoch point has three paired seeds."""
    extra = sweep_jobs("fig4", ["budget=cpu", "grid=fig4_cpu_1000_seed2"])
    main = sweep_jobs("fig4", ["budget=cpu", "grid=fig4_cpu_1000"])
    assert len(extra) == 32 and len(main) == 64
    extra_ids = {run_id(compose_cfg(job)) for job in extra}
    main_at_2 = {run_id(compose_cfg([o if not o.startswith("seed=") else "seed=2" for o in job]))
                 for job in main}
    assert extra_ids == main_at_2
    assert {compose_cfg(job).train.epochs for job in extra[:1] + extra[-1:]} == {1000}
    from lipgnn.results.grid import declared_grid

    points = [p for p in declared_grid("fig4", "cpu").points if p.get("depth") == 15 and p.get("norm.name") == "lip"
              and p.get("train.lr") == 0.001 and p.get("model.dropout") == 0.0]
    assert sorted(p["seed"] for p in points) == [0, 1, 2, 3, 4]  # the 1000-epoch sweeps only (no dropout axis at 200)


def test_fig4_1000_epoch_seeds_3_4_are_the_compared_depths_at_seeds_3_4() -> None:
    """conf/grid/fig4_cpu_1000_seeds_34.yaml: fig4_cpu_1000.yaml's runs at depths 2 and 15 (the depths the 1000-epoch
    verdicts compare) at seeds 3 and 4, with the run ids a launch of that grid with those seeds gets; and
    fig4_cpu_1000_seeds_34_mid.yaml the same at depths 5 and 10."""
    extra = sweep_jobs("fig4", ["budget=cpu", "grid=fig4_cpu_1000_seeds_34"])
    main = sweep_jobs("fig4", ["budget=cpu", "grid=fig4_cpu_1000"])
    assert len(extra) == 2 * 2 * 2 * 2 * 2
    extra_ids = {run_id(compose_cfg(job)) for job in extra}
    main_at = {run_id(compose_cfg([o if not o.startswith("seed=") else f"seed={seed}" for o in job]))
               for job in main for seed in (3, 4) if f"depth={2}" in job or f"depth={15}" in job}
    assert extra_ids == main_at
    assert [o for o in extra[0] if o.startswith("seed=")] == ["seed=3"]  # seed first: a cut-short sweep leaves seed 3
    from lipgnn.results.grid import declared_grid

    mid = sweep_jobs("fig4", ["budget=cpu", "grid=fig4_cpu_1000_seeds_34_mid"])  # the same at depths 5 and 10
    assert len(mid) == 2 * 2 * 2 * 2 * 2
    mid_at = {run_id(compose_cfg([o if not o.startswith("seed=") else f"seed={seed}" for o in job]))
              for job in main for seed in (3, 4) if f"depth={5}" in job or f"depth={10}" in job}
    assert {run_id(compose_cfg(job)) for job in mid} == mid_at
    assert [o for o in mid[0] if o.startswith("seed=")] == ["seed=3"]
    for depth in (2, 5, 10, 15):  # every point of the 1000-epoch series: five paired seeds
        point = [p for p in declared_grid("fig4", "cpu").points if p.get("depth") == depth
                 and p.get("norm.name") == "lip" and p.get("train.lr") == 0.001 and p.get("model.dropout") == 0.0]
        assert sorted(p["seed"] for p in point) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("experiment,grid,size,cell,seeds", [
    ("fig2", "fig2_cpu_seeds", 2 * 2, {"model.name": "gat", "norm.name": "lip"}, [0, 1, 2, 3, 4]),
    # seeds 3-4: fig2_cpu_seeds_34.yaml
    ("fig6_protocol", "fig6_protocol_cpu_seeds", 4, {"model.name": "gt", "norm.name": "none", "depth": 30},
     [0, 1, 2, 3, 4]),  # seeds 3-4 of GT and GT-Lip: fig6_protocol_cpu_seeds_34.yaml
    ("fig4", "fig4_cpu_seeds", 2 * 4 * 2 * 2, {"model.name": "gat", "norm.name": "lip", "depth": 15, "train.lr": 0.001},
     [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]),  # 200 epochs: seeds 0-4 (3-4: fig4_cpu_seeds_34.yaml); the
    # 1000-epoch sweeps at 15 layers: seeds 0-4 x dropout {authors', none} (3-4: fig4_cpu_1000_seeds_34.yaml)
    ("fig3", "fig3_cpu_seeds", 2 * 4 * 2, {"model.name": "gat", "norm.name": "none", "depth": 30},
     [0, 1, 2, 3, 4]),  # seeds 3-4: fig3_cpu_seeds_34.yaml
    ("fig6_l2", "fig6_l2_cpu_seeds", 2 * 4 * 2 * 2,
     {"model.score": "l2", "model.tie_qk": False, "depth": 30, "train.lr": 0.005}, [0, 1, 2]),
    ("fig6_nonlocal", "fig6_nonlocal_cpu_seeds", 8 * 2 * 2 * 2,
     {"model.name": "gt", "norm.name": "lip", "model.nonlocal": True, "depth": 30, "train.lr": 0.001}, [0, 1, 2]),
    ("fig6_nonlocal", "fig6_nonlocal_cpu_seeds", 8 * 2 * 2 * 2,
     {"model.name": "gat", "model.layer_norm": "post", "model.nonlocal": True, "depth": 30, "train.lr": 0.005},
     [0, 1, 2]),
    ("fig6", "fig6_cpu_seeds", 8 * 4 * 2 * 2,
     {"dataset.name": "cora", "depth": 30, "model.name": "gt", "norm.name": "lip", "train.lr": 0.001},
     [0, 1, 2, 3, 4]),  # seeds 3-4 of the 30-layer cells: fig6_cpu_seeds_d30_gt.yaml
    ("fig6", "fig6_cpu_seeds_pubmed", 8 * 4 * 2 * 2,
     {"dataset.name": "pubmed", "depth": 2, "model.name": "gat", "norm.name": "layernorm", "train.lr": 0.005},
     [0, 1, 2]),
    ("table3", "table3_cpu_seeds_d15", 4 * 2 * 2,
     {"dataset.name": "cora", "depth": 15, "model.name": "gat", "norm.name": "lip", "train.lr": 0.001},
     [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]),  # x dropout {authors', none}; seeds 3-4: table3_cpu_seeds_d15_34.yaml
    ("table3", "table3_cpu_seeds_d15_pubmed", 4 * 2 * 2,
     {"dataset.name": "pubmed", "depth": 15, "model.name": "gat", "norm.name": "lip", "train.lr": 0.001},
     [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]),  # seeds 3-4: table3_cpu_seeds_d15_pubmed_34.yaml
])
def test_extra_seed_grids_give_their_points_three_paired_seeds(experiment: str, grid: str, size: int, cell: dict,
                                                               seeds: list[int]) -> None:
    """conf/grid/<experiment>_cpu_seeds*.yaml: the extra seeds of points the cpu grid runs once, with the run ids a
    plain launch of those points gets (the records were run that way), so that with the main grid's seeds every
    declared point has three."""
    jobs = sweep_jobs(experiment, ["budget=cpu", f"grid={grid}"])
    assert len(jobs) == size
    for job in (jobs[0], jobs[-1]):
        cfg = compose_cfg(job)
        assert cfg.seed in (1, 2)
        plain = [o for o in job if not o.startswith("grid=")]
        assert run_id(cfg) == run_id(compose_cfg(plain))
    from lipgnn.results.grid import declared_grid

    points = [p for p in declared_grid(experiment, "cpu").points if all(p.get(k) == v for k, v in cell.items())
              and not p.get("model.residual")]
    assert sorted(p["seed"] for p in points) == seeds


def test_fig6_30_layer_gat_cells_have_the_papers_five_seeds() -> None:
    """conf/grid/fig6_cpu_seeds_d30.yaml: seeds 3 and 4 of the 30-layer GAT cells on Cora and PubMed, with the run
    ids the extra-seed grids' jobs get at those seeds, so each of those cells has seeds 0-4; fig6_cpu_seeds_d30_gt.yaml
    does the same for the 30-layer GT cells."""
    extra = sweep_jobs("fig6", ["budget=cpu", "grid=fig6_cpu_seeds_d30"])
    assert len(extra) == 2 * 2 * 4 * 2
    gat = ("variant=gat", "variant=gat_lip", "variant=gat_pn", "variant=gat_ln")
    base = [job for grid in ("fig6_cpu_seeds", "fig6_cpu_seeds_pubmed")
            for job in sweep_jobs("fig6", ["budget=cpu", f"grid={grid}"])
            if "depth=30" in job and any(o in job for o in gat)]
    at = {run_id(compose_cfg([o if not o.startswith("seed=") else f"seed={s}" for o in job]))
          for job in base for s in (3, 4)}
    assert {run_id(compose_cfg(job)) for job in extra} == at
    from lipgnn.results.grid import declared_grid

    for dataset, model, seeds in (("cora", "gat", 5), ("pubmed", "gat", 5), ("cora", "gt", 5), ("pubmed", "gt", 5)):
        cell = [p for p in declared_grid("fig6", "cpu").points if p.get("dataset.name") == dataset
                and p.get("depth") == 30 and p.get("model.name") == model and p.get("norm.name") == "lip"
                and p.get("train.lr") == 0.005 and not p.get("model.residual")]
        assert sorted(p["seed"] for p in cell) == list(range(seeds)), (dataset, model)
    gt = sweep_jobs("fig6", ["budget=cpu", "grid=fig6_cpu_seeds_d30_gt"])  # the 30-layer GT cells
    assert len(gt) == 2 * 2 * 4 * 2 and all("depth=30" in job for job in gt)
