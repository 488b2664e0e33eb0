"""lipgnn: LipschitzNorm for deep attention GNNs, with the paper's experiments one config away."""

from omegaconf import OmegaConf

from lipgnn.provenance import loaded_commit

__version__ = "0.1.0"

# The commit of the code this process loads, taken now: records name the code that ran, even when
# the working tree moves on during a long sweep (see lipgnn.provenance).
loaded_commit()

# `depth: ${add1:${dataset.tree_depth}}` — TREES models have d+1 layers (Alon & Yahav; paper §7.2).
if not OmegaConf.has_resolver("add1"):
    OmegaConf.register_new_resolver("add1", lambda value: int(value) + 1)
