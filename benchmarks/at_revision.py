"""``pagedkv_lib`` as of an older git revision, imported beside today's under another name.

The A/B benchmarks (``allocator.py``, ``block_manager_race.py``) time the library at a baseline
revision against the checkout in one process: ``git archive`` extracts the old ``pagedkv_lib`` into a
temporary folder (removed when the benchmark exits), renamed to ``package``.
"""
from __future__ import annotations

import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile


def library_at(rev: str, package: str):
    """The package ``package``: ``pagedkv_lib`` as git revision ``rev`` holds it."""
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True,
                          cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    folder = tempfile.mkdtemp(prefix=f"{package}_")
    atexit.register(shutil.rmtree, folder, True)
    archive = subprocess.run(["git", "archive", rev, "pagedkv_lib"], capture_output=True, check=True, cwd=root)
    subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    os.rename(os.path.join(folder, "pagedkv_lib"), os.path.join(folder, package))
    sys.path.insert(0, folder)
    return importlib.import_module(package)
