"""The instructor's server settings on the hub: formgrader's pages, and no other, may be framed by the lab page
(a real server's answers), and the terminal opens in the course with its tools first on PATH (real bash). That make leaves the root-owned venv alone
is checked as the instructor in tests/browser/test_hub_journey.py (root may write every folder)."""
import runpy
import subprocess
from pathlib import Path

from traitlets.config import Config

HERE = Path(__file__).resolve().parents[2] / "hub" / "singleuser" / "instructor"


def test_the_terminal_is_bash_with_the_course_rc():
    c = runpy.run_path(str(HERE / "jupyter_server_config.py"), init_globals={"get_config": Config})["c"]
    shell = c.ServerApp.terminado_settings["shell_command"]
    assert shell[0] == "/bin/bash" and Path(shell[shell.index("--rcfile") + 1]).is_file()


def _terminal(tmp_path) -> dict:
    home, course = tmp_path / "home", tmp_path / "course"
    (course / ".venv" / "bin").mkdir(parents=True)
    home.mkdir()
    env = {"HOME": str(home), "PAGEDKV_COURSE": str(course), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(["/bin/bash", "--rcfile", str(HERE / "terminal_rc.sh"), "-i"], cwd=home, env=env,
                         input='echo "PWD=$PWD"; echo "PATH=$PATH"; echo "MAKEFLAGS=$MAKEFLAGS"\n',
                         capture_output=True, text=True, timeout=30).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_the_terminal_opens_in_the_course_with_its_tools_first(tmp_path):
    seen = _terminal(tmp_path)
    assert seen["PWD"] == str(tmp_path / "course")
    assert seen["PATH"].startswith(str(tmp_path / "course" / ".venv" / "bin") + ":")
    assert seen["MAKEFLAGS"] == ""

