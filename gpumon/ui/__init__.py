"""The terminal dashboard: a model fed by the Monitor, a screen drawn from its snapshots,
a plain-line printer for pipes, and the end-of-run summary.

Imports go one way: ``model`` (data only) <- ``screen`` / ``plain`` / ``summary`` (text)
<- ``live`` (the rich Live loop and the terminal).
"""
from gpumon.ui.model import Dashboard, GpuView, View
from gpumon.ui.summary import summary_text

__all__ = ["Dashboard", "GpuView", "View", "summary_text"]
