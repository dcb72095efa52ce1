"""nbgrader's submit, with the submission readable by the instructor's group only.

nbgrader's file exchange makes a submission world-readable (files 0644, folders 0755 and 0777) and
hides it only behind a random folder name in an unlistable ``inbound/`` (0733 with the set-group-id
bit; its group is the instructor's). Anyone who learns the name reads it. Here, after nbgrader's own
submit, every file and folder of the submission gets ``inbound/``'s group and loses the "other" bits:
the instructor collects through the group, and no other learner can open it.

A learner cannot ``chgrp`` to a group they are not in, but a file created under a set-group-id folder
takes that folder's group. nbgrader writes ``timestamp.txt`` and ``submission_secret.txt`` after its
copy has reset the submission folder's mode (and so its set-group-id bit), so those files get the
learner's own group: each such file is written again inside a fresh folder made in ``inbound/`` (which
inherits the group) and moved into place.

On the hub, ``inbound/`` itself is closed to learners: each hands in to ``inbound/<their user name>/``, a
folder on their own disk that only they can write (``hub/inbound_folders.py``). So the submission goes
there, and its name always starts with the learner's own user name (nbgrader would take ``--student``).
"""
import base64
import os
import shutil
import tempfile

from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import get_username


class PrivateSubmit(ExchangeSubmit):
    def init_dest(self):
        """nbgrader's, with ``inbound/<user>/`` in place of ``inbound/``, and the student id always the user's."""
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        user = get_username()
        if not self.authenticator.has_access(user, self.coursedir.course_id):
            self.fail("You do not have access to this course.")
        if self.coursedir.student_id not in ("*", user):
            self.fail(f"You hand in as yourself ({user}), not as {self.coursedir.student_id!r}.")
        self.inbound_path = os.path.join(self.root, self.coursedir.course_id, "inbound", user)
        if not os.path.isdir(self.inbound_path) or not os.access(self.inbound_path, os.W_OK | os.X_OK):
            self.fail(f"Your hand-in folder {self.inbound_path} is missing or not yours to write: ask your "
                      "instructor (make hub makes one for each learner of the roster).")
        self.cache_path = os.path.join(self.cache, self.coursedir.course_id)
        random_str = base64.urlsafe_b64encode(os.urandom(9)).decode("ascii")
        self.assignment_filename = "+".join([user, self.coursedir.assignment_id, self.timestamp, random_str])

    def copy_files(self):
        super().copy_files()
        dest = os.path.join(self.inbound_path, self.assignment_filename)
        gid = os.stat(self.inbound_path).st_gid
        for folder, _, files in os.walk(dest):
            for path in (os.path.join(folder, f) for f in files):
                if os.stat(path).st_gid != gid:
                    _rewrite_in_group(path, self.inbound_path)
            for path in [folder, *(os.path.join(folder, f) for f in files)]:
                info = os.stat(path)
                if info.st_gid != gid:
                    raise OSError(f"submission path {path} did not take the instructor's group")
                os.chmod(path, info.st_mode & ~0o007)


def _rewrite_in_group(path: str, setgid_folder: str) -> None:
    """Replace file ``path`` by a copy created under ``setgid_folder`` (so with its group), same content and mode."""
    scratch = tempfile.mkdtemp(dir=setgid_folder)
    try:
        fresh = os.path.join(scratch, "file")
        shutil.copyfile(path, fresh)
        shutil.copymode(path, fresh)
        os.replace(fresh, path)
    finally:
        os.rmdir(scratch)
