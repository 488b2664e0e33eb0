r"""Speed and memory of one full-batch training step of deep attention stacks.

Every variant is the same network (``lipgnn.models.build_model``: input ``Linear`` → ``depth`` ×
[conv → ELU (not after the last conv)] → output ``Linear``; hidden 64, 1 head, no dropout) with the
same initial weights; only the conv implementation differs:

============  =======================================================================
variant       conv
============  =======================================================================
pyg_gat       stock ``torch_geometric.nn.GATConv`` (weights copied from ``gat``)
gat           ``FusedLipGATConv(lipschitz_norm=False)`` (``model.impl=fused``)
gat_lip       ``FusedLipGATConv(lipschitz_norm=True)`` (eq. 17)
pyg_gt        stock ``torch_geometric.nn.TransformerConv``
gt            ``FusedLipTransformerConv(lipschitz_norm=False)``
gt_lip        ``FusedLipTransformerConv(lipschitz_norm=True)`` (eq. 19)
gat_lip_ckpt  ``gat_lip`` with activation checkpointing (``DeepGNN.checkpoint_activations``)
============  =======================================================================

Beside the step table, ``make bench`` measures (each optional):

* ``train_py_pyg`` / ``train_py_fused``: whole ``train.py`` runs (:mod:`lipgnn.bench.e2e`: 30-layer
  GAT-Lip on PubMed, the model's dropouts, 20 epochs with evaluation, start-up included), as
  interleaved pairs of fresh processes with warm dataset and numba caches; ``train_py_fused_cold``:
  one fused run with numba's cache empty (its loops compiled in the run); ``train_py_fused_rcm``: fused
  with the opt-in node relabelling ``dataset.reorder=rcm`` (a different run, equal in distribution);
  graph ``pubmed``, depth 30;
* ``gat_lip_layer``: one fused GAT-Lip layer forward + backward on PubMed beside its floor
  (:mod:`lipgnn.bench.floor`; ``ratio_vs_pyg`` holds measured / floor there), depth 1;
  ``gat_lip_layer_rcm``: the same layer on the graph in the locality order a deep fused stack trains in
  (:mod:`lipgnn.nn.fused.locality`), timed alternately with it;
* the SAN row: a 256-layer SAN step (Guan & He, ``conf/model/san.yaml``: hidden 32, 4 heads, FFN 64) on
  Cora with ``model.impl=pyg`` (``pyg_*``) and ``fused``: ``san`` (Post-LN), ``san_lip`` (with
  LipschitzNorm), ``san_pre`` (Pre-LN), ``san_nonlocal`` (Post-LN with ``model.nonlocal=true``); each
  ``ratio_vs_pyg`` against the ``pyg_`` variant of the same model (``san_lip`` against ``pyg_san``).

A step is ``zero_grad → forward → cross-entropy over all nodes → backward → Adam step``. Per graph
and depth all variants are built, each runs one warm-up step (which is also the memory measurement,
see :mod:`lipgnn.bench.memory`), then ``repeats`` rounds time one step of every variant, the order
rotating between rounds so slow drifts of a shared machine spread over all variants. With ``--isolate``
(default: the SAN row) every variant is built and stepped in a worker process of its own
(:mod:`lipgnn.bench.isolated`), one group at a time (a stock stack and the variants compared against it), as
a training process holds one model; otherwise all run in this process. Times are
wall-clock (``torch.cuda.synchronize`` around CUDA steps); the fused variants' one-off graph
preprocessing (:class:`~lipgnn.nn.fused.CSRGraph`, cached per ``edge_index``) is done before the
warm-up and reported separately as ``prep_s``. Ratios compare medians of the same run:
``ratio_vs_pyg = median(variant) / median(stock PyG stack of the same attention type)``. Each variant's
model and step are built by :mod:`lipgnn.bench.variants`.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from lipgnn.bench.graphs import SIZES, BenchGraph, load_graph
from lipgnn.bench.memory import measure_step_memory, memory_method
from lipgnn.bench.variants import (
    CKPT_VARIANT,
    SAN_VARIANTS,
    VARIANTS,
    baseline_of,
    build_variant,
    clear_csr_cache,
    eval_output,
    make_step,
    prebuild_csr,
)
from lipgnn.nn.fused import kernels
from lipgnn.provenance import loaded_commit, versions
from lipgnn.train.allocator import is_tuned, tune_malloc

SUMMARY_COLUMNS: tuple[str, ...] = ("graph", "depth", "variant", "median_s", "peak_mb", "ratio_vs_pyg")
ISOLATE_CHOICES: tuple[str, ...] = ("none", "san", "all")
LARGE_GRAPH_NODES = 100_000  # graphs above this size are capped at --large-max-depth


E2E_VARIANTS: tuple[str, ...] = ("train_py_pyg", "train_py_fused", "train_py_fused_rcm", "train_py_fused_cold")
#: The single-layer rows and the node order each is timed in (lipgnn.bench.floor.layer_inputs).
LAYER_ORDERS: dict[str, str] = {"gat_lip_layer": "dataset", "gat_lip_layer_rcm": "locality"}


@dataclass
class Measurement:
    graph: str
    depth: int
    variant: str
    times_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)  # process CPU time of the same steps
    peak_mb: float = math.nan
    tensor_peak_mb: float = math.nan
    prep_s: float = 0.0
    max_abs_diff_vs_pyg: float = math.nan
    ratio_vs_pyg: float = math.nan

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s) if self.times_s else math.nan

    @property
    def cpu_median_s(self) -> float:
        return statistics.median(self.cpu_s) if self.cpu_s else math.nan

    def quantile(self, q: float) -> float:
        if not self.times_s:
            return math.nan
        if len(self.times_s) == 1:
            return self.times_s[0]
        return float(torch.tensor(self.times_s, dtype=torch.float64).quantile(q))


def _compared(name: str) -> bool:
    """Whether ``name``'s eval output enters ``max|Δ|`` (stock stacks and the variants without LipschitzNorm,
    which compute the same function as their stock stack)."""
    return name.startswith("pyg_") or not name.endswith("_lip")



def _output_diff(models: dict[str, nn.Module], graph: BenchGraph) -> dict[str, float]:
    """max |Δ| of each variant's eval-mode output against its stock PyG stack (same weights)."""
    return _diffs({name: eval_output(model, graph) for name, model in models.items() if _compared(name)})


