"""Where does a small-graph step's time go? (``python -m lipgnn.bench --probe launches``).

One profiled training step (``torch.profiler``, CPU and, on CUDA, device activity) per bench variant, after three
warm-up steps: the step's median wall time over ``repeats`` unprofiled steps, the device kernels launched per layer
and their summed device time, the host-device copies and synchronisations per layer with the chain of ops that
issued them, and the ops with the most host time. A step whose kernel time is a small part of its wall time is
bound by the host issuing kernels (on CUDA, what ``train.cuda_graphs`` removes). On CPU there are no device
kernels; the host-time lines still show where the step goes.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from lipgnn.bench.graphs import load_graph
from lipgnn.bench.probes import ProbeConfig, variants_on
from lipgnn.bench.variants import build_variant, make_step


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


def run(cfg: ProbeConfig, device: torch.device, log: Callable[[str], None]) -> None:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    graphs = {name: load_graph(name, seed=cfg.seed).to(device) for name in cfg.graphs}
    log(f"# launches on {device}")
    for depth in cfg.depths:
        for name, g in graphs.items():
            for variant in variants_on(name):
                model = build_variant(variant, depth, g.x.size(1), g.num_classes, seed=cfg.seed).to(device)
                step = make_step(model, g, device)
                for _ in range(3):
                    step()
                wall = statistics.median(step()[0] for _ in range(cfg.repeats))
                with profile(activities=activities) as prof:
                    step()
                events = prof.events()
                kernels = [e for e in events if e.device_type == DeviceType.CUDA]
                kernel_ms = sum(e.device_time for e in kernels) / 1e3
                log(f"\n## {name} L={depth} {variant}: median step {wall * 1e3:.1f} ms wall; {len(kernels)} kernels "
                    f"({len(kernels) / depth:.0f}/layer), kernel time {kernel_ms:.1f} ms")
                for line in issuers(events, depth):
                    log(line)
                top = sorted((k for k in prof.key_averages() if k.device_type == DeviceType.CPU),
                             key=lambda k: -k.self_cpu_time_total)[:8]
                log("   top host time: " + ", ".join(f"{k.key} {k.self_cpu_time_total / 1e3:.1f}ms" for k in top))
                del model, step
                if device.type == "cuda":
                    torch.cuda.empty_cache()
