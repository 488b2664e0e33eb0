r"""``lipgnn energy model=… depth=… dataset=…``: per-layer energies of an UNTRAINED model, printed and plotted.

For :math:`k = 0, \dots, L` (:math:`X^0` the encoder output, :math:`X^L` the final hidden layer) it prints
the m-th derivative energy of Guan & He §2 and the relative energy of Definition 2.2,

.. math::
    \mathcal{E}_m(X^k) = \frac{1}{n} \int_G |\nabla_\mu^m X^k|^2 d\mu, \qquad
    \mathcal{R}(X^k) = \frac{\mathcal{E}(X^k) - \mathcal{E}(X^{k-1})}{\mathcal{E}(X^{k-1})},

and saves a log-log plot of :math:`\mathcal{E}_m(X^k)` against :math:`k + 1` (Fig. 1's axes). The model is
built as ``train.py`` would build it for the same overrides and seed; nothing is trained or recorded.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from lipgnn.diagnostics.energy import NORMALISATIONS, GraphMeasure, relative_energy
from lipgnn.errors import LipgnnError

USAGE = "lipgnn energy model=san model.layer_norm=post depth=64 dataset=cora [--m 2] [--plot out.png]"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lipgnn energy", usage=USAGE, description=__doc__.split("\n\n")[0])
    parser.add_argument("--m", type=int, default=2, help="derivative order: 1 Dirichlet, 2 Laplacian (default)")
    parser.add_argument("--normalise", choices=NORMALISATIONS, default="nodes",
                        help="nodes: the paper's 1/n (default); entries: 1/(n d), the scale of its tables")
    parser.add_argument("--plot", default=None, help="figure path (default: <model>-<dataset>-L<depth>-energy.png)")
    parser.add_argument("--no-plot", action="store_true", help="print only")
    parser.add_argument("overrides", nargs="*", help="config overrides as for train.py")
    return parser


def plot_energies(energies: Sequence[float], title: str, path: Path) -> Path:
    """Log-log plot of :math:`\\mathcal{E}(X^k)` against :math:`k + 1`, saved to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 3.4))
    ax.loglog(range(1, len(energies) + 1), [max(e, 1e-300) for e in energies], marker=".", lw=1)
    ax.set_xlabel("layer k + 1")
    ax.set_ylabel("energy")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.m < 1:
        print(f"error: --m={args.m}: the derivative order must be an integer >= 1 (usage: {USAGE})", file=sys.stderr)
        return 2
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from lipgnn.config import compose
    from lipgnn.diagnostics.tracing import trace_layers
    from lipgnn.runs.kinds.energy import build_untrained, energy_id, energy_options

    torch.set_num_threads(1)
    try:
        cfg = compose(args.overrides)
        model, data = build_untrained(cfg)
    except (HydraException, OmegaConfBaseException, LipgnnError) as exc:
        message = str(exc).strip()
        print(f"error: {message.splitlines()[0] if message else type(exc).__name__} (usage: {USAGE})", file=sys.stderr)
        return 2
    layers = trace_layers(model, data.x, data.edge_index, getattr(data, "edge_attr", None))
    graph = GraphMeasure(data.edge_index, int(data.num_nodes))
    energies = [graph.energy(h, args.m, normalise=args.normalise) for h in layers]
    relative = [float("nan"), *relative_energy(energies)]
    name = energy_id(cfg, energy_options(cfg)).rsplit("-", 1)[0]
    print(f"# {name}: E_{args.m}(X^k), normalise={args.normalise} (untrained, eval mode)")
    print(f"{'k':>5} {'energy':>12} {'relative':>12}")
    for k, (e, r) in enumerate(zip(energies, relative, strict=True)):
        print(f"{k:>5} {e:>12.4e} {r:>12.4e}")
    if not args.no_plot:
        path = Path(args.plot or f"{name}-energy.png")
        plot_energies(energies, f"{name}: E_{args.m}", path)
        print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