def _diffs(outs: dict[str, torch.Tensor]) -> dict[str, float]:
    diffs: dict[str, float] = {}
    for name, out in outs.items():
        base = outs.get(baseline_of(name))
        if base is not None and not name.startswith("pyg_"):
            diffs[name] = float((out - base).abs().max())
    return diffs


def bench_config(graph: BenchGraph, depth: int, variants: Sequence[str], repeats: int, device: torch.device,
                 *, hidden: int, heads: int, seed: int, log: Callable[[str], None], isolate: bool = False,
                 threads: int | None = None, malloc_tuning: bool = True) -> list[Measurement]:
    """Measure ``variants`` on one graph at one depth in interleaved rounds: in this process, or with
    ``isolate`` each variant in a worker process of its own (:mod:`lipgnn.bench.isolated`; ``threads`` and
    ``malloc_tuning`` are then applied in every worker, as :func:`run` applies them here), the rounds
    interleaving each stock stack with the variants compared against it."""
    results = {v: Measurement(graph.name, depth, v) for v in variants}
    compare = graph.num_nodes <= LARGE_GRAPH_NODES  # an extra forward per variant: skipped on large graphs
    if isolate:
        from lipgnn.bench.isolated import Workers, WorkerSpec

        # One group per stock stack (the stack and the variants measured against it), one group at a time: each
        # worker keeps its step's heap, so all variants at once would hold the sum of their peaks.
        groups: dict[str, list[str]] = {}
        for v in variants:
            groups.setdefault(baseline_of(v), []).append(v)
        for group in groups.values():
            specs = [WorkerSpec(graph.name, seed, v, depth, hidden, heads, str(device), threads, malloc_tuning,
                                compare and _compared(v)) for v in group]
            with Workers(specs) as workers:
                log(f"  {graph.name} L={depth}: one process per variant ("
                    + ", ".join(f"{v} pid {pid}" for v, pid in workers.pids.items()) + ")")
                _timed(graph, depth, group, repeats, results, _diffs(workers.outputs) if compare else {},
                       lambda v: workers.ask(v, "warmup"), lambda v: workers.ask(v, "step"), log)
        return [results[v] for v in variants]
    models = {v: build_variant(v, depth, graph.x.size(1), graph.num_classes, hidden=hidden, heads=heads,
                               seed=seed).to(device) for v in variants}
    diffs = _output_diff(models, graph) if compare else {}
    steps = {v: make_step(m, graph, device) for v, m in models.items()}

    def warmup(v: str) -> tuple[float, float, float]:
        return (prebuild_csr(v, graph), *measure_step_memory(steps[v], device))

    return _timed(graph, depth, variants, repeats, results, diffs, warmup, lambda v: steps[v](), log)


