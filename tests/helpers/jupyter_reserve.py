"""gpurun.reserve() from a notebook cell: a plain ipykernel kernel (the environment's own
`python3` kernel spec, started by the real jupyter_client as JupyterLab starts it) runs a cell
that reserves a GPU for the kernel process itself. Between the steps it asks `gpurun --list
--json` whose holds are live. Prints one JSON object (tests/jupyter.rs checks it).

usage: jupyter_reserve.py GPURUN
"""

import json
import subprocess
import sys
import time

from jupyter_client.manager import KernelManager


def holders(gpurun):
    listing = subprocess.run([gpurun, "--list", "--json"], capture_output=True, text=True, check=True)
    return sorted(entry["pid"] for entry in json.loads(listing.stdout)["reservations"])


def main():
    gpurun = sys.argv[1]
    seen = {}
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    seen["kernel_pid"] = manager.provisioner.pid
    printed = []
    cell = (
        "import gpurun, json, os\n"
        "held = gpurun.reserve(gpus=1, min_free='8G')\n"
        "print(json.dumps({'visible': os.environ['CUDA_VISIBLE_DEVICES'], 'holder': held.holder_pid,"
        " 'gpu': held.gpus[0]['index'], 'pid': os.getpid()}), end='')"
    )

    def hook(message):
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            printed.append(json.dumps({"error": message["content"]["evalue"]}))

    client.execute_interactive(cell, timeout=60, output_hook=hook)
    seen["cell"] = json.loads("".join(printed))
    seen["holders"] = holders(gpurun)
    # Shutting the kernel down ends its process, and with it the hold.
    client.stop_channels()
    manager.shutdown_kernel(now=False)
    deadline = time.monotonic() + 30
    while holders(gpurun) and time.monotonic() < deadline:
        time.sleep(0.2)
    seen["holders_after_shutdown"] = holders(gpurun)
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
