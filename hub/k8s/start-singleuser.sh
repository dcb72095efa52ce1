#!/bin/sh
# The single-user server's start on Kubernetes: the first time, copy the lessons (learners) or the whole
# course (the instructor's nbgrader course directory) into the user's persistent home; then start.
set -eu
if [ "${PAGEDKV_ROLE:-learner}" = instructor ]; then
    if [ ! -d "$HOME/pagedkv" ]; then
        cp -r /opt/pagedkv "$HOME/pagedkv"
        ln -s /opt/venv "$HOME/pagedkv/.venv"   # make autograde and the rest use the image's venv
    fi
elif [ ! -d "$HOME/lessons" ]; then
    cp -r /opt/pagedkv/notebooks "$HOME/lessons"
fi
exec jupyterhub-singleuser "$@"