def _timed(graph: BenchGraph, depth: int, variants: Sequence[str], repeats: int, results: dict[str, Measurement],
           diffs: dict[str, float], warmup: Callable[[str], tuple[float, float, float]],
           step: Callable[[str], tuple[float, float]], log: Callable[[str], None]) -> list[Measurement]:
    """The warm-up (memory) step of every variant, then ``repeats`` rounds in a rotating order."""
    for name, diff in diffs.items():
        results[name].max_abs_diff_vs_pyg = diff
    for v in variants:  # warm-up step = memory measurement
        results[v].prep_s, results[v].peak_mb, results[v].tensor_peak_mb = warmup(v)
        log(f"  warm-up {graph.name} L={depth} {v}: peak {results[v].peak_mb:.0f} MiB "
            f"(tensors {results[v].tensor_peak_mb:.0f} MiB)")
    order = list(variants)
    for r in range(repeats):
        shift = r % len(order)
        for v in order[shift:] + order[:shift]:
            wall, cpu = step(v)
            results[v].times_s.append(wall)
            results[v].cpu_s.append(cpu)
        log(f"  round {r + 1}/{repeats} {graph.name} L={depth}: "
            + ", ".join(f"{v} {results[v].times_s[-1]:.3f}s" for v in variants))
    for v in variants:
        base = results.get(baseline_of(v))
        if base is not None and base.times_s:
            results[v].ratio_vs_pyg = results[v].median_s / base.median_s
    return [results[v] for v in variants]


@dataclass
class BenchConfig:
    graphs: list[str]
    depths: list[int]
    repeats: int = 15
    out: Path = Path("results/bench")
    variants: list[str] = field(default_factory=lambda: list(VARIANTS))
    large_max_depth: int = 8
    large_repeats: int = 2
    ckpt_graph: str | None = "arxiv"
    ckpt_depth: int = 30
    hidden: int = 64
    heads: int = 1
    seed: int = 0
    threads: int | None = None
    device: str = "auto"
    e2e_pairs: int = 0          # interleaved (pyg, fused) train.py runs; 0 = skip
    floor: bool = False         # the fused GAT-Lip layer against its floor (PubMed-sized graph)
    san_depth: int = 0          # SAN stack depth on Cora; 0 = skip
    san_repeats: int = 5
    san_variants: tuple[str, ...] = SAN_VARIANTS
    malloc_tuning: bool = True  # the trainer's glibc settings (train.malloc_tuning) for the in-process steps
    # Which step tables give every variant a process of its own (lipgnn.bench.isolated): "none", "san" (the
    # SAN row, whose 1-2 GB steps leave the heap slow for the next variant) or "all".
    isolate: str = "san"

    def isolated(self, table: str) -> bool:
        """Whether ``table`` (``"san"`` or ``"steps"``: the main and checkpointing tables) runs isolated."""
        if self.isolate not in ISOLATE_CHOICES:
            raise ValueError(f"isolate must be one of {ISOLATE_CHOICES}, got {self.isolate!r}")
        return self.isolate == "all" or (self.isolate == "san" and table == "san")


