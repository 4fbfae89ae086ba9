"""Simulated training node with ground truth (see sim_api in DESIGN.md and issue 3).

    from gpumon.sim import SCENARIOS, simulate, SimSource, Truth, parse_sim_spec, draw_params

`simulate` yields Ticks far faster than real time (benchmarks, tests); `SimSource` serves the
same model in real time for `--sim`; `gpumon.sim.trace` writes the fake NVML library's trace
files. Parameters and their documented ranges: gpumon.sim.params.
"""
from gpumon.sim.params import GPU_MODELS, PARAMS
from gpumon.sim.scenarios import (SCENARIOS, STATES, ScenarioSpec, Truth, draw_params,
                                  parse_sim_spec, scenario_params)
from gpumon.sim.source import DRIVER_PERIOD_S, SimSource, simulate

__all__ = ["SCENARIOS", "STATES", "ScenarioSpec", "Truth", "SimSource", "simulate",
           "parse_sim_spec", "draw_params", "scenario_params", "PARAMS", "GPU_MODELS",
           "DRIVER_PERIOD_S"]
