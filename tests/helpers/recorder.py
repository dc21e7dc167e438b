"""A child for gpurun's signal tests: records every signal it receives, one name per line.

usage: recorder.py LOG [--signals NAME,...] [--exit-on NAME [--exit-after N]] [--signal-parent NAME]

Prints "ready PID PPID" on stdout once its handlers are installed, then runs until LOG.stop
exists (exit 0) or it receives the --exit-on signal for the Nth time (default 1; recorded, then re-raised with the default
action, so it dies by that signal like an ordinary program). Signals the caller ignored stay
ignored (and so are not recorded).
"""

import os
import select
import signal
import sys

ALL = ["HUP", "INT", "QUIT", "USR1", "USR2", "PIPE", "ALRM", "TERM", "CONT", "TSTP", "TTIN", "TTOU",
       "URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR"]


def name_of(number):
    if signal.SIGRTMIN <= number <= signal.SIGRTMAX:
        return f"RTMIN+{number - signal.SIGRTMIN}"
    return signal.Signals(number).name[3:]


def number_of(name):
    if name.startswith("RTMIN+"):
        return signal.SIGRTMIN + int(name[6:])
    return getattr(signal, "SIG" + name)


def main():
    args = sys.argv[1:]
    log = args.pop(0)
    options = dict(zip(args[::2], args[1::2]))
    names = options.get("--signals", ",".join(ALL + ["RTMIN+0", "RTMIN+3"])).split(",")
    exit_on = options.get("--exit-on")
    exit_after = int(options.get("--exit-after", "1"))
    seen = {}
    # Python's own handler merges a signal that arrives twice before Python code runs (even a
    # queued real-time one), but writes a byte to the wakeup fd at every delivery: count those.
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write, warn_on_full_buffer=False)

    def record(number):
        with open(log, "a") as f:
            f.write(name_of(number) + "\n")
        seen[number] = seen.get(number, 0) + 1
        if exit_on and name_of(number) == exit_on and seen[number] >= exit_after:
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)

    for name in names:
        number = number_of(name)
        # Python itself ignores PIPE and XFSZ at startup; any other SIG_IGN is the caller's.
        if name in ("PIPE", "XFSZ") or signal.getsignal(number) != signal.SIG_IGN:
            signal.signal(number, lambda *_: None)
    if "--signal-parent" in options:
        os.kill(os.getppid(), number_of(options["--signal-parent"]))
    print(f"ready {os.getpid()} {os.getppid()}", flush=True)
    while not os.path.exists(log + ".stop"):
        ready, _, _ = select.select([wakeup_read], [], [], 0.01)
        if ready:
            for number in os.read(wakeup_read, 4096):
                record(number)

if __name__ == "__main__":
    main()
