"""The lipgnn sweeper: Hydra's BasicSweeper plus ``extra`` sub-sweeps (conf/grid/<experiment>_<budget>.yaml)."""
