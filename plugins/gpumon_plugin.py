# gpumon-plugin: the gpumon column for dstat and dool (`dstat --gpumon`, `dool --gpumon`).
#
# Install with `gpumon plugin install`: it links this file as ~/.dstat/dstat_gpumon.py and
# ~/.dool/dool_gpumon.py and records gpumon's interpreter in
# ${XDG_CONFIG_HOME:-~/.config}/gpumon/plugin.json.
#
# The host tool runs this file in its own interpreter (Debian's dstat: /usr/bin/python3), which
# usually cannot import gpumon or nvidia-ml-py. So the column needs only the standard library:
# it starts `<gpumon's python> -m gpumon.commands.stream --interval <delay> --stop-on-eof` as a
# child and parses its JSON lines (readings and gpumon's own verdicts). The child ends when its
# standard input closes, that is, when the host ends however it ends.
#
# Both hosts exec this file with a throw-away locals dict: names defined here are not visible
# inside methods, so every method imports what it uses and constants are class attributes.
#
# Environment: GPUMON_PYTHON overrides the recorded interpreter; GPUMON_PLUGIN_GPUS=0,2 selects
# GPUs; GPUMON_PLUGIN_SIM=SCENARIO[:N] shows simulated GPUs (titled "sim"). Everything else in
# the environment (LD_LIBRARY_PATH, ...) passes to the child.
#
# Columns (percentages like dstat's cpu column; a missing value shows as "-"):
#   default  util  mem  stat     mean GPU utilization and memory utilization over all GPUs,
#                                and the verdict for all jobs
#   -f       one group per GPU (gpu0, gpu1, ...) with util mem stat; "lost" for a lost GPU
# stat: busy, idle, data (data_starvation), sync (sync_stall), thrm (throttled),
#       ---- (insufficient_data, or no verdict yet).

try:
    _gpumon_host_base = dool
except NameError:
    _gpumon_host_base = dstat


