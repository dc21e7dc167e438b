#!/usr/bin/env python3
"""`make fuzz`: random gpurun invocations against the simulated GPUs, looking for panics.

Each run is gpurun with random options (every long and short option `gpurun --help` lists,
in every spelling: `--x v`, `--x=v`, `-xv`, clusters), random values (valid, malformed, huge,
negative, empty, Unicode, control characters), a random environment (GPURUN_* variables, the
CUDA, Slurm, torchrun and MPI variables gpurun reads) and random configuration files (the
user's and the system's, valid TOML with random keys and values, or not TOML at all), then,
often, `--` and a command (true, a shell that exits with a status, launchers and wrappers that
gpurun reads: deepspeed, accelerate launch, env -S, timeout). Everything runs in a scratch
directory with its own lock directory, history and configuration: the machine's are never
touched, and no container is ever started.

A panic is a failure: exit status 101, "panicked" on stderr, or death by a signal gpurun did
not pass on from its command (SIGSEGV, SIGABRT, SIGBUS, SIGILL). Each is written to
target/fuzz/failures/ with its argv and environment, to be replayed. Runs that outlive the
per-run limit (a `--wait` that waits) are killed and counted, not failures.

    tests/fuzz/fuzz.py --gpurun target/debug/gpurun --library target/sim/libnvidia-ml.so.1 \
        --scenario crates/nvml-sim/scenarios/default.toml --runs 5000 [--seed N] [--jobs 2]
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}

VALUES = [
    "", "0", "1", "2", "3", "8", "64", "-1", "-0", "+1", "1.5", "0x10", "1e3", "nan", "inf",
    "18446744073709551616", "99999999999999999999999", "4294967296", "2147483648",
    "8G", "8GiB", "8gb", "0G", "1T", "1P", "500G", "10%", "101%", "-5%", "0.5G", "8 G", "G", "8Q",
    "auto", "none", "all", "forever", "off", "on", "warn", "strict", "ignore", "true", "false",
    "1s", "30s", "0s", "2m", "1h", "1d", "-1s", "10ms", "1.5s", "1x", "s",
    "0,1", "1,0", "0-3", "3-0", "0,0", "0,,1", ",", "0:1", "GPU-22220000-0000-4000-8000-000000000000",
    "GPU-", "MIG-", "MIG-x", "00000000:17:00.0", "A100", "*A100*", "Tesla*", "[", "**", "?",
    "most-free", "least-used", "random", "round-robin", "pack", "spread", "numa", "nvlink", "best",
    "cpu", "index", "uuid", "bash", "zsh", "fish", "elvish", "powershell", "json", "text",
    "SIGTERM", "TERM", "15", "SIGKILL", "9", "HUP", "SIGRTMIN+3", "SIGFOO", "0", "65",
    "é", "日本", "\u202e", "a\nb", "a\tb", "\x1b[2J", "'", '"', "\\", "$HOME", "${X}", "--", "-",
    "--gpus", "-g", "=", "==", "a=b", "x" * 300, "0" * 80,
]

COMMANDS = [
    [], ["true"], ["false"], ["sh", "-c", "exit 3"], ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"],
    ["/nonexistent/program"], ["."], [""], ["deepspeed", "--num_gpus", "2", "t.py"],
    ["deepspeed", "-qi", "localhost:0,1", "t.py"], ["accelerate", "launch", "--gpu_ids", "0", "t.py"],
    ["accelerate", "launch", "-qt", "3", "t.py"], ["python3", "-m", "accelerate.commands.launch", "t.py"],
    ["env", "-S", "deepspeed -i localhost:0 t.py"], ["env", "-S", "deepspeed $B"], ["timeout", "1", "true"],
    ["nohup", "true"], ["stdbuf", "-oL", "true"], ["env", "A=1", "nice", "-n", "5", "true"],
    ["torchrun", "--nproc-per-node", "2", "t.py"], ["srun", "true"], ["mpirun", "-n", "2", "true"],
]

ENV_NAMES = [
    "GPURUN_GPUS", "GPURUN_MIN_FREE", "GPURUN_EXCLUSIVE", "GPURUN_LOG", "GPURUN_POLICY",
    "GPURUN_WAIT", "GPURUN_HEALTH", "GPURUN_VERIFY", "GPURUN_UNKNOWN", "GPURUN_",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_LOCALID",
    "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID", "SLURMD_NODENAME", "SLURM_GPUS_PER_TASK",
    "LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMIX_NAMESPACE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "CUDA_MPS_PIPE_DIRECTORY",
    "NVML_MPS_DEVICE_ENUMERATION", "COLUMNS", "NO_COLOR", "HF_HOME", "TF_FORCE_GPU_ALLOW_GROWTH",
]


def options_of(gpurun):
    """The long and short options `gpurun --help` lists."""
    text = subprocess.run([gpurun, "--help"], capture_output=True, text=True, check=True).stdout
    longs = sorted(set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", text)))
    shorts = sorted(set(re.findall(r"(?<![\w-])-([a-zA-Z])\b", text)))
    return longs, shorts


def value(rng):
    pick = rng.random()
    if pick < 0.85:
        return rng.choice(VALUES)
    if pick < 0.95:
        return "".join(rng.choice("0123456789,-:.GMiBs%=abx ") for _ in range(rng.randint(1, 12)))
    return "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(1, 8)))


# Whole options with values gpurun accepts, so that runs get past the command line into the
# probe, the choice, the reservation, the launch and the report.
PLAUSIBLE = [
    ["--gpus", "1"], ["--gpus", "2"], ["--gpus", "1-3"], ["--gpus", "all"], ["--gpus", "0"], ["--gpus", "2-"],
    ["--min-free", "8G"], ["--min-free", "auto"], ["--min-free", "50%"], ["--max-util", "50"],
    ["--exclusive"], ["--dry-run"], ["--json"], ["--export"], ["--list"], ["--doctor"], ["--history"],
    ["--policy", "most-free"], ["--policy", "least-util"], ["--policy", "pack"], ["--policy", "random"],
    ["--mig", "only"], ["--mig", "never"], ["--topology", "node"], ["--health", "ignore"], ["--devices", "0,1"], ["--devices", "1"],
    ["--exclude", "0"], ["--model", "*A100*"], ["--wait=1s"], ["--verify", "strict"], ["--verify", "off"],
    ["--report"], ["--visible-as", "uuid"], ["--visible-as", "index"], ["--fallback", "cpu"],
    ["--fallback", "best"], ["--no-lock"], ["--no-history"], ["-q"], ["-v"], ["-vv"], ["--mps"],
    ["--per-rank"], ["--cpu-bind", "numa"], ["--launcher", "off"], ["--health", "strict"],
    ["--same-model"], ["--topology", "nvlink"], ["--kill-after", "1s"], ["--nvml-timeout", "2s"],
    ["--exec"], ["--completions", "bash"], ["--on-start", "true"], ["--on-exit", "true"],
]


def argv_of(rng, longs, shorts, scratch):
    words = []
    if rng.random() < 0.4:
        for _ in range(rng.randint(0, 5)):
            words += rng.choice(PLAUSIBLE)
        words.append("--")
        words += rng.choice(COMMANDS) or ["true"]
        return words
    for _ in range(rng.randint(0, 6)):
        style = rng.random()
        if style < 0.55:
            name = rng.choice(longs)
            if rng.random() < 0.1:
                name = name[: rng.randint(1, len(name))]  # a prefix
            if rng.random() < 0.5:
                words += [f"--{name}", value(rng)]
            elif rng.random() < 0.5:
                words.append(f"--{name}={value(rng)}")
            else:
                words.append(f"--{name}")
        elif style < 0.8 and shorts:
            letters = "".join(rng.choice(shorts) for _ in range(rng.randint(1, 3)))
            words.append(f"-{letters}" + (value(rng) if rng.random() < 0.3 else ""))
            if rng.random() < 0.5:
                words.append(value(rng))
        else:
            words.append(value(rng))
    # Paths gpurun may write stay in the scratch directory.
    words = [os.path.join(scratch, "out.json") if w.endswith(".json") else w for w in words]
    if rng.random() < 0.6:
        words.append("--")
        words += rng.choice(COMMANDS)
    return words


def config_text(rng, longs):
    if rng.random() < 0.15:
        return rng.choice(["[", "gpus = ", "\x00\x01", "a = [1, 2", "= 3", "x" * 2000, "é = 'é'\n"])
    lines = []
    for _ in range(rng.randint(0, 4)):
        key = rng.choice(longs + ["unknown-key", "default-min-free", "max-gpus-per-user", "rules"])
        raw = value(rng)
        kind = rng.random()
        if kind < 0.5:
            lines.append(f"{key} = {json.dumps(raw)}")
        elif kind < 0.7:
            lines.append(f"{key} = {rng.choice(['true', 'false', '0', '3', '-1', '1.5', '[]', '{}'])}")
        else:
            lines.append(f"{key} = [{json.dumps(raw)}, {json.dumps(value(rng))}]")
    return "\n".join(lines) + "\n"


def one_run(number, seed, args, longs, shorts):
    rng = random.Random(seed * 1_000_003 + number)
    scratch = tempfile.mkdtemp(prefix=f"fuzz{number}.", dir=args.work)
    try:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GPURUN_", "SLURM", "CUDA_", "OMPI_", "PMIX_", "NVML_"))}
        env.update({
            "NVML_SIM_SCENARIO": args.scenario,
            "GPURUN_NVML_LIB": args.library,
            "GPURUN_LOCK_DIR": os.path.join(scratch, "locks"),
            "GPURUN_SYSTEM_CONFIG": os.path.join(scratch, "system.toml"),
            "XDG_CONFIG_HOME": os.path.join(scratch, "config"),
            "XDG_STATE_HOME": os.path.join(scratch, "state"),
            "HOME": scratch,
            "PATH": env.get("PATH", "/usr/bin:/bin"),
        })
        for _ in range(rng.randint(0, 4) if rng.random() < 0.4 else 0):
            env[rng.choice(ENV_NAMES)] = value(rng).replace("\x00", "")
        if rng.random() < 0.1:
            env.pop("GPURUN_NVML_LIB")
        with open(env["GPURUN_SYSTEM_CONFIG"], "w", encoding="utf-8", errors="replace") as f:
            f.write(config_text(rng, longs) if rng.random() < 0.15 else "")
        if rng.random() < 0.2:
            os.makedirs(os.path.join(scratch, "config", "gpurun"))
            with open(os.path.join(scratch, "config", "gpurun", "config.toml"), "w",
                      encoding="utf-8", errors="replace") as f:
                f.write(config_text(rng, longs))
        argv = [w.replace("\x00", "") for w in argv_of(rng, longs, shorts, scratch)]
        started = time.monotonic()
        process = subprocess.Popen([args.gpurun] + argv, env=env, cwd=scratch, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, stderr = process.communicate(timeout=args.limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, stderr = process.communicate()
            timed_out = True
        status = process.returncode
        text = stderr.decode("utf-8", "replace")
        crashed = (not timed_out) and (
            status == 101 or "panicked" in text
            or (status < 0 and signal.Signals(-status) in CRASH_SIGNALS))
        return {"number": number, "argv": argv, "status": status, "timed_out": timed_out,
                "crashed": crashed, "stderr": text[-2000:], "seconds": time.monotonic() - started,
                "env": {k: v for k, v in env.items() if k in ENV_NAMES}}
    finally:
        # A run killed mid-way may leave a background helper's files: best effort.
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpurun", required=True)
    parser.add_argument("--library", required=True)
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 2))
    parser.add_argument("--limit", type=float, default=10.0, help="seconds a run may take")
    parser.add_argument("--out", default="target/fuzz")
    args = parser.parse_args()
    args.gpurun = os.path.abspath(args.gpurun)
    args.library = os.path.abspath(args.library)
    args.scenario = os.path.abspath(args.scenario)
    os.makedirs(args.out, exist_ok=True)
    args.work = tempfile.mkdtemp(prefix="gpurun-fuzz.")
    longs, shorts = options_of(args.gpurun)
    print(f"fuzz: {args.runs} runs, seed {args.seed}, {len(longs)} long and {len(shorts)} short options, "
          f"{args.jobs} at a time", flush=True)
    started = time.monotonic()
    statuses, crashes, timeouts = {}, [], 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for n, result in enumerate(pool.map(lambda i: one_run(i, args.seed, args, longs, shorts),
                                            range(args.runs)), 1):
            statuses[result["status"]] = statuses.get(result["status"], 0) + 1
            timeouts += result["timed_out"]
            if result["crashed"]:
                crashes.append(result)
            if n % 500 == 0:
                print(f"fuzz: {n} runs, {len(crashes)} panics", flush=True)
    shutil.rmtree(args.work, ignore_errors=True)
    failures = os.path.join(args.out, "failures")
    shutil.rmtree(failures, ignore_errors=True)
    if crashes:
        os.makedirs(failures)
        for crash in crashes:
            with open(os.path.join(failures, f"{crash['number']}.json"), "w") as f:
                json.dump(crash, f, indent=1)
    summary = {"runs": args.runs, "seed": args.seed, "panics": len(crashes), "timed_out": timeouts,
               "exit_statuses": {str(k): v for k, v in sorted(statuses.items())},
               "seconds": round(time.monotonic() - started, 1)}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"fuzz: {json.dumps(summary)}")
    for crash in crashes[:5]:
        print(f"PANIC (run {crash['number']}): gpurun {crash['argv']!r} env {crash['env']!r}\n{crash['stderr']}")
    if crashes:
        print(f"fuzz: {len(crashes)} panics; each is in {failures}/", file=sys.stderr)
    sys.exit(1 if crashes else 0)


if __name__ == "__main__":
    main()
