"""Kim, Papamakarios & Mnih, *The Lipschitz Constant of Self-Attention*: artifacts (and lip_estimates,
GT-L2's Fig. 6 rows)."""
