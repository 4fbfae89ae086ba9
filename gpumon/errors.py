"""Errors a user can cause or meet: each is one line of text and an exit code.

The exit codes (README "Exit codes"; the driver ones are nvidia-smi's where it has one):
"""

EXIT_ERROR = 1                  # any other error (a file that exists, a bad log, ...)
EXIT_USAGE = 2                  # bad command line: unknown option or command, bad value
EXIT_NO_GPU = 6                 # the driver runs but lists no GPU (nvidia-smi: 6)
EXIT_DRIVER = 9                 # driver not loaded, or one NVML cannot use (nvidia-smi: 9)
EXIT_NO_LIBRARY = 12            # libnvidia-ml / nvidia-ml-py not found (nvidia-smi: 12)
EXIT_GPU_LOST = 15              # every GPU fell off the bus (nvidia-smi: 15)
EXIT_INTERRUPTED = 130          # Ctrl-C before the first sample

# code -> meaning, for `--help`, the man page and the README table.
EXIT_CODES = {
    0: "success (gpumon run: CMD's own exit status)",
    EXIT_ERROR: "error: a file that exists, a log gpumon cannot read, ...",
    EXIT_USAGE: "usage error: unknown command or option, bad value, --sim with an unknown scenario",
    EXIT_NO_GPU: "the NVIDIA driver lists no GPU",
    EXIT_DRIVER: "NVIDIA driver not loaded, or NVML cannot use it (permissions, version mismatch)",
    EXIT_NO_LIBRARY: "NVML library (libnvidia-ml.so.1) or nvidia-ml-py not found",
    EXIT_GPU_LOST: "every GPU fell off the bus (GPU is lost)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C, SIGTERM, SIGHUP) before the first sample",
}

# The codes that mean "no usable NVIDIA GPU here" (`make run` then starts the simulated demo).
DRIVER_CODES = (EXIT_NO_GPU, EXIT_DRIVER, EXIT_NO_LIBRARY)


def exit_codes_text() -> str:
    """The table of exit codes as lines, for an epilog."""
    return "\n".join(f"  {code:>3}  {text}" for code, text in EXIT_CODES.items())


class UserError(Exception):
    """Printed as ``gpumon: <message>``; the process exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


class NoDriverError(UserError):
    """No loadable NVIDIA driver / NVML library: suggest --sim. Exit 9 when the kernel driver
    is not loaded, else 12 (the library, or nvidia-ml-py, is missing)."""

    def __init__(self, detail: str, code: int | None = None):
        if code is None:
            code = EXIT_DRIVER if "driver is not loaded" in detail else EXIT_NO_LIBRARY
        super().__init__(f"no NVIDIA driver: {detail}; use --sim SCENARIO to run on simulated "
                         "GPUs (see `gpumon sim list`)", code=code)
        self.detail = detail


class NvmlStartError(UserError):
    """A driver is there but NVML cannot start (permissions, a driver/library version
    mismatch, ...): exit 9, with the reason and its usual fix."""

    def __init__(self, detail: str):
        super().__init__(f"NVML: {detail}", code=EXIT_DRIVER)


class NoGpuError(UserError):
    """The driver runs but lists no GPU: exit 6 (nothing to watch here)."""

    def __init__(self):
        super().__init__("no NVIDIA GPU found (NVML lists none)", code=EXIT_NO_GPU)


class EveryGpuLostError(UserError):
    """Every GPU fell off the bus (NVML: GPU is lost): nothing is left to read until the
    driver is reloaded, so a command that only reads GPUs stops (exit 15)."""

    def __init__(self, gpus, what: str = ""):
        names = ", ".join(str(g) for g in sorted(gpus))
        super().__init__(f"every GPU is lost (NVML: GPU is lost: GPU {names} fell off the bus; "
                         f"a reboot or a driver reload brings them back){what}",
                         code=EXIT_GPU_LOST)
