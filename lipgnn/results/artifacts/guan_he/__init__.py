"""Guan & He, Solving Over-Smoothing in GNNs via Nonlocal Message Passing: the artifacts."""
