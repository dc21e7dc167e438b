"""`gpurun.reserve()`: GPUs reserved for this Python process, chosen and held by gpurun.

    with gpurun.reserve(gpus=1, min_free="8G") as held:
        model.to("cuda")          # CUDA sees held.gpus, and only those
    gpurun.reserve(gpus=1)        # or: held until this process exits

It runs `gpurun --hold DURATION --hold-for PID` for this process: gpurun chooses and reserves
as for a launch (other launches and reservations count, the house rules apply), then a holder
keeps the reservation until this process exits, `release()`, the end of the `with` block, or
DURATION, whichever comes first. The variables a launch would set (CUDA_VISIBLE_DEVICES,
CUDA_DEVICE_ORDER=PCI_BUS_ID, ...) are set in this process's environment, and put back as they
were on `release()`. CUDA reads them once,
when it initialises: after that they change nothing, so `reserve()` refuses then, saying so.
"""

import atexit
import json
import os
import signal
import subprocess
import sys
import warnings

from gpurun._binary import find_binary

EXIT_NOT_ENOUGH_GPUS = 75


class NotEnoughGPUs(RuntimeError):
    """Too few GPUs qualify now (gpurun's exit 75); the message is gpurun's table of reasons."""


class Reservation:
    """GPUs held for this process: `gpus` (dicts of index, uuid, name), `env` (the variables
    set), `holder_pid`, `until` (RFC 3339, UTC)."""

    def __init__(self, answer):
        self.gpus = answer["gpus"]
        self.env = answer["env"]
        self.holder_pid = answer["holder_pid"]
        self.until = answer["until"]
        self._released = False
        # What the variables were before: a released reservation leaves the environment as it
        # found it (a CUDA_VISIBLE_DEVICES left behind would narrow the next reserve()).
        self._before = {name: os.environ.get(name) for name in self.env}

    def release(self):
        """Ends the hold now (the holder lets the GPUs go); again is nothing."""
        if self._released:
            return
        self._released = True
        # Only our holder: one that ended at its deadline may have left its PID to another
        # process of this user's by now.
        if _holds_for(self.holder_pid, os.getpid()):
            try:
                os.kill(self.holder_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for name, value in self._before.items():
            if os.environ.get(name) != self.env[name]:
                continue  # changed since: not ours to undo
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def verify(self):
        """Where this process itself is on the GPUs now, from NVML's process lists (`gpurun
        --list --json`): {"verdict": "verified" | "wrong-gpu" | "not-observed", "on": [its GPUs],
        "held": [the held GPUs]}. "not-observed" until CUDA has made a context (the first
        allocation); "wrong-gpu" when any GPU it is on is not one of the held ones."""
        listing = subprocess.run([find_binary(), "--list", "--json"], stdin=subprocess.DEVNULL,
                                 capture_output=True, text=True, check=True)
        me = os.getpid()
        on = sorted(
            gpu["index"]
            for gpu in json.loads(listing.stdout)["gpus"]
            if any(process["pid"] == me for process in gpu.get("processes") or [])
        )
        held = sorted(gpu["index"] for gpu in self.gpus)
        if not on:
            verdict = "not-observed"
        elif set(on) <= set(held):
            verdict = "verified"
        else:
            verdict = "wrong-gpu"
        return {"verdict": verdict, "on": on, "held": held}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        # A process that used another GPU than the one held is said so, as a launch says it.
        try:
            seen = self.verify()
        except (OSError, subprocess.CalledProcessError, ValueError):
            seen = None
        if seen is not None and seen["verdict"] == "wrong-gpu":
            warnings.warn(
                f"gpurun: this process is on GPU {', '.join(map(str, seen['on']))}, not only the held "
                f"{', '.join(map(str, seen['held']))}: something set "
                "the device itself (cuda:N, torch.cuda.set_device) or changed CUDA_VISIBLE_DEVICES",
                RuntimeWarning,
                stacklevel=2,
            )
        self.release()
        return False

    def __repr__(self):
        indices = ", ".join(str(gpu["index"]) for gpu in self.gpus)
        return f"<gpurun reservation of GPU {indices} until {self.until} (holder PID {self.holder_pid})>"


def _holds_for(holder, pid):
    """Whether process `holder` is a gpurun holding for `pid` (`--hold-for PID` in its argv)."""
    try:
        with open(f"/proc/{holder}/cmdline", "rb") as cmdline:
            words = cmdline.read().split(b"\0")
    except OSError:
        return False
    return any(word == b"--hold-for" and after == str(pid).encode() for word, after in zip(words, words[1:]))


def _cuda_started():
    """Which framework in this process has initialised CUDA already, if one has."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return "torch"
    except AttributeError:
        pass
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is not None and getattr(bridge, "_backends", None):
        return "jax"
    return None


def reserve(gpus=1, min_free=None, duration="12h", options=()):
    """Reserves `gpus` GPUs (each with `min_free` free, as gpurun's --min-free: "8G", "50%")
    for this process, for at most `duration`, with any other gpurun `options` (a list of
    words: ["--exclusive", "--policy", "least-util"]). Sets the chosen GPUs' variables in
    os.environ and returns the Reservation. Raises NotEnoughGPUs when too few qualify now, and
    RuntimeError when CUDA is already initialised here or gpurun refuses the request."""
    started = _cuda_started()
    if started is not None:
        raise RuntimeError(
            f"gpurun.reserve(): CUDA is already initialised in this process ({started}), and "
            "CUDA_VISIBLE_DEVICES is read only then: call gpurun.reserve() before the first CUDA "
            "use (the notebook's first cell), or restart the kernel and call it first"
        )
    argv = [find_binary(), "--hold", str(duration), "--hold-for", str(os.getpid()), "--gpus", str(gpus)]
    if min_free is not None:
        argv += ["--min-free", str(min_free)]
    argv += [str(word) for word in options]
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode == EXIT_NOT_ENOUGH_GPUS:
        raise NotEnoughGPUs(done.stderr.strip())
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip() or f"gpurun exited {done.returncode}")
    reservation = Reservation(json.loads(done.stdout))
    os.environ.update(reservation.env)  # after Reservation noted what was there
    atexit.register(reservation.release)
    return reservation
