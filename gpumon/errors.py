"""Errors a user can cause or meet: each is one line of text and an exit code."""


class UserError(Exception):
    """Printed as ``gpumon: <message>``; the process exits with ``code``."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


class NoDriverError(UserError):
    """No loadable NVIDIA driver / NVML library: exit 2, suggest --sim."""

    def __init__(self, detail: str):
        super().__init__(f"no NVIDIA driver: {detail}; use --sim SCENARIO to run on simulated "
                         "GPUs (see `gpumon sim list`)", code=2)
        self.detail = detail


class NvmlStartError(UserError):
    """A driver is there but NVML cannot start (permissions, a driver/library version
    mismatch, ...): exit 2 as without a driver, with the reason and its usual fix."""

    def __init__(self, detail: str):
        super().__init__(f"NVML: {detail}", code=2)


class NoGpuError(UserError):
    """The driver runs but lists no GPU: exit 2 as without a driver (nothing to watch here)."""

    def __init__(self):
        super().__init__("no NVIDIA GPU found (NVML lists none)", code=2)


class EveryGpuLostError(UserError):
    """Every GPU fell off the bus (NVML: GPU is lost): nothing is left to read until the
    driver is reloaded, so a command that only reads GPUs stops (exit 1)."""

    def __init__(self, gpus, what: str = ""):
        names = ", ".join(str(g) for g in sorted(gpus))
        super().__init__(f"every GPU is lost (NVML: GPU is lost: GPU {names} fell off the bus; "
                         f"a reboot or a driver reload brings them back){what}", code=1)
