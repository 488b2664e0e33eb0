"""The one-head GAT-Lip layer (``lipgnn.nn.fused.gat_one_head``) against its version at another commit, in one
process: the same weights, inputs and graph, the two versions alternating in random order each round, so that a
shared machine's load falls on both alike.

Timed, process CPU time under the trainer's malloc settings, one thread:

1. ``layer_loc`` / ``layer_data``: one ``FusedLipGATConv(64, 64)`` forward + backward on PubMed (LipschitzNorm on,
   no dropout), in the locality order a deep fused stack trains in and in the dataset's order: the bench's layer
   row (``lipgnn.bench.floor.time_fused_layer``), 5 calls a round;
2. ``layer_train``: the same layer as a deep block trains it (locality order, attention dropout 0.3, the ELU
   folded in), 5 calls a round;
3. ``step30``: one training step (forward, cross-entropy, backward, Adam) of the 30-layer GAT-Lip on PubMed with
   the authors' dropouts (0.6 on features, 0.3 on attention), the model of the whole-run bench.

Printed per task: the medians, the rounds in which the current version was faster and the median paired saving.
Before timing, the 30-layer model's evaluation output under both versions is compared.

    OMP_NUM_THREADS=1 python scripts/ab_one_head.py --baseline HEAD~1 --rounds 16
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

import lipgnn.nn.fused.gat_one_head as current
from lipgnn.bench.floor import layer_inputs
from lipgnn.bench.graphs import load_graph
from lipgnn.models import build_model
from lipgnn.nn import FusedLipGATConv
from lipgnn.train.allocator import tune_malloc
from lipgnn.train.trainer import adam

ROOT = Path(__file__).resolve().parents[1]
MODULE = "lipgnn/nn/fused/gat_one_head.py"


def load_baseline(rev: str, into: Path):
    """``gat_one_head`` as it is at ``rev``, imported under another name (its compiled loops are its own)."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{MODULE}"], check=True, capture_output=True,
                            text=True).stdout
    path = into / "gat_one_head_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("gat_one_head_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default="HEAD~1", help="git revision of the version to compare against")
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    tune_malloc()
    random.seed(a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        baseline = load_baseline(a.baseline, Path(tmp))
        impls = {"baseline": baseline.one_head_gat, "current": current.one_head_gat}

        def use(name: str) -> None:  # FusedLipGATConv looks the function up on the module at every call
            current.one_head_gat = impls[name]

        g = load_graph("pubmed", seed=a.seed)
        x = torch.randn(g.num_nodes, 64, generator=torch.Generator().manual_seed(a.seed))
        inputs = layer_inputs(x, g.edge_index, 64)
        torch.manual_seed(a.seed)
        conv = FusedLipGATConv(64, 64, lipschitz_norm=True)
        train_conv = FusedLipGATConv(64, 64, lipschitz_norm=True, dropout=0.3)
        train_conv.load_state_dict(conv.state_dict())
        elu = torch.nn.ELU()

        def layer(order: str) -> None:
            h, graph, grad = inputs[order]
            h.grad = None
            conv(h, graph).backward(grad)

        def layer_train() -> None:
            h, graph, grad = inputs["locality"]
            h.grad = None
            train_conv(h, graph, activation=elu).backward(grad)

        model_cfg = SimpleNamespace(name="gat", hidden=64, heads=1, head_aggregation="concat", dropout=0.6,
                                    attn_dropout=0.3, residual=False, impl="fused")
        norm_cfg = SimpleNamespace(name="lip", alpha=1.0, variant="paper")
        spec = SimpleNamespace(num_features=g.x.size(1), num_classes=int(g.y.max()) + 1, input="dense",
                               vocab_sizes=(), edge_dim=None, multilabel=False, task="node")
        torch.manual_seed(a.seed)
        model = build_model(model_cfg, norm_cfg, spec, 30)
        opt = adam(model.parameters(), lr=0.005)

        model.eval()
        with torch.no_grad():
            use("baseline")
            ref = model(g.x, g.edge_index)
            use("current")
            diff = (model(g.x, g.edge_index) - ref).abs().max().item()
        print(f"30-layer evaluation output, max abs difference current - baseline ({a.baseline}): {diff:.3g}")
        model.train()

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(g.x, g.edge_index), g.y).backward()
            opt.step()

        tasks = {"layer_loc": (lambda: layer("locality"), 5), "layer_data": (lambda: layer("dataset"), 5),
                 "layer_train": (layer_train, 5), "step30": (step, 1)}
        times: dict[tuple[str, str], list[float]] = {(t, k): [] for t in tasks for k in impls}
        for name in impls:  # compile and warm both
            use(name)
            for fn, _ in tasks.values():
                fn()
        for _ in range(a.rounds):
            order = list(impls)
            random.shuffle(order)
            for task, (fn, calls) in tasks.items():
                for name in order:
                    use(name)
                    start = time.process_time()
                    for _ in range(calls):
                        fn()
                    times[(task, name)].append((time.process_time() - start) / calls * 1e3)
        use("current")

    def median(v: list[float]) -> float:
        return sorted(v)[len(v) // 2]

    for task in tasks:
        base, cur = times[(task, "baseline")], times[(task, "current")]
        faster = sum(c < b for b, c in zip(base, cur, strict=True))
        saving = median([b - c for b, c in zip(base, cur, strict=True)])
        print(f"{task:10s} baseline {median(base):8.2f} ms  current {median(cur):8.2f} ms  current faster in "
              f"{faster}/{len(base)}  paired median saving {saving:.2f} ms")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
