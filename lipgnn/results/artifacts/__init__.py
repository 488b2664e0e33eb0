"""The registry's artifacts: one module per paper artifact, ``<paper>/<name>.py``, each defining ``ARTIFACT``."""
