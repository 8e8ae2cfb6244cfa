"""How fast a folder takes the files a warm start writes into the local compiler caches: N
kernel folders of F files each, made as Inductor's Triton bundler makes them (a temporary
folder, the files, one rename), then each file stat'ed once; twice per folder.

    python dev/warm-start/fs_probe.py FOLDER ...
"""

import os
import shutil
import sys
import tempfile
import time
import uuid

KERNELS, FILES, SIZE = 600, 6, 16 << 10


def probe(root: str) -> tuple[float, float]:
    base = tempfile.mkdtemp(dir=root, prefix="fs-probe-")
    payload = os.urandom(SIZE)
    started = time.perf_counter()
    for kernel in range(KERNELS):
        staging = os.path.join(base, f"tmp.{uuid.uuid4()}")
        os.makedirs(staging)
        for index in range(FILES):
            with open(os.path.join(staging, f"k{index}.bin"), "wb") as file:
                file.write(payload)
        os.replace(staging, os.path.join(base, f"kernel{kernel}"))
    written = time.perf_counter() - started
    started = time.perf_counter()
    for kernel in range(KERNELS):
        for index in range(FILES):
            os.stat(os.path.join(base, f"kernel{kernel}", f"k{index}.bin"))
    stated = time.perf_counter() - started
    shutil.rmtree(base)
    return written, stated


if __name__ == "__main__":
    for root in sys.argv[1:]:
        for _ in range(2):
            written, stated = probe(root)
            print(
                f"{root}: {KERNELS} kernel folders x {FILES} files of {SIZE >> 10} KiB: "
                f"written in {written:.3f} s, stat'ed in {stated:.3f} s"
            )
