"""Time the hub's collect (``hub/singleuser/python/pagedkv_collect.py``) on a class with one huge hand-in.

Makes ``--learners`` throwaway system users (root only; removed at the end), gives each an inbound entry
as nbgrader's submit leaves it (a notebook of ``--notebook-kib`` KiB, timestamp.txt, submission_secret.txt)
in their own folder ``inbound/<learner>/`` (the hub's layout, ``hub/inbound_folders.py``; here on the same
disk, without the hub's per-learner images), and to the first a file of ``--huge-gib`` GiB made with
fallocate (real blocks, instantly). Prints the
wall time of one collect and how many learners it collected. Usage:

    sudo .venv/bin/python benchmarks/hub_collect.py --learners 100 --huge-gib 2
"""
from __future__ import annotations

import argparse
import os
import pwd
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "hub" / "singleuser" / "python"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--learners", type=int, default=100)
    p.add_argument("--huge-gib", type=float, default=2.0)
    p.add_argument("--notebook-kib", type=int, default=200)
    args = p.parse_args()
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.abc.exchange import ExchangeError
    from pagedkv_collect import OwnedCollect

    os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"   # nbgrader runs alembic
    tag = secrets.token_hex(2)
    names = [f"pkvb{tag}{i:03d}" for i in range(args.learners)]
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        try:
            for name in names:
                subprocess.run(["useradd", "--no-create-home", "--user-group", name], check=True)
            inbound = Path(tmp, "exchange", "pagedkv", "inbound")
            inbound.mkdir(parents=True)
            body = os.urandom(args.notebook_kib * 1024)
            for i, name in enumerate(names):
                own = inbound / name
                own.mkdir()
                folder = own / f"{name}+ps2_math+2026-12-06 10:00:00.000000 UTC+{secrets.token_hex(4)}"
                folder.mkdir()
                (folder / "ps2_math.ipynb").write_bytes(body)
                (folder / "timestamp.txt").write_text("2026-12-06 10:00:00.000000 UTC")
                (folder / "submission_secret.txt").write_text(secrets.token_hex(16))
                if i == 0:
                    subprocess.run(["fallocate", "-l", str(int(args.huge_gib * 2**30)), str(folder / "big.bin")],
                                   check=True)
                uid, gid = pwd.getpwnam(name).pw_uid, pwd.getpwnam(name).pw_gid
                for f in [own, folder, *folder.iterdir()]:
                    os.lchown(f, uid, gid)
            Path(tmp, "course").mkdir()
            where = CourseDirectory(root=str(Path(tmp, "course")), course_id="pagedkv", assignment_id="ps2_math")
            start = time.perf_counter()
            try:
                OwnedCollect(coursedir=where, root=str(Path(tmp, "exchange")), update=True).start()
            except ExchangeError as err:
                refused = str(err)
            wall = time.perf_counter() - start
            got = len(list(Path(tmp, "course", "submitted").glob("*/ps2_math/ps2_math.ipynb")))
            print(f"collect: {args.learners} learners, one with {args.huge_gib} GiB: {wall:.2f} s wall, "
                  f"{got} collected; {refused[:160] if 'refused' in locals() else 'none refused'}")
        finally:
            for name in names:
                subprocess.run(["userdel", name], check=False, capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
