# The instructor's terminal on the hub (jupyter_server_config.py beside this file says why).
[ -f "$HOME/.bashrc" ] && . "$HOME/.bashrc"
export PATH="$PAGEDKV_COURSE/.venv/bin:$PATH"
[ "$PWD" = "$HOME" ] && cd "$PAGEDKV_COURSE"
# The course's .venv is root's (make hub builds and refreshes it): after a `git pull` that touches
# pyproject.toml, make would try to reinstall it and fail. Without the install stamp as a prerequisite,
# make uses the venv as it is.
[ -w "$PAGEDKV_COURSE/.venv/bin" ] || export MAKEFLAGS="STAMP="
