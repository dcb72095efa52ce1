"""The instructor's Jupyter server on the hub: terminals open in the course folder with its tools on PATH.

Under a hub the server has no terminal, so jupyter_server_terminals starts a login shell, and a login
shell's /etc/profile sets PATH afresh (the course's .venv/bin is lost); a terminal opened from the file
browser's top folder starts in the server's working folder, the user's home. Here the shell reads
terminal_rc.sh instead (beside this file), which keeps the user's ~/.bashrc, puts the course's
.venv/bin first and, when the shell starts in the home folder, goes to the course (PAGEDKV_COURSE).
"""
import os

c = get_config()  # noqa: F821 (provided by Jupyter)

c.ServerApp.terminado_settings = {
    "shell_command": ["/bin/bash", "--rcfile", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                           "terminal_rc.sh"), "-i"]}

# Formgrader opens from the Nbgrader menu in a frame of the lab page, the same origin. JupyterHub's single-user
# server forbids every frame (frame-ancestors 'none'), so the tab stayed blank. Here nothing may frame this server's
# pages but formgrader's, which pages of the same site may (pagedkv_frames, hub/singleuser/python).
c.ServerApp.tornado_settings = {"headers": {"Content-Security-Policy": "frame-ancestors 'none'"}}
c.ServerApp.jpserver_extensions.update({"pagedkv_frames": True})

# Formgrader in a tab of its own links an assignment's name and its Preview to /tree/... at the site's root, the
# hub's, not this server's (404); pagedkv_formgrader_links (hub/singleuser/python) puts them under this server.
c.ServerApp.jpserver_extensions.update({"pagedkv_formgrader_links": True})
