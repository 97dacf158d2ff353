"""The exception hierarchy: every user-facing failure is an XGraphError naming what went wrong."""
from __future__ import annotations


class XGraphError(Exception):
    """Base class of every error xgraph raises on purpose."""


class GraphError(XGraphError):
    """An IR operation was refused (unknown name, broken link, cycle); nothing was changed."""


class ModelFileError(XGraphError):
    """A model or .xmodel file is missing, damaged, hostile or not what it claims to be."""


class OutputFileError(ModelFileError):
    """A file xgraph was asked to write cannot be written there (not a regular file, no folder, I/O error)."""


class PartitionError(XGraphError):
    """A partitioning helper, merge or placement request could not be honoured."""


class PluginError(XGraphError):
    """A plugin could not be found, loaded, or misbehaved; the graph is left as before it ran."""


class OptionError(XGraphError):
    """A compile option is unknown or has an invalid value."""


class KernelError(XGraphError):
    """No kernel exists for an op, or a kernel failed while running it."""


class RunnerError(XGraphError):
    """A runner could not be created, or a job failed, timed out or was cancelled."""


class DvppError(KernelError):
    """A DVPP op was given input or attributes that break the device's rules."""
