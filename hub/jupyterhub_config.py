"""JupyterHub for a class on one server (``make hub``): roster users, nbgrader's exchange, roles by roster.

``make hub`` sets the ``PAGEDKV_HUB_*`` variables read here (see hub/README.md); every path is absolute.
Each roster user is a real system user (hub/accounts.py makes them); the hub runs as root and starts
each single-user server as that user, so nbgrader's exchange is guarded by real Unix permissions.
"""
import csv
import os
import socket
import sys
from pathlib import Path

HUB = Path(__file__).resolve().parent
sys.path.insert(0, str(HUB))
from accounts import read_roster  # noqa: E402  (hub/ is not a package)
from learner_limits import LimitedSpawner  # noqa: E402
from roster_signup import RosterAuthenticator  # noqa: E402
from signup_codes import code_for, export, hub_secret  # noqa: E402

c = get_config()  # noqa: F821 (provided by JupyterHub)

RUNTIME = Path(os.environ.get("PAGEDKV_RUNTIME", "/srv/pagedkv"))  # the learners' release and venv (accounts.py)
STATE = Path(os.environ.get("PAGEDKV_HUB_STATE", HUB / "state"))
EXCHANGE = os.environ.get("PAGEDKV_EXCHANGE", "/srv/nbgrader/exchange")
ROSTER = {m.id: m for m in read_roster(os.environ.get("PAGEDKV_ROSTER", HUB / "roster.csv"))}
COURSE = os.environ.get("PAGEDKV_COURSE", "")  # the instructor's course directory; empty: ~/pagedkv


def free_port() -> int:
    """A loopback port nothing listens on now (the hub's and the proxy's internal APIs)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Where it listens: 127.0.0.1 unless told (HUB_IP=0.0.0.0 behind TLS); internal APIs on free loopback ports.
c.JupyterHub.bind_url = f"http://{os.environ.get('PAGEDKV_HUB_IP', '127.0.0.1')}:{os.environ.get('PAGEDKV_HUB_PORT', '8000')}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{free_port()}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{free_port()}"
# The proxy comes from the npm registry into hub/node_modules (make hub runs npm ci).
c.ConfigurableHTTPProxy.command = [str(HUB / "node_modules" / ".bin" / "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(STATE / "proxy.pid")
# All state in one folder: the database (users and NativeAuthenticator's passwords), cookie secret, pid.
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")
# On stop, the hub stops every single-user server and the proxy it started (JupyterHub's defaults, said aloud).
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True

# Authentication: pluggable (hub/README.md). RosterAuthenticator (roster_signup.py): each roster user signs up
# once at /hub/signup with their roster id, the sign-up code they were given (signup_codes.py) and a password;
# only roster ids are authorised. Codes: signup-codes.csv in the state folder, for the operator to send through
# the learning platform; the instructors' are printed here, for the operator only.
STATE.mkdir(mode=0o700, parents=True, exist_ok=True)
SECRET = hub_secret(STATE)
c.JupyterHub.authenticator_class = RosterAuthenticator
c.RosterAuthenticator.signup_secret = SECRET
c.Authenticator.allowed_users = set(ROSTER)
export(SECRET, ROSTER.values(), STATE / "signup-codes.csv")
print(f"sign-up codes for every roster id: {STATE / 'signup-codes.csv'} (send each learner theirs); instructors: "
      + ", ".join(f"{m.id} {code_for(SECRET, m.id)}" for m in ROSTER.values() if m.role == "instructor"), file=sys.stderr)
# Instructors are not hub admins: an admin can open any learner's server. The operator may make them admins
# (make hub ADMINS=1), and only then may admins open users' servers (admin_access). The admin role's members are
# listed exactly, so each start sets them: Authenticator.admin_users only adds, and an instructor made admin once
# stayed admin in the hub's database after ADMINS was unset (JupyterHub's admin_users help says so).
ADMINS = os.environ.get("PAGEDKV_HUB_ADMINS", "") == "1"
c.JupyterHub.load_roles = [
    {"name": "admin", "users": sorted(m.id for m in ROSTER.values() if m.role == "instructor") if ADMINS else []}]
c.JupyterHub.admin_access = ADMINS
c.NativeAuthenticator.open_signup = False       # a name not on the roster signs up but can never log in
c.NativeAuthenticator.minimum_password_length = 10
c.NativeAuthenticator.check_common_password = True

# Single-user servers, as the user: learners run the runtime's venv (the release's library, no grader),
# the instructor their course directory's own .venv; nobody but root reads this checkout (accounts.py).
# Each learner's server, and all it starts, within bounds of memory, CPU and processes (learner_limits.py:
# cgroups, as SystemdSpawner's slices where systemd runs); LEARNER_MEMORY= etc. of make hub change them.
c.JupyterHub.spawner_class = LimitedSpawner
c.LimitedSpawner.memory_bytes = int(float(os.environ.get("PAGEDKV_LEARNER_MEMORY_GIB") or 4) * 2**30)
c.LimitedSpawner.cpus = float(os.environ.get("PAGEDKV_LEARNER_CPUS") or 1)
c.LimitedSpawner.processes = int(os.environ.get("PAGEDKV_LEARNER_PROCESSES") or 1024)
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 180

# Learners: formgrader's server part off; in JupyterLab, formgrader and Create Assignment off
# (hub/singleuser/learner/labconfig/page_config.json). The Assignment List and Validate stay.
LEARNER_ARGS = ["--ServerApp.jpserver_extensions={'nbgrader.server_extensions.formgrader': False}"]


def course_of(member) -> str:
    """The instructor's course directory: PAGEDKV_COURSE, else ~<instructor>/pagedkv."""
    return COURSE or str(Path(os.path.expanduser(f"~{member.id}")) / "pagedkv")


def variant_key(learner: str) -> str:
    """The learner's variant key from the course's keys.csv, which make hub writes for the roster (root reads
    it; "" if the course has none: the practice numbers)."""
    instructor = next(m for m in ROSTER.values() if m.role == "instructor")
    keys = Path(course_of(instructor)) / "keys.csv"
    if not keys.exists():
        return ""
    with open(keys, newline="", encoding="utf-8") as f:
        return next((row["key"] for row in csv.DictReader(f) if row.get("student") == learner), "")


def role_settings(spawner):
    """Per role: the Jupyter config folders (nbgrader's exchange and course id in both), the start folder;
    for a learner, their variant key (their notebooks' numbers: pagedkv_lib/course/learner/variants.py)."""
    member = ROSTER[spawner.user.name]
    spawner.bounded = member.role == "learner"   # the instructor's server grades, in sandboxes of its own
    singleuser = RUNTIME / "singleuser"   # a copy of hub/singleuser that every user can read
    course = course_of(member) if member.role == "instructor" else ""
    bin_dir = Path(course) / ".venv" / "bin" if course else RUNTIME / "venv" / "bin"
    spawner.cmd = [str(bin_dir / "jupyterhub-singleuser")]
    spawner.environment.update({
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "JUPYTER_CONFIG_PATH": f"{singleuser / member.role}:{singleuser / 'common'}",
        "PYTHONPATH": str(singleuser / "python"),   # pagedkv_exchange (the private submit)
        "PAGEDKV_EXCHANGE": EXCHANGE,
    })
    if course:
        spawner.environment["PAGEDKV_COURSE"] = course
        spawner.notebook_dir = course
        spawner.args = []
    else:
        spawner.notebook_dir = "~"
        spawner.args = list(LEARNER_ARGS)
        spawner.environment["PAGEDKV_VARIANT_KEY"] = variant_key(member.id)


c.Spawner.pre_spawn_hook = role_settings
