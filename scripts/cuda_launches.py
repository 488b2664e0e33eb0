"""Where a small-graph step goes on a GPU: ``python scripts/cuda_launches.py [--depth 10]``.

One profiled training step (``torch.profiler``, CPU + CUDA) per bench variant, after warm-up: the step's
median wall time over 5 unprofiled steps, the kernels launched per layer, their summed device time, the
host-device copies and synchronisations with the ops that issued them, and the ops with the most host time.
A step whose kernel time is a small part of its wall time is bound by the host issuing kernels.
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from lipgnn.bench.graphs import load_graph
from lipgnn.bench.variants import build_variant, make_step

CASES: tuple[tuple[str, str], ...] = (
    *(("pubmed", v) for v in ("pyg_gat", "gat", "gat_lip", "pyg_gt", "gt", "gt_lip")),
    *(("cora", v) for v in ("pyg_san", "san", "san_lip")),
)


def issuers(events: list, depth: int) -> list[str]:
    """Copies and synchronisations per layer, each with the chain of ops that issued it."""
    found: Counter[str] = Counter()
    for e in events:
        if e.device_type == DeviceType.CPU and ("Memcpy" in e.name or "Synchronize" in e.name):
            chain, parent = [], e.cpu_parent
            while parent is not None and len(chain) < 4:
                chain.append(parent.name)
                parent = parent.cpu_parent
            found[f"{e.name} < {' < '.join(chain)}"] += 1
    return [f"   {count / depth:5.1f}/layer {what}" for what, count in found.most_common(6)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, default=10)
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    device, depth = torch.device(a.device), a.depth
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    graphs = {}
    for name, variant in CASES:
        g = graphs.get(name) or graphs.setdefault(name, load_graph(name, seed=0).to(device))
        model = build_variant(variant, depth, g.x.size(1), g.num_classes).to(device)
        step = make_step(model, g, device)
        for _ in range(3):
            step()
        wall = statistics.median(step()[0] for _ in range(5))
        with profile(activities=activities) as prof:
            step()
        events = prof.events()
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        kernel_ms = sum(e.device_time for e in kernels) / 1e3
        print(f"\n## {name} L={depth} {variant}: median step {wall * 1e3:.1f} ms wall; {len(kernels)} kernels "
              f"({len(kernels) / depth:.0f}/layer), kernel time {kernel_ms:.1f} ms")
        for line in issuers(events, depth):
            print(line)
        top = sorted((k for k in prof.key_averages() if k.device_type == DeviceType.CPU),
                     key=lambda k: -k.self_cpu_time_total)[:8]
        print("   top host time:", ", ".join(f"{k.key} {k.self_cpu_time_total / 1e3:.1f}ms" for k in top), flush=True)
        del model, step
        if device.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
