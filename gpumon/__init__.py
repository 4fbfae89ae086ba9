"""gpumon: watches NVIDIA GPUs while a job trains and says why they are not busy."""
__version__ = "0.1.0"