def _isolation(cfg: BenchConfig, table: str) -> dict[str, object]:
    return {"isolate": cfg.isolated(table), "threads": cfg.threads, "malloc_tuning": cfg.malloc_tuning}


def depths_for(graph: BenchGraph, cfg: BenchConfig) -> list[int]:
    if graph.num_nodes > LARGE_GRAPH_NODES:
        return sorted({min(d, cfg.large_max_depth) for d in cfg.depths})
    return sorted(set(cfg.depths))


def run(cfg: BenchConfig, log: Callable[[str], None] = print) -> list[Measurement]:
    """Run the whole benchmark, write ``summary.csv``, ``details.csv``, ``meta.json`` and ``summary.png``."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # In-process steps run under the allocator settings a training process uses (train.malloc_tuning, on by
    # default), so the layer and stacks are timed as train.py runs them; the whole-run rows set it per run.
    if cfg.malloc_tuning:
        tune_malloc()
    device = torch.device("cuda" if cfg.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if cfg.device == "auto" else cfg.device))
    cfg.out.mkdir(parents=True, exist_ok=True)
    results: list[Measurement] = []
    sources: dict[str, str] = {}
    started = time.perf_counter()
    if cfg.e2e_pairs and device.type == "cpu":  # first: the headline, and the longest single measurement
        results += _e2e_measurements(cfg, log)
        _write(cfg, results, sources, device, time.perf_counter() - started)
    for name in cfg.graphs:
        graph = load_graph(name, seed=cfg.seed).to(device)
        sources[name] = graph.source
        large = graph.num_nodes > LARGE_GRAPH_NODES
        repeats = min(cfg.repeats, cfg.large_repeats) if large else cfg.repeats
        log(f"{name}: {graph.num_nodes} nodes, {graph.num_edges} edges, {graph.x.size(1)} features "
            f"({graph.source}); depths {depths_for(graph, cfg)}, {repeats} repeats")
        for depth in depths_for(graph, cfg):
            results += bench_config(graph, depth, cfg.variants, repeats, device, hidden=cfg.hidden,
                                    heads=cfg.heads, seed=cfg.seed, log=log, **_isolation(cfg, "steps"))
            _write(cfg, results, sources, device, time.perf_counter() - started)
        if cfg.ckpt_graph == name:
            results += _ckpt_measurement(graph, cfg, results, device, log)
            _write(cfg, results, sources, device, time.perf_counter() - started)
        del graph
        clear_csr_cache()
    extras: dict[str, object] = {}
    if cfg.san_depth:
        graph = load_graph("cora", seed=cfg.seed).to(device)
        sources.setdefault("cora", graph.source)
        log(f"cora: SAN step at depth {cfg.san_depth}, {cfg.san_repeats} repeats")
        results += bench_config(graph, cfg.san_depth, list(cfg.san_variants), cfg.san_repeats, device,
                                hidden=cfg.hidden, heads=cfg.heads, seed=cfg.seed, log=log, **_isolation(cfg, "san"))
        del graph
        clear_csr_cache()
        _write(cfg, results, sources, device, time.perf_counter() - started)
    if cfg.floor and device.type == "cpu":
        layers, floor = _layer_floor(cfg, log)
        results += layers
        extras["layer_floor"] = floor
        _write(cfg, results, sources, device, time.perf_counter() - started, extras=extras)
    _write(cfg, results, sources, device, time.perf_counter() - started, final=True, extras=extras)
    log(format_report(results))
    return results


def _layer_floor(cfg: BenchConfig, log: Callable[[str], None]) -> tuple[list[Measurement], dict[str, float]]:
    """One fused GAT-Lip layer forward + backward on PubMed (hidden → hidden) against its floor, in the
    dataset's node order and in the locality order a deep fused stack trains in."""
    from lipgnn.bench.floor import gat_layer_floor, time_fused_layer
    from lipgnn.nn.fused import get_csr_graph

    graph = load_graph("pubmed", seed=cfg.seed)
    x = torch.randn(graph.num_nodes, cfg.hidden, generator=torch.Generator().manual_seed(cfg.seed))
    num_edges = get_csr_graph(graph.edge_index, graph.num_nodes, add_self_loops=True).num_edges
    floor = gat_layer_floor(graph.num_nodes, num_edges, cfg.hidden, cfg.hidden)
    timed = time_fused_layer(x, graph.edge_index, cfg.hidden, repeats=max(cfg.repeats, 5))
    clear_csr_cache()
    log(f"pubmed: floor of one GAT-Lip layer fwd+bwd {floor.seconds * 1e3:.1f} ms = {floor.flops / 1e6:.0f} MFLOP "
        f"at {floor.gemm_flops_per_s / 1e9:.0f} GFLOP/s + {floor.bytes / 1e6:.1f} MB at "
        f"{floor.mem_bytes_per_s / 1e9:.1f} GB/s")
    out = []
    for variant, order in LAYER_ORDERS.items():
        wall, cpu = timed[order]
        m = Measurement("pubmed", 1, variant, times_s=[wall], cpu_s=[cpu])
        m.ratio_vs_pyg = cpu / floor.seconds
        out.append(m)
        log(f"pubmed: one fused GAT-Lip layer fwd+bwd, {order} order: {cpu * 1e3:.1f} ms CPU "
            f"({wall * 1e3:.1f} ms wall); measured/floor {cpu / floor.seconds:.2f}")
    return out, floor.as_dict()


