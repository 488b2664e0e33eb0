"""`python -m lipgnn.bench --tiny` end to end, plus the pieces whose numbers must be right."""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from lipgnn.bench import CKPT_VARIANT, SUMMARY_COLUMNS, VARIANTS, Measurement, build_variant
from lipgnn.bench.__main__ import parse_args
from lipgnn.bench.graphs import SIZES, load_graph
from lipgnn.bench.memory import TensorPeak, measure_peak_mb, measure_step_memory
from lipgnn.train import allocator

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("bench") / "tmp"
    proc = subprocess.run([sys.executable, "-m", "lipgnn.bench", "--tiny", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    return out, proc


def test_tiny_cli_writes_summary(tiny_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, proc = tiny_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    df = pd.read_csv(out / "summary.csv")
    assert tuple(df.columns) == SUMMARY_COLUMNS
    # Exactly one row per graph x depth x variant, plus the checkpointing row at the deepest depth.
    grid = df[df.variant != CKPT_VARIANT]
    assert sorted(grid.groupby(["graph", "depth"]).variant.apply(sorted).explode().unique()) == sorted(VARIANTS)
    assert len(grid) == len(set(map(tuple, grid[["graph", "depth", "variant"]].values))) == 2 * len(VARIANTS)
    assert set(grid.depth) == {2, 3} and set(grid.graph) == {"tiny"}
    assert df[df.variant == CKPT_VARIANT][["graph", "depth"]].values.tolist() == [["tiny", 3]]
    # The stock PyG stacks are the baselines: ratio exactly 1; every other ratio is median / baseline median.
    assert (df[df.variant.str.startswith("pyg_")].ratio_vs_pyg == 1.0).all()
    for _, row in df.iterrows():
        kind = "gt" if row.variant in ("gt", "gt_lip", "pyg_gt") else "gat"
        base = df[(df.graph == row.graph) & (df.depth == row.depth) & (df.variant == f"pyg_{kind}")].median_s.item()
        assert row.ratio_vs_pyg == pytest.approx(row.median_s / base, rel=1e-4)
    assert (df.median_s > 0).all() and (df.peak_mb >= 0).all()
    assert (out / "summary.png").stat().st_size > 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["graph_sources"] == {"tiny": "random"} and meta["memory_method"]
    # Provenance: which code ran (a 40-hex sha, maybe -dirty) and whether the compiled loops did.
    assert len(meta["git_commit"].removesuffix("-dirty")) == 40 and meta["versions"]["torch"] == torch.__version__
    assert meta["kernels"] == "numba"
    # The in-process steps ran under the trainer's allocator settings (on by default, where glibc allows).
    assert meta["malloc_tuned"] is (allocator._glibc() is not None)
    details = pd.read_csv(out / "details.csv")
    assert (details.n == 2).sum() == 2 * len(VARIANTS)
    assert (details.q25_s <= details.median_s + 1e-12).all() and (details.median_s <= details.q75_s + 1e-12).all()
    # Each run's CPU time is written beside its wall time, in the same order, so paired ratios can be read back.
    for _, row in details.iterrows():
        cpu = [float(t) for t in str(row.cpu_times_s).split()]
        assert len(cpu) == row.n and statistics.median(cpu) == pytest.approx(row.cpu_median_s, abs=1e-4)
    # Same weights, same maths: the fused stacks reproduce the stock PyG outputs.
    assert (details.dropna(subset=["max_abs_diff_vs_pyg"]).max_abs_diff_vs_pyg < 1e-4).all()
    assert "headline ratios" in proc.stdout


def test_variants_share_weights_and_differ_only_in_the_conv() -> None:
    graph = load_graph("tiny")
    models = {v: build_variant(v, 3, graph.x.size(1), graph.num_classes) for v in (*VARIANTS, CKPT_VARIANT)}
    convs = {v: type(m.blocks[0].conv).__name__ for v, m in models.items()}
    assert convs == {"pyg_gat": "GATConv", "gat": "FusedLipGATConv", "gat_lip": "FusedLipGATConv",
                     "pyg_gt": "TransformerConv", "gt": "FusedLipTransformerConv",
                     "gt_lip": "FusedLipTransformerConv", CKPT_VARIANT: "FusedLipGATConv"}
    assert [m.blocks[0].conv.lipschitz_norm for v, m in models.items() if not v.startswith("pyg_")] == [
        False, True, False, True, True]
    assert models[CKPT_VARIANT].checkpoint_activations and not models["gat_lip"].checkpoint_activations
    for a, b in (("pyg_gat", "gat"), ("gat", "gat_lip"), ("pyg_gt", "gt"), ("gt", "gt_lip")):
        sa, sb = models[a].state_dict(), models[b].state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # The ELU sits between convs, not after the last one (the models builder's stack).
    assert models["gat"].blocks[0].act is not None and models["gat"].blocks[-1].act is None
    # The stock stacks keep torch's ELU; the fused ones use the fused path's (same function).
    assert type(models["pyg_gat"].blocks[0].act) is torch.nn.ELU
    assert type(models["gat"].blocks[0].act).__module__ == "lipgnn.nn.fused.activation"


def test_graph_sizes_and_arguments() -> None:
    assert (SIZES["arxiv"].nodes, SIZES["arxiv"].edges, SIZES["arxiv"].features) == (169343, 1166243, 128)
    assert (SIZES["pubmed"].nodes, SIZES["pubmed"].edges) == (19717, 88648)
    g = load_graph("cora", data_root="/nonexistent")  # no local copy -> random graph of Cora's size
    assert (g.num_nodes, g.num_edges, g.x.size(1), g.source) == (2708, 10556, 1433, "random")
    cfg = parse_args(["--graphs", "cora,pubmed", "--depths", "2,10", "--repeats", "3", "--out", "x"])
    assert (cfg.graphs, cfg.depths, cfg.repeats, cfg.ckpt_depth) == (["cora", "pubmed"], [2, 10], 3, 30)
    with pytest.raises(SystemExit):
        parse_args(["--graphs", "citeseer"])


def test_peak_memory_sees_a_large_allocation() -> None:
    """A step that holds 200 MiB at its peak must report at least most of it (and not the whole process)."""

    def step() -> None:
        block = torch.ones(200 * 2**20 // 4)
        block.add_(1)
        del block

    peak = measure_peak_mb(step, torch.device("cpu"))
    assert 150 <= peak <= 400
    process, tensors = measure_step_memory(step, torch.device("cpu"))
    assert 150 <= process <= 400 and tensors == pytest.approx(200, abs=1)


def test_tensor_peak_counts_live_storages_once() -> None:
    mib = 2**20 // 4  # float32 elements per MiB
    tracker = TensorPeak()
    with tracker:
        a = torch.zeros(100 * mib)
        view = a[: 10 * mib]  # a view: no new storage
        b = view + 1  # 10 MiB
        del a, view  # the 100 MiB storage is freed here
        c = torch.zeros(50 * mib)
    assert tracker.peak / 2**20 == pytest.approx(110)
    assert tracker.live / 2**20 == pytest.approx(60)
    del b, c
    assert tracker.live == 0


def test_measurement_statistics() -> None:
    m = Measurement("g", 2, "gat", times_s=[3.0, 1.0, 2.0, 10.0])
    assert m.median_s == 2.5
    assert m.quantile(0.25) == pytest.approx(1.75) and m.quantile(0.75) == pytest.approx(4.75)
    assert math.isnan(Measurement("g", 2, "gat").median_s)


def test_new_measurements_are_on_by_default_and_off_for_tiny() -> None:
    full, tiny = parse_args([]), parse_args(["--tiny"])
    assert (full.e2e_pairs, full.floor, full.san_depth) == (2, True, 256)
    assert (tiny.e2e_pairs, tiny.floor, tiny.san_depth) == (0, False, 0)
    assert parse_args(["--e2e-pairs", "0", "--no-floor", "--san-depth", "0"]).floor is False
    assert full.malloc_tuning and tiny.malloc_tuning and not parse_args(["--no-malloc-tuning"]).malloc_tuning
    with pytest.raises(SystemExit):
        parse_args(["--san-depth", "-1"])


def test_layer_floor_by_hand() -> None:
    """FLOPs 3·2·N·F·C, bytes 9 passes of 4·N·max(F, C) plus 36 per edge; seconds at the given rates."""
    from lipgnn.bench.floor import gat_layer_floor

    floor = gat_layer_floor(100, 500, 64, 32, rates=(2e9, 1e9))
    assert floor.flops == 6 * 100 * 64 * 32 == 1_228_800
    assert floor.bytes == 9 * 4 * 100 * 64 + 36 * 500 == 248_400
    assert math.isclose(floor.seconds, 1_228_800 / 2e9 + 248_400 / 1e9)


def test_san_variants_share_weights_and_outputs() -> None:
    """pyg_san and san are the same SAN (same weights) on the two attention implementations."""
    from lipgnn.bench import variants

    graph = load_graph("tiny")
    pyg, fused = (variants.build_variant(v, 2, graph.x.size(1), graph.num_classes) for v in ("pyg_san", "san"))
    assert type(pyg.blocks[0].conv).__name__ == "LipTransformerConv"
    assert type(fused.blocks[0].conv).__name__ == "FusedLipTransformerConv"
    fused.load_state_dict(pyg.state_dict())
    torch.testing.assert_close(fused.eval()(graph.x, graph.edge_index), pyg.eval()(graph.x, graph.edge_index),
                               rtol=1e-5, atol=1e-5)


def test_e2e_pairs_alternate_and_share_warm_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pairs alternate which implementation goes first; every run gets the same dataset cache, filled
    (with the compiled loops) before the first timed run; the cold run points numba at an empty folder."""
    from lipgnn.bench import e2e

    events: list[tuple[str, ...]] = []
    monkeypatch.setattr(e2e, "warm_dataset", lambda cache, overrides=(): events.append(("data", cache)))
    monkeypatch.setattr(e2e, "warm_kernels", lambda: events.append(("kernels",)))

    def fake_run(impl: str, overrides=(), env=None) -> tuple[float, float]:
        name = impl + ("_rcm" if "dataset.reorder=rcm" in overrides else "")
        events.append((name, env["LIPGNN_CACHE"], env.get("NUMBA_CACHE_DIR", "")))
        return 1.0, 2.0

    monkeypatch.setattr(e2e, "train_run", fake_run)
    runs = e2e.run_pairs(2, log=lambda _: None)
    assert [e[0] for e in events] == ["data", "kernels", "pyg", "fused", "fused_rcm", "fused_rcm", "fused", "pyg"]
    assert {e[1] for e in events if e[0] != "kernels"} == {events[0][1]}
    assert all(e[2] == "" for e in events[2:])
    assert runs == {name: ([1.0, 1.0], [2.0, 2.0]) for name in ("pyg", "fused", "fused_rcm")}
    events.clear()
    assert e2e.cold_run(log=lambda _: None) == (1.0, 2.0)
    (_, cache), (impl, env_cache, numba_dir) = events
    assert impl == "fused" and env_cache == cache and numba_dir and not Path(numba_dir).exists()


def test_layer_is_timed_in_both_node_orders_and_reported_against_the_floor() -> None:
    """The locality order is the RCM relabelling of the same layer input (outputs equal up to the row
    permutation); time_fused_layer times both orders; the report prints each one's ratio to the floor."""
    from lipgnn.bench import runner
    from lipgnn.bench.floor import layer_inputs, time_fused_layer
    from lipgnn.nn import FusedLipGATConv

    graph = load_graph("tiny")
    x = torch.randn(graph.num_nodes, 8)
    inputs = layer_inputs(x, graph.edge_index, 8)
    (h, edges, grad), (h_local, local, grad_local) = inputs["dataset"], inputs["locality"]
    order = local.node_order
    assert not torch.equal(order, torch.arange(graph.num_nodes))  # a real relabelling, not the identity
    torch.testing.assert_close(h_local, h[order])
    torch.testing.assert_close(grad_local, grad[order])
    conv = FusedLipGATConv(8, 8, lipschitz_norm=True).eval()
    torch.testing.assert_close(conv(h_local, local), conv(h, edges)[order], rtol=1e-5, atol=1e-6)

    timed = time_fused_layer(x, graph.edge_index, 8, repeats=3)
    assert set(timed) == set(runner.LAYER_ORDERS.values()) == {"dataset", "locality"}
    assert all(wall > 0 and cpu >= 0 for wall, cpu in timed.values())
    layers = []
    for variant, ratio in zip(runner.LAYER_ORDERS, (2.5, 2.25), strict=True):
        m = Measurement("pubmed", 1, variant, times_s=[0.02], cpu_s=[0.02])
        m.ratio_vs_pyg = ratio
        layers.append(m)
    report = runner.format_report(layers)
    assert "its floor (CPU time), dataset order 2.50" in report
    assert "its floor (CPU time), locality order 2.25" in report


def test_each_timed_layer_call_starts_from_an_empty_input_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a stack ∂X flows on to the layer below; the timed layer must not add every call's ∂X into the
    leaf's .grad (a pass over [N, F] no training step makes): after the timing, each order's input holds
    the gradient of one forward + backward."""
    from lipgnn.bench import floor
    from lipgnn.nn import FusedLipGATConv

    graph = load_graph("tiny")
    x = torch.randn(graph.num_nodes, 8)
    kept = floor.layer_inputs(x, graph.edge_index, 8)
    monkeypatch.setattr(floor, "layer_inputs", lambda *args: kept)
    floor.time_fused_layer(x, graph.edge_index, 8, repeats=3)
    torch.manual_seed(0)
    conv = FusedLipGATConv(8, 8, lipschitz_norm=True)  # the timed layer's initialisation
    for h, graph_in, grad in kept.values():
        once = torch.autograd.grad(conv(h, graph_in), h, grad)[0]
        torch.testing.assert_close(h.grad, once)


def test_isolated_table_gives_every_variant_its_own_process() -> None:
    """``isolate=True``: one worker per variant (none of them this process), one group of workers per stock
    stack at a time, the same rounds, the same weights (so the same max|Δ| as in one process) and a measured
    warm-up."""
    import os

    from lipgnn.bench.runner import bench_config

    graph = load_graph("tiny")
    lines: list[str] = []
    kwargs = {"hidden": 16, "heads": 1, "seed": 0}
    variants = ["pyg_gat", "gt", "gat"]
    isolated = bench_config(graph, 2, variants, 3, torch.device("cpu"), log=lines.append, isolate=True, threads=1,
                            **kwargs)
    shared = bench_config(graph, 2, variants, 1, torch.device("cpu"), log=lambda _: None, **kwargs)
    headers = [line for line in lines if "one process per variant" in line]
    groups = [dict(part.split(" pid ") for part in h.split("(")[1].rstrip(")").split(", ")) for h in headers]
    assert [list(g) for g in groups] == [["pyg_gat", "gat"], ["gt"]]
    pids = {int(pid) for g in groups for pid in g.values()}
    assert len(pids) == 3 and os.getpid() not in pids
    assert [m.variant for m in isolated] == variants
    assert all(len(m.times_s) == len(m.cpu_s) == 3 and min(m.times_s) > 0 for m in isolated)
    assert all(m.peak_mb >= 0 and not math.isnan(m.peak_mb) for m in isolated)
    assert isolated[2].max_abs_diff_vs_pyg == shared[2].max_abs_diff_vs_pyg < 1e-5
    assert isolated[2].ratio_vs_pyg == pytest.approx(isolated[2].median_s / isolated[0].median_s)
    assert math.isnan(isolated[1].ratio_vs_pyg)
    assert sum("round" in line for line in lines) == 6


def test_a_failing_worker_is_one_clear_error() -> None:
    from lipgnn.bench.isolated import Workers, WorkerSpec

    spec = WorkerSpec("no-such-graph", 0, "gat", 2, 16, 1, "cpu", 1, True, False)
    with pytest.raises(RuntimeError, match="bench worker for 'gat' failed: .*no-such-graph"), Workers([spec]):
        pass


def test_isolate_choices() -> None:
    assert parse_args([]).isolate == "san" and parse_args(["--isolate", "all"]).isolate == "all"
    cfg = parse_args(["--tiny"])
    assert cfg.isolated("san") and not cfg.isolated("steps")
    cfg.isolate = "all"
    assert cfg.isolated("steps")
    cfg.isolate = "none"
    assert not cfg.isolated("san")
    cfg.isolate = "some"
    with pytest.raises(ValueError, match="isolate must be one of"):
        cfg.isolated("san")
    with pytest.raises(SystemExit):
        parse_args(["--isolate", "some"])


def test_probe_arguments_and_defaults() -> None:
    from lipgnn.bench.probes import PROBES, ProbeConfig

    cfg = parse_args(["--probe", "determinism"])
    assert cfg == ProbeConfig("determinism", ("pubmed", "cora"), (30,), 2)
    tiny = parse_args(["--probe", "launches", "--tiny"])
    assert (tiny.graphs, tiny.depths, tiny.threads) == (("tiny",), (2,), 1)
    cfg = parse_args(["--probe", "cuda-graph", "--graphs", "cora", "--depths", "4,8", "--repeats", "3"])
    assert (cfg.graphs, cfg.depths, cfg.repeats, cfg.device) == (("cora",), (4, 8), 3, "auto")
    with pytest.raises(SystemExit):
        parse_args(["--probe", "nondeterminism"])
    # the GPU check script runs only probes that exist, through the bench
    script = (ROOT / "scripts" / "cuda_check.sh").read_text()
    called = re.findall(r"run_probe [a-z]+ ([a-z-]+)", script)
    assert called and set(called) <= set(PROBES) and "--probe" in script


def test_probes_pair_san_with_cora_and_gat_gt_with_the_other_graphs() -> None:
    from lipgnn.bench.probes import variants_on

    assert variants_on("cora") == ["pyg_san", "san", "san_lip"]
    assert variants_on("pubmed") == ["pyg_gat", "gat", "gat_lip", "pyg_gt", "gt", "gt_lip"]
    assert variants_on("tiny") == variants_on("pubmed") + variants_on("cora")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only failure path")
@pytest.mark.parametrize("args", [["--device", "cpu"], ["--device", "auto"], ["--device", "cuda", "--tiny"]])
def test_cuda_graph_probe_without_cuda_is_one_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from lipgnn.bench.__main__ import main

    assert main(["--probe", "cuda-graph", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "CUDA" in err


def test_determinism_probe_compares_bitwise() -> None:
    from lipgnn.bench.probes.determinism import describe

    out, grads = torch.ones(3), {"w": torch.zeros(2), "b": torch.zeros(1)}
    same = describe("t", (out, grads), (out.clone(), {n: g.clone() for n, g in grads.items()}))
    assert "output bitwise True (max |d| 0.00e+00); grads differing 0/2" in same
    line = describe("t", (out, grads), (out + 1e-7, {"w": torch.tensor([0.0, 2e-3]), "b": torch.zeros(1)}))
    assert "output bitwise False (max |d| 1.19e-07)" in line and "grads differing 1/2 (max |d| 2.00e-03)" in line


@pytest.mark.cpu_only
@pytest.mark.parametrize("probe", ["determinism", "launches"])
def test_probes_run_on_cpu(probe: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both CPU-capable probes run end to end on the tiny graph (one GAT-Lip and one SAN stack, one layer); on CPU
    every determinism line is bitwise equal (what tests/test_reproducibility.py asserts at depth)."""
    import importlib

    from lipgnn.bench.probes import ProbeConfig, run_probe

    module = importlib.import_module(f"lipgnn.bench.probes.{probe}")
    monkeypatch.setattr(module, "variants_on", lambda graph, *rest: ["gat_lip", "san"])
    lines: list[str] = []
    run_probe(ProbeConfig(probe, ("tiny",), (1,), 1, device="cpu"), log=lines.append)
    text = "\n".join(lines)
    assert "## tiny L=1 gat_lip" in text and "## tiny L=1 san" in text
    if probe == "determinism":
        assert text.count("bitwise True") == 4 + 8 and "bitwise False" not in text
    else:
        assert text.count("median step") == 2 and "0 kernels" in text and "top host time" in text
