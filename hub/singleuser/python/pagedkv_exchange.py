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
"""
import os
import shutil
import tempfile

from nbgrader.exchange.default.submit import ExchangeSubmit


class PrivateSubmit(ExchangeSubmit):
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
