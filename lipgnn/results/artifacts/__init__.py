"""Paper artifacts: one module per table/figure, each defining ``ARTIFACT`` (lipgnn.results.artifact)."""
