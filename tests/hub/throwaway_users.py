"""Two throwaway system users for the hub's tests (root only, as ``make hub``), and handing files to one."""
from __future__ import annotations

import os
import pwd
import secrets
import subprocess
from pathlib import Path


def attacker_and_victim(prefix: str):
    """Make two system users named ``<prefix>a<tag>`` and ``<prefix>v<tag>``; yield
    ``{"attacker": name, "victim": name}``; delete both afterwards (for a module-scoped fixture)."""
    tag = secrets.token_hex(3)
    names = {"attacker": f"{prefix}a{tag}", "victim": f"{prefix}v{tag}"}
    try:
        for name in names.values():
            subprocess.run(["useradd", "--no-create-home", "--user-group", name], check=True)
        yield names
    finally:
        for name in names.values():
            subprocess.run(["userdel", name], check=False)


def own(path: Path, user: str) -> None:
    """``user`` (and their group) owns ``path`` and, when it is a folder, everything under it; links
    themselves, never followed."""
    uid, gid = pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid
    for p in [path, *path.rglob("*")] if path.is_dir() and not path.is_symlink() else [path]:
        os.lchown(p, uid, gid)
