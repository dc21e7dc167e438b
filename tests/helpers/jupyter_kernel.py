"""Drives a kernel spec written by `gpurun --jupyter-kernel` with the real jupyter_client, as
JupyterLab and VS Code do: start it, run code in it, interrupt it, restart it, shut it down.
Between the steps it asks `gpurun --list --json` whose reservations are live. Prints one JSON
object with what it saw (tests/jupyter.rs checks it).

usage: jupyter_kernel.py KERNELS_DIR NAME GPURUN
"""

import json
import subprocess
import sys

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager


def reservations(gpurun):
    listing = subprocess.run([gpurun, "--list", "--json"], capture_output=True, text=True, check=True)
    return sorted(entry["pid"] for entry in json.loads(listing.stdout)["reservations"])


def run(client, code, timeout=30):
    """The code's stdout, and its reply's status and exception name."""
    printed = []

    def hook(message):
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])

    reply = client.execute_interactive(code, timeout=timeout, output_hook=hook)
    return "".join(printed), reply["content"]["status"], reply["content"].get("ename")


def main():
    kernels, name, gpurun = sys.argv[1:4]
    seen = {}
    manager = KernelManager(kernel_name=name, kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels]))
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    seen["kernel_pid"] = manager.provisioner.pid
    seen["visible"], _, _ = run(client, "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES'), end='')")
    seen["reserved"] = reservations(gpurun)
    # An interrupt: Jupyter's SIGINT to gpurun reaches the kernel as KeyboardInterrupt.
    # Interrupted once the cell runs: its first output says so (no guess at how long it takes).
    msg_id = client.execute("print('running', flush=True); import time; time.sleep(30)")
    while True:
        message = client.get_iopub_msg(timeout=20)
        if message["parent_header"].get("msg_id") == msg_id and message["msg_type"] == "stream":
            break
    manager.interrupt_kernel()
    reply = client.get_shell_msg(timeout=20)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = client.get_shell_msg(timeout=20)
    seen["interrupted"] = reply["content"].get("ename")
    seen["alive_after_interrupt"], _, _ = run(client, "print('alive', end='')")
    # A restart: a new gpurun, which takes the GPUs again.
    manager.restart_kernel(now=False)
    client.wait_for_ready(timeout=60)
    seen["restarted_pid"] = manager.provisioner.pid
    seen["reserved_after_restart"] = reservations(gpurun)
    seen["visible_after_restart"], _, _ = run(client, "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES'), end='')")
    # A shutdown leaves nothing.
    client.stop_channels()
    manager.shutdown_kernel(now=False)
    seen["reserved_after_shutdown"] = reservations(gpurun)
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
