"""The monitor never imports torch, tensorflow or jax, and never loads CUDA: NVML only."""
import subprocess
import sys

CHECK = r"""
import importlib, sys, pkgutil
import gpumon
from gpumon.cli import build_parser, main
build_parser()                      # imports every command module
for m in pkgutil.walk_packages(gpumon.__path__, "gpumon."):
    if m.name != "gpumon.__main__":          # that one runs the CLI
        importlib.import_module(m.name)
out = sys.argv[1]
assert main(["log", "--interval", "0.5", "--duration", "1.5", "-o", out, "-q"]) == 0
assert main(["analyze", out]) == 0
bad = sorted(n for n in sys.modules if n.split(".")[0] in ("torch", "tensorflow", "jax", "jaxlib"))
maps = open("/proc/self/maps").read()
cuda = sorted({l.split()[-1] for l in maps.splitlines() if "libcuda" in l or "libcudart" in l})
nvml = any("libnvidia-ml" in l for l in maps.splitlines())
print("BAD", bad, "CUDA", cuda, "NVML", nvml)
"""


def test_no_framework_imports_and_no_cuda(fake_nvml_env, tmp_path):
    env = fake_nvml_env(gpus=2)
    r = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path / "run.csv")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last == "BAD [] CUDA [] NVML True", last
