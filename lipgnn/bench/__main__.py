"""``python -m lipgnn.bench [--graphs cora,pubmed,arxiv] [--depths 2,10,30] [--repeats 15] [--out DIR] [--tiny]``;
``python -m lipgnn.bench --probe determinism|launches|cuda-graph [--device cuda] [--graphs ...] [--depths ...]``
runs one device probe instead (:mod:`lipgnn.bench.probes`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lipgnn.bench.graphs import SIZES
from lipgnn.bench.probes import PROBES, ProbeConfig, run_probe
from lipgnn.bench.runner import ISOLATE_CHOICES, BenchConfig, run
from lipgnn.bench.variants import SAN_VARIANTS, VARIANTS
from lipgnn.errors import LipgnnError


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def _names(allowed: Sequence[str]):
    def parse(text: str) -> list[str]:
        names = [v.strip() for v in text.split(",") if v.strip()]
        bad = [n for n in names if n not in allowed]
        if not names or bad:
            raise argparse.ArgumentTypeError(f"unknown {bad or text!r}; choose from {', '.join(allowed)}")
        return names

    return parse


def parse_args(argv: Sequence[str] | None = None) -> BenchConfig | ProbeConfig:
    p = argparse.ArgumentParser(prog="python -m lipgnn.bench", description=__doc__)
    p.add_argument("--probe", choices=list(PROBES), default=None,
                   help="run one device probe instead of the bench; it prints its findings and takes --device, "
                        "--graphs, --depths, --repeats, --threads, --seed, --tiny "
                        "(defaults: pubmed,cora; depth 30 for determinism, 10 otherwise)")
    p.add_argument("--graphs", type=_names(list(SIZES)), default=None,
                   help="comma-separated: cora,pubmed,arxiv (default) or tiny")
    p.add_argument("--depths", type=_ints, default=None, help="attention layers, default 2,10,30")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed steps per variant (default 15: single steps vary by ±15%% on a shared CPU)")
    p.add_argument("--large-repeats", type=int, default=2, help="repeats cap on arxiv-sized graphs (default 2)")
    p.add_argument("--large-max-depth", type=int, default=8, help="depth cap on arxiv-sized graphs (default 8)")
    p.add_argument("--ckpt-graph", default=None,
                   help="graph of the with/without checkpointing measurement (default arxiv; 'none' to skip)")
    p.add_argument("--ckpt-depth", type=int, default=None, help="depth of that measurement (default 30)")
    p.add_argument("--variants", type=_names(VARIANTS), default=None, help=f"subset of {','.join(VARIANTS)}")
    p.add_argument("--e2e-pairs", type=int, default=None,
                   help="interleaved (pyg, fused) whole train.py runs (default 2; 0 skips; --tiny: 0)")
    p.add_argument("--floor", action=argparse.BooleanOptionalAction, default=None,
                   help="time one fused GAT-Lip layer on PubMed against its floor (default on; --tiny: off)")
    p.add_argument("--san-depth", type=int, default=None,
                   help="depth of the SAN step measured on Cora (default 256; 0 skips; --tiny: 0)")
    p.add_argument("--san-repeats", type=int, default=5, help="timed SAN steps per variant (default 5)")
    p.add_argument("--san-variants", type=_names(SAN_VARIANTS), default=None,
                   help=f"subset of the SAN row: {','.join(SAN_VARIANTS)} (default all)")
    p.add_argument("--malloc-tuning", action=argparse.BooleanOptionalAction, default=True,
                   help="time the in-process steps under the trainer's glibc malloc settings "
                        "(train.malloc_tuning; default on, as train.py runs)")
    p.add_argument("--isolate", choices=ISOLATE_CHOICES, default="san",
                   help="step tables that time every variant in a process of its own, rounds still interleaved: "
                        "none, san (the SAN row; default) or all")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--tiny", action="store_true",
                   help="a tiny random graph, depths 2,3, 2 repeats, 1 thread (seconds; for tests)")
    a = p.parse_args(argv)
    if a.probe is not None:
        _, default_graphs, default_depth, default_repeats = PROBES[a.probe]
        graphs = a.graphs or (["tiny"] if a.tiny else list(default_graphs))
        depths = a.depths or ([2] if a.tiny else [default_depth])
        repeats = a.repeats or (2 if a.tiny else default_repeats)
        if repeats < 1:
            p.error("--repeats must be >= 1")
        return ProbeConfig(probe=a.probe, graphs=tuple(graphs), depths=tuple(depths), repeats=repeats,
                           device=a.device, seed=a.seed, threads=a.threads or (1 if a.tiny else None))
    if a.tiny:
        graphs, depths, repeats = a.graphs or ["tiny"], a.depths or [2, 3], a.repeats or 2
        ckpt_graph, ckpt_depth = a.ckpt_graph or graphs[0], a.ckpt_depth or max(depths)
        # Tiny steps are dominated by per-op overhead, where a second thread only adds contention.
        threads = a.threads or 1
    else:
        graphs, depths, repeats = a.graphs or ["cora", "pubmed", "arxiv"], a.depths or [2, 10, 30], a.repeats or 15
        ckpt_graph, ckpt_depth = a.ckpt_graph or "arxiv", a.ckpt_depth or 30
        threads = a.threads
    if repeats < 1:
        p.error("--repeats must be >= 1")
    e2e_pairs = a.e2e_pairs if a.e2e_pairs is not None else (0 if a.tiny else 2)
    floor = a.floor if a.floor is not None else not a.tiny
    san_depth = a.san_depth if a.san_depth is not None else (0 if a.tiny else 256)
    if min(e2e_pairs, san_depth) < 0 or a.san_repeats < 1:
        p.error("--e2e-pairs and --san-depth must be >= 0, --san-repeats >= 1")
    return BenchConfig(
        graphs=graphs, depths=depths, repeats=repeats, out=a.out, variants=a.variants or list(VARIANTS),
        large_max_depth=a.large_max_depth, large_repeats=max(1, a.large_repeats),
        ckpt_graph=None if ckpt_graph == "none" else ckpt_graph, ckpt_depth=ckpt_depth, hidden=a.hidden,
        heads=a.heads, seed=a.seed, threads=threads, device=a.device, e2e_pairs=e2e_pairs, floor=floor,
        san_depth=san_depth, san_repeats=a.san_repeats, san_variants=tuple(a.san_variants or SAN_VARIANTS),
        malloc_tuning=a.malloc_tuning, isolate=a.isolate,
    )


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    if isinstance(cfg, ProbeConfig):
        try:
            run_probe(cfg, log=lambda msg: print(msg, flush=True))
        except LipgnnError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    run(cfg, log=lambda msg: print(msg, flush=True))
    print(f"wrote {cfg.out / 'summary.csv'} and {cfg.out / 'summary.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
