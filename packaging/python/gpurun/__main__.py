"""`python -m gpurun ARGS`: exec the installed gpurun binary with ARGS, so that the process is
gpurun itself (its exit status, its signals, its stdout) and nothing of Python stays around."""

import os
import sys

from gpurun._binary import find_binary


def main() -> None:
    try:
        binary = find_binary()
    except FileNotFoundError as missing:
        print(missing, file=sys.stderr)
        sys.exit(127)
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
