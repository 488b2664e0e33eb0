"""Errors that end a run with one clear line (``train.py`` prints ``error: <msg>`` and exits 2)."""


class LipgnnError(Exception):
    """Base class: the message is one line saying what is wrong and how to fix it."""


class ConfigError(LipgnnError):
    """The composed configuration is invalid or names an impossible combination."""


class DatasetNotFoundError(LipgnnError):
    """The dataset files are absent from the data root and cannot be downloaded."""


class RunInterrupted(LipgnnError):
    """Ctrl-C during training: the message says whether the run is checkpointed and how to resume."""


class RunInProgress(LipgnnError):
    """Another process holds the run's lock: it is training that run id now."""


class RecordNotWritten(LipgnnError):
    """A finished run's record could not be written; the message says where the result was kept instead."""


class ModelError(LipgnnError):
    """A user's model failed in its forward pass; the message names the layer call (the cause is chained)."""
