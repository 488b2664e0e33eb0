"""Nonlocal SAN (Guan & He §4.1, ``model.impl=fused``): the CSR nonlocal factor against the fallback.

Times, in one process and interleaved, a training step (forward + backward + Adam) of deep nonlocal
Post-LN SANs on Cora and an evaluation forward on PubMed, once with the fused convs handing
``NonlocalScale`` their attention weights (``csr_heads``, the default) and once with that switched
off, so that every nonlocal layer asks for ``return_attention_weights`` and runs the reference
``LipTransformerConv`` forward plus the edge-wise :func:`head_laplacian_energy` (the path the fused
models took before ``csr_heads`` existed). Reports process CPU time (the machine may be shared) and
wall time, medians over the repeats, and the largest output difference between the two paths.

    OMP_NUM_THREADS=1 python scripts/bench_nonlocal_fused.py --depths 64 256 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from lipgnn.data import load
from lipgnn.data.spec import DataSpec
from lipgnn.models import build_model
from lipgnn.nn import FusedLipTransformerConv

CONF = Path(__file__).resolve().parents[1] / "conf"
NONE = OmegaConf.create({"name": "none"})
MODES = ("fallback", "csr")


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """``fallback``: the fused conv offers no ``csr_heads``, so NonlocalScale takes the PyG path."""
    if name == "csr":
        yield
        return
    saved = FusedLipTransformerConv.csr_heads
    FusedLipTransformerConv.csr_heads = lambda self, *args, **kwargs: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        FusedLipTransformerConv.csr_heads = saved  # type: ignore[method-assign]


def graph(name: str):
    return next(iter(load(OmegaConf.load(CONF / "dataset" / f"{name}.yaml"), 0).eval_batches()))


def san(data, depth: int) -> torch.nn.Module:
    cfg = OmegaConf.load(CONF / "model" / "san.yaml")
    cfg["nonlocal"], cfg.impl = True, "fused"
    torch.manual_seed(0)
    num_classes = int(data.y.max()) + 1
    return build_model(cfg, NONE, DataSpec(num_features=data.num_features, num_classes=num_classes), depth)


def timed(fn) -> tuple[float, float, object]:
    cpu, wall = time.process_time(), time.perf_counter()
    result = fn()
    return time.process_time() - cpu, time.perf_counter() - wall, result


def bench_train(data, depth: int, repeats: int) -> dict:
    base = san(data, depth).train()
    nets = {m: copy.deepcopy(base) for m in MODES}
    opts = {m: torch.optim.Adam(nets[m].parameters(), lr=1e-3) for m in MODES}
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    first_loss: dict[str, float] = {}
    for rep in range(repeats + 1):  # the first round warms up (CSR graph, kernels, allocator)
        for m in MODES if rep % 2 == 0 else MODES[::-1]:
            def step(m: str = m, rep: int = rep) -> float:
                torch.manual_seed(100 + rep)  # same dropout draws in both modes
                opts[m].zero_grad(set_to_none=True)
                out = nets[m](data.x, data.edge_index)
                loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
                loss.backward()
                opts[m].step()
                return loss.item()

            with mode(m):
                cpu, wall, loss = timed(step)
            if rep == 0:
                first_loss[m] = loss
            else:
                times[m].append((cpu, wall))
    return {"times": times, "diff": abs(first_loss["csr"] - first_loss["fallback"]), "what": "|loss diff| step 1"}


@torch.no_grad()
def bench_eval(data, depth: int, repeats: int) -> dict:
    net = san(data, depth).eval()
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    outs = {}
    for rep in range(repeats + 1):
        for m in MODES if rep % 2 == 0 else MODES[::-1]:
            with mode(m):
                cpu, wall, out = timed(lambda: net(data.x, data.edge_index))
            outs[m] = out
            if rep:
                times[m].append((cpu, wall))
    diff = float((outs["csr"] - outs["fallback"]).abs().max())
    return {"times": times, "diff": diff, "what": "max |output diff|"}


def report(label: str, result: dict) -> None:
    med = {m: (statistics.median(c for c, _ in t), statistics.median(w for _, w in t))
           for m, t in result["times"].items()}
    (fc, fw), (cc, cw) = med["fallback"], med["csr"]
    print(f"| {label} | {fc:.2f} s ({fw:.2f}) | {cc:.2f} s ({cw:.2f}) | {fc / cc:.2f}x ({fw / cw:.2f}x) "
          f"| {result['what']} {result['diff']:.1e} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-graph", default="cora")
    parser.add_argument("--depths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eval-graph", default="pubmed")
    parser.add_argument("--eval-depth", type=int, default=256)
    parser.add_argument("--eval-repeats", type=int, default=2)
    args = parser.parse_args()
    print(f"# {datetime.date.today()}, torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
          "CPU time, medians (wall in parentheses)")
    print("| measurement | fallback (before) | csr_heads (after) | ratio | equality |")
    print("|---|---|---|---|---|")
    data = graph(args.train_graph)
    for depth in args.depths:
        report(f"{depth}-layer nonlocal SAN step, {args.train_graph} ({args.repeats} repeats)",
               bench_train(data, depth, args.repeats))
    if args.eval_depth:
        data = graph(args.eval_graph)
        report(f"{args.eval_depth}-layer nonlocal SAN eval forward, {args.eval_graph} ({args.eval_repeats} repeats)",
               bench_eval(data, args.eval_depth, args.eval_repeats))


if __name__ == "__main__":
    main()
