"""Where the wheel put the gpurun binary: the scripts directory of the installation this
package belongs to, found as ruff's and uv's own `python -m` entry points find theirs."""

import os
import sys
import sysconfig


def find_binary() -> str:
    """The path of the gpurun binary this package was installed with.

    Looked for, in order: the scripts directory of the running interpreter's installation
    (a venv's or the system's `bin/`), the user scheme's (`pip install --user`: `~/.local/bin`),
    and a `bin/` beside the package's root (`pip install --target DIR`). Raises
    FileNotFoundError naming where it looked.
    """
    name = "gpurun" + (sysconfig.get_config_var("EXE") or "")
    looked = [os.path.join(sysconfig.get_path("scripts"), name)]
    user_scheme = sysconfig.get_preferred_scheme("user") if sys.version_info >= (3, 10) else "posix_user"
    looked.append(os.path.join(sysconfig.get_path("scripts", scheme=user_scheme), name))
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    looked.append(os.path.join(package_root, "bin", name))
    for path in looked:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("gpurun: the gpurun binary is not where the wheel puts it: " + ", ".join(looked))
