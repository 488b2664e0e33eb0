"""lipgnn: LipschitzNorm for deep attention GNNs, with the paper's experiments one config away.

Importing the package starts no process and reads no file: the git commit a record names is taken by
:func:`lipgnn.provenance.loaded_commit` when a run starts (see there).
"""

__version__ = "0.1.0"
