"""gpurun from Python: the package the wheel installs beside the binary.

- `python -m gpurun ...` runs the installed gpurun binary (`__main__`), also where the
  environment's `bin/` is not on PATH (a Jupyter kernel, cron, an IDE's interpreter).
- `gpurun.reserve(...)` reserves GPUs for this Python process (a notebook, a script) and points
  CUDA at them (`_reserve`).
"""

from gpurun._binary import find_binary
from gpurun._reserve import NotEnoughGPUs, Reservation, reserve

__all__ = ["find_binary", "reserve", "Reservation", "NotEnoughGPUs"]
