"""`make demo`: the paper's headline in a few minutes — a deep GAT fails to train, GAT-Lip trains (:mod:`lipgnn.demo`).

``python scripts/demo.py [--seed N] [--out DIR]``. The portable numerics are set before anything loads a numeric
library (:func:`lipgnn.numerics.start` restarts the process once with its pins), then :func:`lipgnn.demo.main` runs.
"""

from __future__ import annotations

import sys

from lipgnn import numerics

if __name__ == "__main__":
    numerics.start(["numerics=portable"])
    from lipgnn.demo import main  # after the pins: it loads torch

    sys.exit(main())
