"""gpumon: watches NVIDIA GPUs while a job trains and says why they are not busy.

The public Python API (gpumon/api.py; README "Python API"): ``analyze_log(path)`` and
``diagnose(data)`` return a Report (segments and summary); ``Monitor(interval=1)`` samples
live in a background thread. They load on first use, so ``import gpumon`` (and the
command's start-up) stays light.
"""
__version__ = "0.1.0"

__all__ = ["analyze_log", "diagnose", "Monitor", "Report", "Summary", "Diagnosis",
           "UserError", "__version__"]


def __getattr__(name: str):
    if name in __all__:
        from gpumon import api
        return getattr(api, name)
    raise AttributeError(f"module 'gpumon' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
