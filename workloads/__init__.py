"""Reference PyTorch training workloads that reproduce what gpumon diagnoses, each recording
its own ground truth. torch is an optional extra (``pip install gpumon-dl[workloads]``), never a
dependency of the monitor. Entry point: ``python -m workloads.train --scenario NAME``; what
needs two GPUs is said in workloads/scenarios.py and workloads/README.md."""
