"""The examples at the end of each command's --help, and the formatter that keeps them as
written (descriptions are still wrapped to the terminal)."""
from __future__ import annotations

import argparse

# Sub-commands: name -> one-line help (None: internal, left out of --help), the one place it
# is written (cli.py's light --help and each command's add_parser read it). Each is a module
# gpumon.commands.<name> with register(subparsers) and run(args). One line per command.
COMMAND_HELP = {
    "watch": "live dashboard of every GPU (the default command)",
    "log": "log every GPU sample to CSV or JSON lines (verdicts included)",
    "run": "run a command, watch its GPUs, diagnose it when it ends",
    "analyze": "diagnose a gpumon, nvidia-smi, DCGM or plain CSV log",
    "list": "GPUs, driver versions and the metrics each supports",
    "status": "one-shot snapshot: every GPU, its processes, the verdict (--json)",
    "export": "serve Prometheus metrics (dcgm-exporter names + gpumon verdicts)",
    "plugin": "the dstat/dool column: install, path, uninstall",
    "contrib": "where the fleet files are: Prometheus, Grafana, Kubernetes, systemd",
    "sim": "the simulated training scenarios behind --sim",
    "completion": "shell completion script for bash, zsh or fish",
    "stream": None,
}
EXAMPLES = {
    "watch": """\
  gpumon                          the dashboard, every GPU, 1 s polls
  gpumon watch 0.5                every 0.5 s (dstat style: DELAY [COUNT])
  gpumon watch -i 2 -n 10 --plain ten plain lines, 2 s apart, then exit
  gpumon watch --once --plain     one line now, then exit
  gpumon watch --gpus 0,2 --log run.csv
  gpumon watch --replay run.csv --speed 10 --gpus 1""",
    "log": """\
  gpumon log -o run.csv           CSV until Ctrl-C
  gpumon log -o run.csv 1 600     every 1 s, 600 polls, then exit
  gpumon log -o - --format jsonl --once   one JSON object on stdout
  gpumon log -o run.jsonl --format jsonl -i 5 --duration 3600""",
    "run": """\
  gpumon run -- python train.py --epochs 3
  gpumon run --log train.csv -i 0.5 -- torchrun --nproc-per-node 4 train.py""",
    "analyze": """\
  gpumon analyze run.csv
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu,power.draw,power.limit \\
      --format=csv -lms 200 > smi.csv;  gpumon analyze smi.csv --format json
  gpumon analyze a.csv b.csv.gz --format json   a JSON list, one object per file
  gpumon analyze --columns time=elapsed_sec,util=gpu_util_pct my_loop.csv""",
    "list": """\
  gpumon list
  gpumon list --json --gpus GPU-5f3a""",
    "status": """\
  gpumon status                    every GPU, its processes and the verdict, after 2 s
  gpumon status --json | jq '.gpus[0].processes'
  gpumon status --sim data_starvation --sample 10""",
    "export": """\
  gpumon export                    http://127.0.0.1:9402/metrics
  gpumon export --port 9500 -i 5 --gpus 0,1""",
    "plugin": """\
  gpumon plugin install && dool --gpumon 5
  gpumon plugin path""",
    "contrib": """\
  gpumon contrib path             the folder (prometheus/, grafana/, kubernetes/, systemd/)
  gpumon contrib list             each file, and what it is
  cp "$(gpumon contrib path)/prometheus/gpumon-rules.yml" /etc/prometheus/rules/""",
    "sim": """\
  gpumon sim list
  gpumon sim params sync_stall
  gpumon watch --sim sync_stall:4 --seed 3""",
    "completion": """\
  gpumon completion bash > ~/.local/share/bash-completion/completions/gpumon
  gpumon completion zsh > "${fpath[1]}/_gpumon"
  gpumon completion fish > ~/.config/fish/completions/gpumon.fish
  python -m gpumon.manpage > gpumon.1 && man -l gpumon.1   (the man page)""",
}


class HelpFormatter(argparse.HelpFormatter):
    """Wraps one-paragraph text (descriptions); text with line breaks (the examples, the
    exit codes) is printed as written."""

    def _fill_text(self, text, width, indent):
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def help_kwargs(name: str) -> dict:
    """``add_parser`` keywords: the command's one-line help, its examples as its epilog, and
    the formatter."""
    epilog = EXAMPLES.get(name)
    kw = {"epilog": f"examples:\n{epilog}" if epilog else None, "formatter_class": HelpFormatter}
    if COMMAND_HELP.get(name):
        kw["help"] = COMMAND_HELP[name]
    return kw
