r"""Over-smoothing diagnostics of Guan & He (*Solving Over-Smoothing in GNNs via Nonlocal Message Passing*).

- :func:`energy`: the m-th derivative energy :math:`\mathcal{E}_m` of §2 (Dirichlet m = 1, Laplacian m = 2);
- :func:`relative_energy`: :math:`\mathcal{R}(X^k)` of Definition 2.2 (the curse of depth);
- :func:`cosine_similarity_matrix`: eq. (1), inter-layer cosine similarity (Fig. 2);
- :func:`prune_single_layers`: single-layer pruning at evaluation (Table 8);
- :func:`trace_layers` / :func:`layer_energies`: per-layer representations and energies of any DeepGNN;
- :func:`diagnose`: per-layer raw and scale-free energies, MAD, group distance ratios, attention-gradient peaks
  and Lipschitz lower bounds of any PyG model (its ``MessagePassing`` layers, found by hooks);
- :func:`monitor`: the same per-layer quantities over any training loop, as a DataFrame and a heat map.
"""

from lipgnn.diagnostics.diagnose import Diagnosis, diagnose
from lipgnn.diagnostics.energy import NORMALISATIONS, GraphMeasure, energy, relative_energy
from lipgnn.diagnostics.monitor import Monitor, monitor
from lipgnn.diagnostics.pruning import evaluate, prune_single_layers, skip_blocks
from lipgnn.diagnostics.similarity import cosine_similarity_matrix
from lipgnn.diagnostics.tracing import layer_energies, trace_layers

__all__ = [
    "NORMALISATIONS", "Diagnosis", "GraphMeasure", "Monitor", "cosine_similarity_matrix", "diagnose", "energy",
    "evaluate", "layer_energies", "monitor", "prune_single_layers", "relative_energy", "skip_blocks",
    "trace_layers",
]
