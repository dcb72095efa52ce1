"""Who is a hub admin follows ``make hub ADMINS=`` on every start, also in an existing hub database: JupyterHub's
own start-up (``JupyterHub.initialize``: database, users, roles; no proxy, no servers) on hub/jupyterhub_config.py,
twice on one database, as ``make hub ADMINS=1`` then ``make hub``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HUB = Path(__file__).resolve().parents[2] / "hub"

START = """
import asyncio, json, sys
from jupyterhub import orm
from jupyterhub.app import JupyterHub

async def main():
    app = JupyterHub()
    await app.initialize(["-f", sys.argv[1]])
    print(json.dumps({u.name: u.admin for u in app.db.query(orm.User)}))
asyncio.run(main())
"""


def _admins_after_start(state: Path, admins: str) -> set[str]:
    """The users the hub's database holds as admins after a start with PAGEDKV_HUB_ADMINS=``admins``."""
    env = dict(os.environ, PAGEDKV_ROSTER=str(HUB / "roster.csv"), PAGEDKV_HUB_STATE=str(state),
               PAGEDKV_EXCHANGE=str(state / "exchange"), PAGEDKV_HUB_ADMINS=admins)
    run = subprocess.run([sys.executable, "-c", START, str(HUB / "jupyterhub_config.py")], cwd=state, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return {name for name, admin in json.loads(run.stdout.splitlines()[-1]).items() if admin}


def test_unsetting_admins_takes_admin_from_instructors_who_had_it(tmp_path):
    assert _admins_after_start(tmp_path, "1") == {"instructor"}
    assert _admins_after_start(tmp_path, "") == set(), "an instructor stayed admin after ADMINS was unset"
    assert _admins_after_start(tmp_path, "1") == {"instructor"}   # and the operator can turn it on again
