#!/usr/bin/env python3
"""Device process CPU while a command runs (the idle and saturated figures of docs/BENCHMARKS.md).

Runs COMMAND (typically `cargo belfry exec ...` with a guest command that ends in a sleep) and
samples, every 0.25 s, the CPU time (/proc/PID/stat utime+stime) of every `belfry-device`
process descending from it (other people's devices on the machine are not counted). At the
end it prints, per device (its --name and --doorbell-transport):

- busy: the busiest 1 s window, in % of one host core;
- idle: the IDLE seconds that end 1 s before the device's last sample (the guest's closing
  sleep: the device had work before and none then), in % of one host core.

    tools/devcpu/devcpu.py --idle 10 -- cargo belfry exec --devices 2 \\
        --device-flags '1=--doorbell-transport shared' --guest-bin belfry-bench -- \\
        sh -c 'belfry-bench --transports-only --shared-device 1; sleep 13'
"""

import argparse
import os
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def stat(pid):
    """(ppid, cpu ticks) of pid, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


def descends(pid, root, parents):
    seen = 0
    while pid > 1 and seen < 64:
        if pid == root:
            return True
        pid = parents.get(pid) or (stat(pid) or (1, 0))[0]
        seen += 1
    return False


def label(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return str(pid)
    name = args[args.index("--name") + 1] if "--name" in args[:-1] else str(pid)
    transport = args[args.index("--doorbell-transport") + 1] if "--doorbell-transport" in args[:-1] else "trapped"
    return f"{name} ({transport})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of the idle window")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command")
    child = subprocess.Popen(command)
    samples = {}  # pid -> [(t, ticks)]
    names = {}
    parents = {}
    while child.poll() is None:
        now = time.monotonic()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                with open(f"/proc/{pid}/comm") as f:
                    # The launcher runs a copy named after its build (`belfry-device.<variant>`),
                    # which the kernel's 15-byte `comm` truncates.
                    if not f.read().strip().startswith("belfry-device"):
                        continue
            except OSError:
                continue
            s = stat(pid)
            if s is None:
                continue
            parents[pid] = s[0]
            if pid not in samples:
                if not descends(s[0], child.pid, parents):
                    continue
                names[pid] = label(pid)
                samples[pid] = []
            samples[pid].append((now, s[1]))
        time.sleep(0.25)
    if not any(len(series) >= 2 for series in samples.values()):
        print("devcpu: no belfry-device process of the command was seen twice: no figure", file=sys.stderr)
        return child.returncode or 1
    for pid, series in samples.items():
        if len(series) < 2:
            continue
        # The busiest window of at least 1 s (the shortest such window ending at each sample:
        # samples are 0.25 s apart plus the time a look at /proc takes, more under load).
        busy = 0.0
        j = 0
        for i in range(len(series)):
            while j + 1 < i and series[i][0] - series[j + 1][0] >= 1.0:
                j += 1
            dt = series[i][0] - series[j][0]
            if dt >= 1.0:
                busy = max(busy, (series[i][1] - series[j][1]) / HZ / dt)
        end = series[-1][0] - 1.0
        start = end - args.idle
        window = [s for s in series if start <= s[0] <= end]
        idle = "n/a (run shorter than the window)"
        if len(window) >= 2 and window[-1][0] - window[0][0] > args.idle * 0.8:
            dt = window[-1][0] - window[0][0]
            idle = f"{100 * (window[-1][1] - window[0][1]) / HZ / dt:.2f} % over {dt:.1f} s"
        print(f"devcpu: {names[pid]}: busiest 1 s {100 * busy:.1f} % of a core; idle {idle}")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