def _e2e_measurements(cfg: BenchConfig, log: Callable[[str], None]) -> list[Measurement]:
    """Interleaved whole train.py runs, pyg against fused (:mod:`lipgnn.bench.e2e`)."""
    from lipgnn.bench.e2e import cold_run, run_pairs

    log(f"train.py end to end: {cfg.e2e_pairs} interleaved pairs (dataset and numba caches warm), then one "
        "fused run with numba's cache cold")
    runs = run_pairs(cfg.e2e_pairs, log=log)
    out = [Measurement("pubmed", 30, f"train_py_{impl}", times_s=walls, cpu_s=cpus)
           for impl, (walls, cpus) in runs.items()]
    wall, cpu = cold_run(log=log)
    out.append(Measurement("pubmed", 30, "train_py_fused_cold", times_s=[wall], cpu_s=[cpu]))
    base = out[0]
    for m in out:
        m.ratio_vs_pyg = m.median_s / base.median_s
    return out


def _ckpt_measurement(graph: BenchGraph, cfg: BenchConfig, done: list[Measurement], device: torch.device,
                      log: Callable[[str], None]) -> list[Measurement]:
    """Peak memory (and one timed step) of gat_lip with and without activation checkpointing."""
    have = {(m.graph, m.depth, m.variant) for m in done}
    variants = [v for v in ("gat_lip", CKPT_VARIANT) if (graph.name, cfg.ckpt_depth, v) not in have]
    log(f"{graph.name}: checkpointing measurement at depth {cfg.ckpt_depth}: {variants}")
    out = bench_config(graph, cfg.ckpt_depth, variants, 1, device, hidden=cfg.hidden, heads=cfg.heads,
                       seed=cfg.seed, log=log, **_isolation(cfg, "steps"))
    pyg = next((m for m in done if (m.graph, m.depth, m.variant) == (graph.name, cfg.ckpt_depth, "pyg_gat")), None)
    for m in out:
        if pyg is not None:
            m.ratio_vs_pyg = m.median_s / pyg.median_s
    return out


