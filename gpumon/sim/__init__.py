"""Simulated training node with ground truth (issue 3).

    from gpumon.sim import SCENARIOS, simulate, SimSource, Truth, parse_sim_spec, draw_params

    for tick in simulate("sync_stall", gpus=4, seconds=600, seed=1, interval=1.0, params=None):
        tick.gpus, tick.host, tick.truth

`simulate` yields Ticks far faster than real time (an hour of 8 GPUs in ~2-3 s of CPU);
`SimSource` serves the same model in real time for `--sim` (read() costs well under a
millisecond: samples are generated a minute ahead); `python -m gpumon.sim.trace` writes the
fake NVML library's trace files. Modules: params (every physical parameter, its unit, default
and documented draw range), scenarios (ScenarioSpec, SCENARIOS, Truth), model (the event model
of data-parallel training), observe (what NVML and the host report about it), source (ticks),
trace (trace files). Same seed, same parameters -> identical output, however it is polled.
"""
from gpumon.sim.params import GPU_MODELS, PARAMS
from gpumon.sim.scenarios import (SCENARIOS, STATES, ScenarioSpec, Truth, draw_params,
                                  parse_sim_spec, scenario_params)
from gpumon.sim.source import DRIVER_PERIOD_S, SimSource, simulate

__all__ = ["SCENARIOS", "STATES", "ScenarioSpec", "Truth", "SimSource", "simulate",
           "parse_sim_spec", "draw_params", "scenario_params", "PARAMS", "GPU_MODELS",
           "DRIVER_PERIOD_S"]
