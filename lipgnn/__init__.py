"""lipgnn: LipschitzNorm for deep attention GNNs, with the paper's experiments one config away."""

from omegaconf import OmegaConf

__version__ = "0.1.0"

# `depth: ${add1:${dataset.tree_depth}}` — TREES models have d+1 layers (Alon & Yahav; paper §7.2).
if not OmegaConf.has_resolver("add1"):
    OmegaConf.register_new_resolver("add1", lambda value: int(value) + 1)