def _fmt(value: float, spec: str) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _write(cfg: BenchConfig, results: list[Measurement], sources: dict[str, str], device: torch.device,
           elapsed: float, final: bool = False, extras: dict[str, object] | None = None) -> None:
    """Write the CSVs and metadata (after every configuration, so a long run leaves partial results)."""
    import pandas as pd

    rows = [{"graph": m.graph, "depth": m.depth, "variant": m.variant, "median_s": m.median_s,
             "peak_mb": m.peak_mb, "ratio_vs_pyg": m.ratio_vs_pyg} for m in results]
    pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS)).to_csv(cfg.out / "summary.csv", index=False,
                                                            float_format="%.6g")
    details = [{**row, "q25_s": m.quantile(0.25), "q75_s": m.quantile(0.75), "min_s": min(m.times_s, default=math.nan),
                "max_s": max(m.times_s, default=math.nan), "n": len(m.times_s), "cpu_median_s": m.cpu_median_s,
                "tensor_peak_mb": m.tensor_peak_mb,
                "prep_s": m.prep_s,
                "max_abs_diff_vs_pyg": m.max_abs_diff_vs_pyg, "times_s": " ".join(f"{t:.4f}" for t in m.times_s),
                # per-run CPU times in the order of times_s, so paired ratios can be read back from the file
                "cpu_times_s": " ".join(f"{t:.4f}" for t in m.cpu_s)}
               for row, m in zip(rows, results, strict=True)]
    pd.DataFrame(details).to_csv(cfg.out / "details.csv", index=False, float_format="%.6g")
    meta = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "git_commit": loaded_commit(), "versions": versions(),
        "kernels": "numba" if device.type == "cpu" and kernels.available(torch.zeros(1)) else "eager",
        "device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
        "platform": platform.platform(), "processor": platform.processor(),
        "memory_method": memory_method(device),
        "tensor_memory_method": "peak live bytes of tensor storages created in the step (TorchDispatchMode)",
        "graph_sources": sources,
        "graph_sizes": {k: asdict(v) for k, v in SIZES.items()}, "elapsed_s": elapsed,
        "step": "zero_grad + forward + cross-entropy (all nodes) + backward + Adam",
        "malloc_tuned": is_tuned(),
        **(extras or {}),
    }
    (cfg.out / "meta.json").write_text(json.dumps(meta, indent=2))
    if final:
        plot(results, cfg.out / "summary.png")


