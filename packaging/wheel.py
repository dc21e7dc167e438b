#!/usr/bin/env python3
"""make dist's PyPI wheel: gpurun for `pip install`, as ruff and uv ship their binaries.

usage: packaging/wheel.py STAGE VERSION ARCH OUT_DIR

The wheel holds the release's own binary (the tarball's, glibc 2.17 at most) as a script
(gpurun-VERSION.data/scripts/gpurun, which pip puts on the environment's bin/ and makes
executable), and the man page and completions as data under the environment's prefix
(share/man/man1, share/bash-completion, share/zsh/site-functions, share/fish), and a small
Python package, `gpurun` (packaging/python/gpurun), whose `python -m gpurun` runs that binary
where the environment's bin/ is not on PATH (a Jupyter kernel, cron, an IDE). It is written here, with the standard library, rather than
by maturin, which would compile gpurun a second time; the format is the wheel spec's (PEP
427, the binary distribution format), tagged py3-none-manylinux_2_17_ARCH and its older
spelling manylinux2014_ARCH, as ruff's wheels are. Every entry has the commit's time
(SOURCE_DATE_EPOCH) and a sorted place: the same commit gives the same bytes.
"""

import base64
import hashlib
import os
import sys
import time
import zipfile

SUMMARY = "Run a command on the right NVIDIA GPU: probe, select, reserve, launch, supervise, verify"


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main():
    stage, version, arch, out_dir = sys.argv[1:5]
    data = f"gpurun-{version}.data"
    info = f"gpurun-{version}.dist-info"
    tags = [f"py3-none-manylinux_2_17_{arch}", f"py3-none-manylinux2014_{arch}"]
    with open("README.md", encoding="utf-8") as readme:
        description = readme.read()
    files = {
        f"{data}/scripts/gpurun": (os.path.join(stage, "bin/gpurun"), 0o755),
        f"{data}/data/share/man/man1/gpurun.1": (os.path.join(stage, "share/man/man1/gpurun.1"), 0o644),
        f"{data}/data/share/bash-completion/completions/gpurun": (
            os.path.join(stage, "share/bash-completion/completions/gpurun"),
            0o644,
        ),
        f"{data}/data/share/zsh/site-functions/_gpurun": (os.path.join(stage, "share/zsh/site-functions/_gpurun"), 0o644),
        f"{data}/data/share/fish/vendor_completions.d/gpurun.fish": (
            os.path.join(stage, "share/fish/vendor_completions.d/gpurun.fish"),
            0o644,
        ),
    }
    package = "packaging/python/gpurun"
    for module in sorted(os.listdir(package)):
        if module.endswith(".py"):
            files[f"gpurun/{module}"] = (os.path.join(package, module), 0o644)
    contents = {name: (open(path, "rb").read(), mode) for name, (path, mode) in files.items()}
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: gpurun",
            f"Version: {version}",
            f"Summary: {SUMMARY}",
            "License: MIT OR Apache-2.0",
            "Classifier: Environment :: GPU :: NVIDIA CUDA",
            "Classifier: Operating System :: POSIX :: Linux",
            "Description-Content-Type: text/markdown",
            "",
            description,
        ]
    )
    wheel = "\n".join(["Wheel-Version: 1.0", "Generator: gpurun packaging/wheel.py", "Root-Is-Purelib: false"]
                      + [f"Tag: {tag}" for tag in tags]) + "\n"
    contents[f"{info}/METADATA"] = (metadata.encode(), 0o644)
    contents[f"{info}/WHEEL"] = (wheel.encode(), 0o644)
    for licence in ["LICENSE-MIT", "LICENSE-APACHE"]:
        contents[f"{info}/licenses/{licence}"] = (open(licence, "rb").read(), 0o644)
    record = "".join(f"{name},{digest(body)},{len(body)}\n" for name, (body, _) in sorted(contents.items()))
    record += f"{info}/RECORD,,\n"
    contents[f"{info}/RECORD"] = (record.encode(), 0o644)

    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    # A zip stores local time to two seconds, from 1980 on.
    stamp = time.gmtime(max(epoch, 315532800))[:6]
    name = f"gpurun-{version}-py3-none-manylinux_2_17_{arch}.manylinux2014_{arch}.whl"
    path = os.path.join(out_dir, name)
    # The RECORD last, as the spec asks; the rest in order.
    order = sorted(n for n in contents if not n.endswith("/RECORD")) + [f"{info}/RECORD"]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for entry in order:
            body, mode = contents[entry]
            item = zipfile.ZipInfo(entry, date_time=stamp)
            item.external_attr = (0o100000 | mode) << 16
            item.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(item, body)
    print(name)


if __name__ == "__main__":
    main()
