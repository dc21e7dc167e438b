"""gpurun from Python: the package the wheel installs beside the binary.

`python -m gpurun ...` runs the installed gpurun binary (`__main__`), also where the
environment's `bin/` is not on PATH (a Jupyter kernel, cron, an IDE's interpreter).
"""

from gpurun._binary import find_binary

__all__ = ["find_binary"]
