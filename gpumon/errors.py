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
