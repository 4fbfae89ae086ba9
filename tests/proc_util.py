"""Real process trees for tests: started in a session of their own, so the whole tree ends
with the test (killing a parent alone would orphan its workers)."""
import contextlib
import os
import signal
import subprocess


@contextlib.contextmanager
def own_session(argv):
    """Popen of ``argv`` (text stdout piped) in its own session; the session is killed on
    exit."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield p
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        p.stdout.close()
