"""One builder module per model family, each registered by name (:func:`lipgnn.models.registry.register_model`).
Importing this package registers them all; a new family adds its module here (docs/ARCHITECTURE.md)."""

from lipgnn.models.families import gat, gcn, gcnii, ggnn, gin, gt, pyg_stack, san

__all__ = ["gat", "gcn", "gcnii", "ggnn", "gin", "gt", "pyg_stack", "san"]