def plot(results: list[Measurement], path: Path) -> None:
    """Median step time and peak memory against depth, one column per graph."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [m for m in results if m.variant not in (*E2E_VARIANTS, *LAYER_ORDERS)]  # not training steps
    graphs = list(dict.fromkeys(m.graph for m in results))
    if not graphs:
        return
    fig, axes = plt.subplots(2, len(graphs), figsize=(4.2 * len(graphs), 7), squeeze=False)
    styles = {"pyg_gat": ("tab:blue", "--"), "gat": ("tab:blue", ":"), "gat_lip": ("tab:blue", "-"),
              "pyg_gt": ("tab:red", "--"), "gt": ("tab:red", ":"), "gt_lip": ("tab:red", "-"),
              CKPT_VARIANT: ("tab:green", "-"), "pyg_san": ("tab:purple", "--"), "san": ("tab:purple", ":"),
              "san_lip": ("tab:purple", "-"), "pyg_san_pre": ("tab:brown", "--"), "san_pre": ("tab:brown", ":"),
              "pyg_san_nonlocal": ("tab:olive", "--"), "san_nonlocal": ("tab:olive", ":")}
    for col, g in enumerate(graphs):
        for variant in dict.fromkeys(m.variant for m in results if m.graph == g):
            ms = sorted((m for m in results if m.graph == g and m.variant == variant), key=lambda m: m.depth)
            color, ls = styles.get(variant, ("gray", "-"))
            depths = [m.depth for m in ms]
            axes[0, col].plot(depths, [m.median_s for m in ms], ls, color=color, marker="o", label=variant)
            axes[0, col].errorbar(depths, [m.median_s for m in ms], fmt="none", ecolor=color, capsize=3,
                                  yerr=[[m.median_s - m.quantile(0.25) for m in ms],
                                        [m.quantile(0.75) - m.median_s for m in ms]])
            axes[1, col].plot(depths, [m.peak_mb for m in ms], ls, color=color, marker="o", label=variant)
        axes[0, col].set_title(g)
        axes[0, col].set_yscale("log")
        axes[0, col].set_ylabel("step time [s] (median, IQR)")
        axes[1, col].set_ylabel("peak memory of a step [MiB]")
        axes[1, col].set_yscale("log")
        axes[1, col].set_xlabel("depth (attention layers)")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_report(results: list[Measurement]) -> str:
    """Human-readable table plus the headline ratios (Lip overhead, speed-up over stock PyG)."""
    lines = [f"{'graph':8} {'depth':>5} {'variant':13} {'median_s':>9} {'IQR_s':>17} {'min-max_s':>17} "
             f"{'ratio':>6} {'peak_MiB':>9} {'tensor_MiB':>10} {'max|Δ|':>8}"]
    for m in results:
        lines.append(
            f"{m.graph:8} {m.depth:5d} {m.variant:13} {m.median_s:9.4f} "
            f"{_fmt(m.quantile(0.25), '.4f'):>8}-{_fmt(m.quantile(0.75), '.4f'):<8} "
            f"{_fmt(min(m.times_s, default=math.nan), '.4f'):>8}-{_fmt(max(m.times_s, default=math.nan), '.4f'):<8} "
            f"{_fmt(m.ratio_vs_pyg, '.3f'):>6} {_fmt(m.peak_mb, '.0f'):>9} {_fmt(m.tensor_peak_mb, '.0f'):>10} "
            f"{_fmt(m.max_abs_diff_vs_pyg, '.1e'):>8}"
        )
    by_key = {(m.graph, m.depth, m.variant): m for m in results}
    lines.append("headline ratios (wall-clock medians of the same run; process-CPU-time medians in brackets):")
    for g, d in dict.fromkeys((m.graph, m.depth) for m in results):
        parts = []
        for num, den, label in (("gat_lip", "gat", "gat_lip/gat"), ("gt_lip", "gt", "gt_lip/gt"),
                                ("pyg_gat", "gat_lip", "speed-up pyg_gat/gat_lip"),
                                ("pyg_gt", "gt_lip", "speed-up pyg_gt/gt_lip")):
            a, b = by_key.get((g, d, num)), by_key.get((g, d, den))
            if a is not None and b is not None and a.times_s and b.times_s:
                parts.append(f"{label} {a.median_s / b.median_s:.2f} (cpu {a.cpu_median_s / b.cpu_median_s:.2f})")
        a, b = by_key.get((g, d, "gat_lip")), by_key.get((g, d, CKPT_VARIANT))
        if a is not None and b is not None and b.peak_mb > 0:
            parts.append(f"memory cut by checkpointing: process {a.peak_mb / b.peak_mb:.2f}x, "
                         f"tensors {a.tensor_peak_mb / b.tensor_peak_mb:.2f}x")
        for num, den, label in (("pyg_san", "san", "speed-up pyg_san/san"),
                                ("pyg_san", "san_lip", "speed-up pyg_san/san_lip"),
                                ("pyg_san_pre", "san_pre", "speed-up pyg_san_pre/san_pre"),
                                ("pyg_san_nonlocal", "san_nonlocal", "speed-up pyg_san_nonlocal/san_nonlocal"),
                                ("train_py_pyg", "train_py_fused", "train.py speed-up pyg/fused"),
                                ("train_py_pyg", "train_py_fused_rcm", "train.py speed-up pyg/fused+rcm"),
                                ("train_py_fused_cold", "train_py_fused",
                                 "train.py fused with numba's cache cold / warm")):
            a, b = by_key.get((g, d, num)), by_key.get((g, d, den))
            if a is not None and b is not None and a.times_s and b.times_s:
                parts.append(f"{label} {a.median_s / b.median_s:.2f} (cpu {a.cpu_median_s / b.cpu_median_s:.2f})")
        for variant, order in LAYER_ORDERS.items():
            layer = by_key.get((g, d, variant))
            if layer is not None:
                parts.append(f"fused GAT-Lip layer fwd+bwd / its floor (CPU time), {order} order "
                             f"{layer.ratio_vs_pyg:.2f}")
        if parts:
            lines.append(f"  {g} L={d}: " + "; ".join(parts))
    return "\n".join(lines)