class _gpumon_column(_gpumon_host_base):
    # Seconds to wait for gpumon's first reading: its first start imports numpy and NVML,
    # which takes a few seconds on a loaded machine; longer than this means it is stuck.
    START_TIMEOUT_S = 30.0
    # A stream that died (driver reset, GPU fell off) is started again this often.
    RESTART_EVERY_S = 10.0
    # A reading older than this many host intervals (and at least STALE_MIN_S) is shown as
    # missing: a stream stuck in a hung driver call must not pass old numbers off as current.
    STALE_INTERVALS = 3
    STALE_MIN_S = 5.0
    # cprint shows a negative number as "-": the host's own way to draw a missing value.
    MISSING = -1
    PCT_SCALE = 34          # colour steps like dstat's cpu column: 0-33, 34-67, 68-99, 100
    WIDTH = 4               # fits "100" and the four-letter state
    NO_STATE = '----'
    LOST_STATE = 'lost'
    NICKS = ('util', 'mem', 'stat')

    def __init__(self):
        self.name = 'gpumon'
        self.nick = self.NICKS
        self.vars = self.NICKS
        self.type = 'p'
        self.width = self.WIDTH
        self.scale = self.PCT_SCALE
        self.child = None
        self.buf = b''
        self.hello = None
        self.latest = None
        self.latest_at = 0.0
        self.reason = None
        self.gpus = []
        self.full = False
        self.groups = [('gpumon', None)]
        self.cells = []
        self.next_restart = 0.0
        self.said = False

    # -- where gpumon is -------------------------------------------------------------------
    def _config(self):
        import json, os
        base = os.environ.get('XDG_CONFIG_HOME') or os.path.join(os.path.expanduser('~'),
                                                                 '.config')
        path = os.path.join(base, 'gpumon', 'plugin.json')
        try:
            with open(path) as f:
                cfg = json.load(f)
            return cfg if isinstance(cfg, dict) else {}
        except (OSError, ValueError):
            return {}

    def _python(self):
        """(interpreter, extra PYTHONPATH or None), or raise the reason it is not known."""
        import os
        cfg = self._config()
        python = os.environ.get('GPUMON_PYTHON') or cfg.get('python')
        if not python:
            raise Exception("gpumon's Python is not known: run `gpumon plugin install` "
                            "(or set GPUMON_PYTHON)")
        if not os.access(python, os.X_OK):
            raise Exception("gpumon's Python %s is missing: run `gpumon plugin install` "
                            "again" % python)
        extra = None if os.environ.get('GPUMON_PYTHON') else cfg.get('pythonpath')
        return python, extra

    # -- the child -------------------------------------------------------------------------
    def _delay(self):
        try:
            return max(float(op.delay), 0.1)
        except Exception:
            return 1.0

    def _start(self):
        import os, subprocess
        python, extra = self._python()
        cmd = [python, '-m', 'gpumon.commands.stream', '--interval', '%g' % self._delay(),
               '--stop-on-eof']
        if os.environ.get('GPUMON_PLUGIN_GPUS'):
            cmd += ['--gpus', os.environ['GPUMON_PLUGIN_GPUS']]
        if os.environ.get('GPUMON_PLUGIN_SIM'):
            cmd += ['--sim', os.environ['GPUMON_PLUGIN_SIM']]
        env = dict(os.environ)
        if extra:
            env['PYTHONPATH'] = extra + (os.pathsep + env['PYTHONPATH']
                                         if env.get('PYTHONPATH') else '')
        # cwd "/": a folder named gpumon in the host's cwd must not shadow the real one.
        self.child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, cwd='/', env=env,
                                      close_fds=True)
        os.set_blocking(self.child.stdout.fileno(), False)
        self.buf = b''
        self.last_text = ''

    def _stop(self):
        child, self.child = self.child, None
        if child is None:
            return
        for pipe in (child.stdin, child.stdout):
            try:
                pipe.close()
            except Exception:
                pass
        try:
            child.terminate()
            child.wait(1.0)
        except Exception:
            try:
                child.kill()
            except Exception:
                pass

    def _pump(self, wait=0.0):
        """Read what the child wrote (waiting up to `wait` s for something); parse it.

        Keeps the latest tick; returns False once the child is gone."""
        import json, os, select, time
        if self.child is None:
            return False
        fd = self.child.stdout.fileno()
        eof = False
        if wait > 0:
            select.select([fd], [], [], wait)
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                eof = True
                break
            if not data:
                eof = True
                break
            self.buf += data
        *lines, self.buf = self.buf.split(b'\n')
        for raw in lines:
            text = raw.decode('utf-8', 'replace').strip()
            if not text:
                continue
            rec = None
            if text.startswith('{'):
                try:
                    rec = json.loads(text)
                except ValueError:
                    rec = None
            if not isinstance(rec, dict):
                self.last_text = text      # a warning or a traceback line
                continue
            kind = rec.get('type')
            if kind == 'hello':
                self.hello = rec
            elif kind == 'tick':
                self.latest = rec
                self.latest_at = time.monotonic()
            elif kind == 'error':
                self.reason = str(rec.get('message') or 'gpumon stream failed')
        if eof:
            code = self.child.poll()
            if code is None:
                try:
                    code = self.child.wait(1.0)
                except Exception:
                    code = '?'
            if not self.reason:
                self.reason = self._exit_reason(code)
            self._stop()
            self.next_restart = time.monotonic() + self.RESTART_EVERY_S
            return False
        return True

    def _exit_reason(self, code):
        text = self.last_text
        if 'No module named' in text and 'gpumon' in text:
            python = self._config().get('python', 'its Python')
            return ("gpumon is not importable by %s: run `gpumon plugin install` again"
                    % python)
        if text:
            return 'gpumon stream exited (%s): %s' % (code, text[-200:])
        return 'gpumon stream exited with code %s' % code

    # -- the host's plugin API -------------------------------------------------------------
    def check(self):
        import atexit, time
        try:
            self._start()
        except OSError as exc:
            raise Exception('cannot start gpumon: %s' % exc)
        atexit.register(self._stop)
        deadline = time.time() + self.START_TIMEOUT_S
        while self.latest is None:
            left = deadline - time.time()
            if left <= 0:
                self._stop()
                raise Exception('gpumon gave no reading within %g s' % self.START_TIMEOUT_S)
            if not self._pump(min(left, 0.5)) and self.latest is None:
                raise Exception(self.reason or 'gpumon stream ended')
        # The very first reading may hold no sample yet (a fresh source): wait one more.
        if not self._has_data(self.latest):
            first, until = self.latest, time.time() + self._delay() + 1.0
            while self.latest is first and time.time() < until:
                if not self._pump(max(0.0, min(until - time.time(), 0.2))):
                    break
        self.gpus = [g.get('gpu') for g in (self.hello or {}).get('gpus', [])] or \
            [g.get('gpu') for g in self.latest.get('gpus', [])]
        if not self.gpus:
            self._stop()
            raise Exception('no NVIDIA GPU found')
        sim = (self.hello or {}).get('source') == 'sim'
        try:
            self.full = bool(op.full)
        except Exception:
            self.full = False
        if self.full:
            self.groups = [('%sgpu%s' % ('sim ' if sim else '', g), g) for g in self.gpus]
        else:
            n = len(self.gpus)
            if sim:
                title = 'gpumon sim' if n == 1 else 'sim %d gpus' % n
            else:
                title = 'gpumon' if n == 1 else 'gpumon %d gpus' % n
            self.groups = [(title, None)]
        self.name = [t for t, _ in self.groups] if self.full else self.groups[0][0]
        self.vars = ['%s.%s' % (i, n) for i in range(len(self.groups)) for n in self.NICKS]
        self.nick = self.NICKS
        self.reason = None
        self._cells_from(self.latest)
        return True

    def _has_data(self, tick):
        for g in (tick or {}).get('gpus') or []:
            if isinstance(g, dict) and g.get('util') is not None:
                return True
        return False

    def extract(self):
        # An exception here would end dool: nothing may escape.
        import time
        try:
            if self.child is not None:
                alive = self._pump()
                if not alive:
                    self._said_once()
                    self.latest = None
            elif time.monotonic() >= self.next_restart:
                self.next_restart = time.monotonic() + self.RESTART_EVERY_S
                try:
                    self.reason = None
                    self._start()
                except Exception as exc:
                    self.reason = str(exc)
            stale = max(self.STALE_MIN_S, self.STALE_INTERVALS * self._delay())
            fresh = time.monotonic() - self.latest_at <= stale
            self._cells_from(self.latest if fresh else None)
        except Exception as exc:
            self.reason = 'gpumon column: %s' % exc
            self._cells_from(None)
        for i, key in enumerate(self.vars):
            self.val[key] = self.cells[i] if i < len(self.cells) else self.MISSING

    def _said_once(self):
        import sys
        if not self.said and self.reason:
            self.said = True
            sys.stderr.write('\ngpumon: the GPU stream stopped (%s); retrying every %g s\n'
                             % (self.reason, self.RESTART_EVERY_S))

    def _cells_from(self, tick):
        """The flat list of cell values: [util, mem, state] per group; MISSING for none."""
        def num(v):
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) \
                else self.MISSING
        by_gpu = {}
        for g in (tick or {}).get('gpus') or []:
            if isinstance(g, dict):
                by_gpu[g.get('gpu')] = g
        cells = []
        if self.full:
            for _title, gpu in self.groups:
                g = by_gpu.get(gpu)
                if g is None or g.get('lost'):
                    state = self.LOST_STATE if g is not None else self.NO_STATE
                    cells += [self.MISSING, self.MISSING, state]
                else:
                    cells += [num(g.get('util')), num(g.get('mem')),
                              str(g.get('state') or self.NO_STATE)[:self.WIDTH]]
        else:
            live = [g for g in by_gpu.values() if not g.get('lost')]

            def mean(key):
                vals = [num(g.get(key)) for g in live]
                vals = [v for v in vals if v >= 0]
                return sum(vals) / len(vals) if vals else self.MISSING
            state = (tick or {}).get('state') or self.NO_STATE
            cells += [mean('util'), mean('mem'), str(state)[:self.WIDTH]]
        self.cells = cells

    # -- drawing: groups of (util mem stat), each cell like the host's own -----------------
    def statwidth(self):
        per = len(self.NICKS) * self.WIDTH + len(self.NICKS) - 1
        return len(self.groups) * per + len(self.groups) - 1

    def colwidth(self):
        return len(self.NICKS) * self.WIDTH + len(self.NICKS) - 1

    def title(self):
        width = self.colwidth() if self.full else self.statwidth()
        parts = []
        for t, _ in self.groups:
            parts.append(theme['title'] + t[0:width].center(width).replace(' ', char['dash']))
        sep = (theme['frame'] + char['dash']) if op.color else char['space']
        return sep.join(parts) + theme['default']

    def subtitle(self):
        group = char['space'].join(theme['subtitle'] + n[0:self.WIDTH].center(self.WIDTH)
                                   + theme['default'] for n in self.NICKS)
        return (theme['frame'] + char['colon']).join(group for _ in self.groups)

    def show(self):
        try:
            out = []
            for i in range(len(self.groups)):
                util, mem, state = [self.val.get(k, self.MISSING)
                                    for k in self.vars[3 * i:3 * i + 3]]
                out.append(char['space'].join([
                    cprint(util, 'p', self.WIDTH, self.PCT_SCALE),
                    cprint(mem, 'p', self.WIDTH, self.PCT_SCALE),
                    cprint(str(state), 's', self.WIDTH, 0)]))
            return (theme.get('subframe', theme['frame']) + char['colon']).join(out)
        except Exception:
            return char['space'] * self.statwidth()

    def csvtitle(self):
        per = len(self.NICKS)
        return char['sep'].join('"%s"' % t + char['sep'] * (per - 1) for t, _ in self.groups)

    def csvsubtitle(self):
        if len(self.groups) == 1:
            return char['sep'].join('"%s"' % n for n in self.NICKS)
        return char['sep'].join('"%s:%s"' % (t, n) for t, _ in self.groups for n in self.NICKS)

    def showcsv(self):
        # dstat 0.7.4's own showcsv uses Python 2's types.ListType: this one works on both.
        cells = []
        for key in self.vars:
            v = self.val.get(key, self.MISSING)
            if isinstance(v, str):
                cells.append(v)
            elif v is None or v < 0:
                cells.append('')
            else:
                cells.append('%.1f' % v)
        return char['sep'].join(cells)


dstat_plugin = dool_plugin = _gpumon_column
