"""Guan & He's diagnostics: energies (§2), relative energy (Def. 2.2), cosine similarity (eq. 1), pruning
(Table 8), per-layer tracing, and the energy behaviour of Pre-LN / Post-LN / nonlocal SANs at initialisation."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from devices import seeded
from torch import nn

from lipgnn.diagnostics import (
    GraphMeasure,
    cosine_similarity_matrix,
    energy,
    evaluate,
    layer_energies,
    prune_single_layers,
    relative_energy,
    skip_blocks,
    trace_layers,
)

ROOT = Path(__file__).resolve().parents[1]

# The path graph 0 - 1 - 2 - 3 (both directions), X = (0, 1, 3, 6).
PATH = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
X_PATH = torch.tensor([[0.0], [1.0], [3.0], [6.0]])


def random_graph(n: int, p: float, seed: int) -> torch.Tensor:
    g = seeded(seed)
    upper = torch.triu(torch.rand(n, n, generator=g) < p, diagonal=1)
    dense = upper | upper.T
    return dense.nonzero().T.contiguous()


def test_hand_computed_values_on_a_path() -> None:
    # mu = deg + 1 = (2, 3, 3, 2); Delta X = (1/2, 1/3, 1/3, -3/2);
    # E_2 = (1/4)(2/4 + 3/9 + 3/9 + 2*9/4) = 17/12; E_1 = (1/4) * 2 * (1 + 4 + 9) = 7.
    assert energy(X_PATH, PATH, m=2) == pytest.approx(17 / 12, rel=1e-12)
    assert energy(X_PATH, PATH, m=1) == pytest.approx(7.0, rel=1e-12)
    graph = GraphMeasure(PATH, 4)
    assert graph.laplacian(X_PATH).flatten().tolist() == pytest.approx([0.5, 1 / 3, 1 / 3, -1.5])
    # A constant second column adds nothing to the 1/n energy and halves the per-entry one.
    x2 = torch.cat([X_PATH, torch.full((4, 1), 5.0)], dim=1)
    assert energy(x2, PATH, m=2) == pytest.approx(17 / 12)
    assert energy(x2, PATH, m=2, normalise="entries") == pytest.approx(17 / 24)
    # One direction per edge, duplicates and self loops describe the same graph.
    messy = torch.tensor([[0, 1, 2, 2, 1], [1, 2, 3, 3, 1]])
    assert energy(X_PATH, messy, m=2) == pytest.approx(17 / 12)


def test_custom_weights_and_measure() -> None:
    # omega = 2 on every edge, mu = 1: Delta X = 2 (sum of differences) = (2, 2*(-1+2), 2*(-2+3), 2*(-3)).
    w = torch.full((PATH.size(1),), 2.0)
    value = energy(X_PATH, PATH, m=2, weights=w, mu=torch.ones(4))
    assert value == pytest.approx((4 + 4 + 4 + 36) / 4)


def test_zero_iff_constant_on_a_connected_graph() -> None:
    edge_index = random_graph(30, 0.2, seed=1)
    graph = GraphMeasure(edge_index, 30)
    constant = torch.randn(1, 5).expand(30, 5)
    for m in (1, 2, 3):
        assert graph.energy(constant, m) == pytest.approx(0.0, abs=1e-24)
        for seed in range(5):
            x = torch.randn(30, 5, generator=seeded(seed))
            assert graph.energy(x, m) > 1e-3
    # Connectedness matters: per-component constants have zero energy without being constant.
    two_parts = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])
    assert energy(torch.tensor([[1.0], [1.0], [4.0], [4.0]]), two_parts) == 0.0


def test_triangle_inequality_holds_for_the_square_root() -> None:
    # Def. 2.1's axiom E(X + Y) <= E(X) + E(Y) holds for sqrt(E_m), a seminorm; E_m itself is quadratic
    # (E(2X) = 4 E(X) > 2 E(X)), so the test checks the seminorm and documents the square's failure.
    graph = GraphMeasure(random_graph(25, 0.25, seed=2), 25)
    g = seeded(3)
    for m in (1, 2):
        for _ in range(20):
            x, y = torch.randn(25, 4, generator=g), torch.randn(25, 4, generator=g)
            lhs = math.sqrt(graph.energy(x + y, m))
            assert lhs <= math.sqrt(graph.energy(x, m)) + math.sqrt(graph.energy(y, m)) + 1e-12
        assert graph.energy(2 * x, m) == pytest.approx(4 * graph.energy(x, m))


def test_agrees_with_a_dense_matrix_computation() -> None:
    n, d = 40, 3
    edge_index = random_graph(n, 0.15, seed=4)
    x = torch.randn(n, d, generator=seeded(5), dtype=torch.float64)
    a = torch.zeros(n, n, dtype=torch.float64)
    a[edge_index[0], edge_index[1]] = 1.0
    deg = a.sum(1)
    mu = deg + 1
    lap = (a - torch.diag(deg)) / mu[:, None]            # Delta_mu as an n x n matrix

    def dirichlet(h: torch.Tensor) -> float:             # (1/n) sum_i mu_i sum_j a_ij / mu_i |h_j - h_i|^2
        diff = ((h[None, :, :] - h[:, None, :]) ** 2).sum(-1)
        return float((a * diff).sum()) / n

    e2 = float((mu * ((lap @ x) ** 2).sum(1)).sum()) / n
    e4 = float((mu * ((lap @ lap @ x) ** 2).sum(1)).sum()) / n
    assert energy(x, edge_index, m=1) == pytest.approx(dirichlet(x), rel=1e-10)
    assert energy(x, edge_index, m=2) == pytest.approx(e2, rel=1e-10)
    assert energy(x, edge_index, m=3) == pytest.approx(dirichlet(-lap @ x), rel=1e-10)
    assert energy(x, edge_index, m=4) == pytest.approx(e4, rel=1e-10)
    # Integration by parts (Lemma A.1's proof): int -Delta X . X dmu = (1/2) int |grad X|^2 dmu with §2's
    # gradient, which sums each edge from both ends (the lemma's statement drops the 1/2 its proof derives).
    assert float((mu * (-(lap @ x) * x).sum(1)).sum()) / n == pytest.approx(dirichlet(x) / 2, rel=1e-10)


def test_bad_arguments_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="m >= 1"):
        energy(X_PATH, PATH, m=0)
    with pytest.raises(ValueError, match="normalise"):
        energy(X_PATH, PATH, normalise="mean")
    with pytest.raises(ValueError, match="shape"):
        GraphMeasure(PATH, 4).energy(torch.zeros(5, 2))


def test_relative_energy_definition() -> None:
    assert relative_energy([2.0, 3.0, 1.5, 1.5]) == pytest.approx([0.5, -0.5, 0.0])
    assert math.isnan(relative_energy([0.0, 1.0])[0])


def test_cosine_similarity_matrix_by_hand() -> None:
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    b = torch.tensor([[1.0, 1.0], [0.0, -3.0]])
    sim = cosine_similarity_matrix([a, b, a])
    # sim(a, b) = (1/2)(1/sqrt(2) + (-1)) ; diagonal 1; symmetric.
    expected = 0.5 * (1 / math.sqrt(2) - 1)
    assert sim.shape == (3, 3)
    assert sim[0, 1].item() == pytest.approx(expected)
    assert sim[1, 0].item() == pytest.approx(expected)
    assert torch.diag(sim).tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert sim[0, 2].item() == pytest.approx(1.0)


class _Block(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scale = scale

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr=None, x_0=None) -> torch.Tensor:
        return self.scale * x + 0 * self.lin(x)


def _toy_model() -> nn.Module:
    from lipgnn.models.deep import DeepGNN

    return DeepGNN(nn.Linear(2, 3), [_Block(2.0), _Block(3.0), _Block(5.0)], nn.Linear(3, 2))  # type: ignore[list-item]


def test_trace_layers_returns_encoder_output_and_every_block_output() -> None:
    model = _toy_model()
    model.train()
    x = torch.randn(4, 2)
    layers = trace_layers(model, x, PATH)
    assert len(layers) == 4 and model.training
    x0 = model.encoder(x)
    for k, factor in enumerate((1.0, 2.0, 6.0, 30.0)):
        torch.testing.assert_close(layers[k], factor * x0)
    torch.testing.assert_close(model.head(layers[-1]), model(x, PATH))
    data = type("D", (), {"x": x, "edge_index": PATH, "num_nodes": 4})()
    energies = layer_energies(model, data)
    assert energies[2] == pytest.approx(36 * energies[0], rel=1e-6)


def test_pruning_skips_exactly_one_block_and_restores_it() -> None:
    model = _toy_model()
    x = torch.randn(4, 2)
    full = model(x, PATH)
    with skip_blocks(model, [2]):
        torch.testing.assert_close(model.head(5 * 2 * model.encoder(x)), model(x, PATH))
    torch.testing.assert_close(model(x, PATH), full)
    with pytest.raises(ValueError, match="layers 1..3"):
        with skip_blocks(model, [4]):
            pass


def test_prune_single_layers_scores_each_pruned_model() -> None:
    from lipgnn.data.spec import DataSpec, TaskData

    model = _toy_model()
    g = seeded(0)
    data = type("D", (), {})()
    data.x, data.edge_index = torch.randn(4, 2, generator=g), PATH
    data.y = torch.tensor([0, 1, 0, 1])
    data.train_mask = data.val_mask = data.test_mask = torch.ones(4, dtype=torch.bool)
    data.to = lambda device: data
    # Score = sum of the logits, so that each pruned model scores differently (accuracy could tie).
    task = TaskData(name="toy", spec=DataSpec(2, 2), metric="sum", train_batches=lambda g=None: [data],
                    eval_batches=lambda: [data], score_fn=lambda out, y: float(out.sum()))
    rows = prune_single_layers(model, task, layers=[1, 3])
    assert [r["pruned"] for r in rows] == [None, 1, 3]
    with torch.no_grad():
        h = model.encoder(data.x)
        expected = [float(model.head(f * h).sum()) for f in (30.0, 15.0, 6.0)]
    assert [r["test"] for r in rows] == pytest.approx(expected)


# ---------------------------------------------------------------------------------------------- SAN at init
def _san_profile(variant: str, depth: int = 32, seed: int = 0) -> list[float]:
    from torch_geometric import seed_everything

    from lipgnn.data.spec import DataSpec
    from lipgnn.models import build_model
    from tests.conftest import compose_cfg

    n = 80
    edge_index = random_graph(n, 0.08, seed=7)
    x = torch.randn(n, 16, generator=seeded(0))
    cfg = compose_cfg([f"variant={variant}", f"depth={depth}", f"seed={seed}"])
    seed_everything(seed)
    model = build_model(cfg.model, cfg.norm, DataSpec(16, 3), depth)
    graph = GraphMeasure(edge_index, n)
    return [graph.energy(h, 2) for h in trace_layers(model, x, edge_index)]


needs_san = pytest.mark.skipif(not (ROOT / "conf" / "model" / "san.yaml").exists(), reason="model=san is absent")


@needs_san
def test_pre_ln_energy_grows_with_depth_at_init() -> None:
    from lipgnn.results.frames import fit_laws

    e = _san_profile("san_preln")
    assert e[2] < e[8] < e[16] < e[32]
    fit = fit_laws(e)
    assert fit["better"] == "power law" and fit["power_slope"] > 0


@needs_san
def test_post_ln_energy_decays_exponentially_at_init() -> None:
    from lipgnn.results.frames import fit_laws

    e = _san_profile("san_postln")
    assert e[32] < 1e-4 * e[1]
    fit = fit_laws(e)
    assert fit["better"] == "exponential" and fit["exp_rate"] > 0.1


@needs_san
def test_nonlocal_decays_slower_than_post_ln_at_init() -> None:
    post, nonlocal_ = _san_profile("san_postln"), _san_profile("san_nonlocal")
    assert nonlocal_[32] > 100 * post[32]
    assert nonlocal_[32] / nonlocal_[8] > post[32] / post[8]


# ---------------------------------------------------------------------------------------------- runs and records
def test_log_energy_puts_per_layer_energies_in_the_run_record(tmp_path: Path, data_root: Path) -> None:
    from lipgnn.runs import run
    from tests.conftest import compose_cfg

    cfg = compose_cfg(["model=gat", "depth=3", "train.epochs=2", "log.energy=true", "log.progress=false",
                       f"results_dir={tmp_path}", "model.hidden=8"])
    record = run(cfg)
    energy_ = record["diagnostics"]["energy"]
    assert energy_["width"] == 8 and energy_["normalise"] == "nodes"
    for when in ("init", "trained"):
        assert len(energy_[when]["laplacian"]) == len(energy_[when]["dirichlet"]) == 4
        assert all(v >= 0 for v in energy_[when]["laplacian"])
    assert energy_["init"]["laplacian"] != energy_["trained"]["laplacian"]


def test_energy_kind_record_and_deterministic_id(tmp_path: Path, data_root: Path) -> None:
    from lipgnn.config import compose
    from lipgnn.runs import job_id, run

    overrides = ["experiment=gh_energy", "variant=san_postln", "depth=2", "dataset=cora", f"results_dir={tmp_path}"]
    cfg = compose(overrides)
    assert job_id(cfg) == job_id(compose(overrides))
    assert job_id(cfg) != job_id(compose([*overrides, "seed=1"]))
    record = run(cfg)
    e = record["diagnostics"]["energy"]
    assert len(e["init"]["laplacian"]) == 3 and e["final_laplacian"] == e["init"]["laplacian"][-1]
    assert e["final_laplacian_entries"] == pytest.approx(e["final_laplacian"] / 32)
    assert record["config"]["energy"] == {"features": "raw"} and record["status"] == "completed"
    assert (tmp_path / "runs" / "gh_energy" / f"{job_id(cfg)}.json").is_file()


def test_energy_cli_rejects_bad_input_with_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from lipgnn.cli import main

    assert main(["energy", "model=gat", "depth=0", "--plot", str(tmp_path / "e.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "depth=0" in err[0]
    assert main(["energy", "model=gat", "--m", "0"]) == 2
    assert not list(tmp_path.iterdir())


def test_energy_cli_prints_and_plots(capsys: pytest.CaptureFixture[str], tmp_path: Path, data_root: Path) -> None:
    from lipgnn.cli import main

    plot = tmp_path / "e.png"
    assert main(["energy", "model=gat", "depth=3", "model.hidden=8", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") >= 6 and plot.stat().st_size > 0


def test_gh_energy_artifact_cells_and_claims_from_records() -> None:
    import pandas as pd

    from lipgnn.results.artifacts.guan_he import gh_energy, gh_evolution

    recs = []
    for ln, nl, scale in (("pre", False, 1.0), ("post", False, -1.0)):
        for seed in range(5):
            for depth in gh_energy.DEPTHS:
                # Pre grows like k^0.5, post decays like e^{-0.1 k}: per-layer profiles of length depth + 1.
                lap = [32 * ((k + 1) ** 0.5 if scale > 0 else math.exp(-0.1 * k)) * (1 + 0.1 * seed)
                       for k in range(depth + 1)]
                recs.append({"status": "completed", "config": {
                    "model": {"name": "san", "layer_norm": ln, "nonlocal": nl, "init": "xavier"},
                    "dataset": {"name": "cora"}, "depth": depth, "seed": seed, "energy": {"features": "raw"}},
                    "diagnostics": {"energy": {"width": 32, "init": {"laplacian": lap}}}})
    df = pd.DataFrame(recs)
    cells = gh_energy.cells(df)
    pre2 = cells[(cells["architecture"] == "pre") & (cells["depth"] == 2)].iloc[0]
    expected = [(3 ** 0.5) * (1 + 0.1 * s) for s in range(5)]
    assert pre2["ours_min"] == pytest.approx(min(expected)) and pre2["ours_max"] == pytest.approx(max(expected))
    assert pre2["ours_geomean"] == pytest.approx(math.exp(sum(map(math.log, expected)) / 5))
    assert pre2["paper"] == 1.70 and pre2["n_seeds"] == 5
    verdicts = {c.section: c.verdict for c in gh_energy.claims(df)}
    assert verdicts["§3.2 (Table 2)"] == "holds" and verdicts["§3.2 (Table 4)"] == "holds"
    assert verdicts["§4.2 (Table 6)"] == "not run"
    evo = gh_evolution.profiles(df).set_index("architecture")
    assert evo.loc["pre", "law"] == "power-law growth" and evo.loc["pre", "power_slope"] == pytest.approx(0.5, abs=0.1)
    assert evo.loc["post", "law"] == "exponential decay" and evo.loc["post", "exp_rate"] == pytest.approx(0.1)
    assert set(gh_energy.table(df)) == {"csv", "md", "tex"}


@needs_san
@pytest.mark.parametrize(("variant", "n"), [("san_postln", 60), ("san_nonlocal", 2100), ("san_preln", 2100)])
def test_pruned_logits_equal_separate_pruned_passes(variant: str, n: int) -> None:
    """DeepGNN.pruned_logits restarts each pruned pass from the stored output of the block before it: its logits
    must equal the model's own forward with that block skipped, bit for bit, also where the stack runs relabelled
    for locality (2,100 nodes, 8 blocks); its states are the encoder and block outputs."""
    from torch_geometric import seed_everything

    from lipgnn.data.spec import DataSpec
    from lipgnn.models import build_model
    from lipgnn.nn.fused import locality
    from tests.conftest import compose_cfg

    depth = 8
    edge_index = random_graph(n, min(0.08, 6 / n), seed=3)
    x = torch.randn(n, 16, generator=seeded(1))
    cfg = compose_cfg([f"variant={variant}", f"depth={depth}", "model.impl=fused"])
    seed_everything(0)
    model = build_model(cfg.model, cfg.norm, DataSpec(16, 3), depth).eval()
    relabels = locality.stack_graph(model.blocks, model.prepare_edges(edge_index, n), model.encode(x)) is not None
    assert relabels == (n > 2048)
    items = list(model.pruned_logits(x, edge_index))
    assert [k for k, _, _ in items] == [None, *range(depth)]
    with torch.no_grad():
        assert torch.equal(items[0][1], model(x, edge_index))
        for k, logits, _ in items[1:]:
            assert torch.equal(logits, model(x, edge_index, skip_blocks={k}))
    states = items[0][2]
    assert len(states) == depth + 1 and all(s.shape == (n, states[0].size(1)) for s in states)
    if not relabels:
        traced = trace_layers(model, x, edge_index)
        for a, b in zip(states, traced, strict=True):
            torch.testing.assert_close(a, b)


def test_prune_single_layers_takes_one_pass_on_a_full_batch_deep_gnn(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a DeepGNN with one evaluation batch, prune_single_layers scores every pruned model from one
    DeepGNN.pruned_logits pass (the chosen layers only, in their order, in eval mode), equal to scoring each model
    with the block replaced by the identity; a mini-batched task runs the separate passes."""
    from torch_geometric import seed_everything

    from lipgnn.data.spec import DataSpec, TaskData
    from lipgnn.models import build_model
    from tests.conftest import compose_cfg

    n, depth = 60, 6
    data = type("D", (), {})()
    data.x, data.edge_index = torch.randn(n, 16, generator=seeded(2)), random_graph(n, 0.1, seed=4)
    data.y = torch.randint(0, 3, (n,), generator=seeded(3))
    data.train_mask = data.val_mask = data.test_mask = torch.ones(n, dtype=torch.bool)
    data.to = lambda device: data
    cfg = compose_cfg(["variant=gat_lip", f"depth={depth}", "model.impl=fused"])
    seed_everything(0)
    model = build_model(cfg.model, cfg.norm, DataSpec(16, 3), depth).train()  # dropout 0.6: eval mode must be set

    def task(batches: int) -> TaskData:
        return TaskData(name="toy", spec=DataSpec(16, 3), metric="sum", train_batches=lambda g=None: [data],
                        eval_batches=lambda: [data] * batches, score_fn=lambda out, y: float(out.double().sum()))

    calls: list[list[int]] = []
    one_pass = model.pruned_logits
    monkeypatch.setattr(model, "pruned_logits", lambda *a, **kw: (calls.append(kw["skipped"]), one_pass(*a, **kw))[1])
    rows = prune_single_layers(model, task(1), layers=[2, 5, 1])
    assert calls == [[1, 4, 0]] and model.training
    assert [r["pruned"] for r in rows] == [None, 2, 5, 1]
    assert rows[0] == {"pruned": None, **evaluate(model, task(1))}
    for row in rows[1:]:
        with skip_blocks(model, [row["pruned"]]):
            assert row == {"pruned": row["pruned"], **evaluate(model, task(1))}
    assert len({r["test"] for r in rows}) == len(rows)  # each pruned model scores differently
    calls.clear()
    twice = prune_single_layers(model, task(2), layers=[5])
    assert calls == [] and twice[1]["test"] == pytest.approx(2 * rows[2]["test"], rel=1e-6)
    with pytest.raises(ValueError, match="layers 1..6"):
        prune_single_layers(model, task(1), layers=[7])
