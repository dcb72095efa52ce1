# The learners' single-user image for Zero to JupyterHub (hub/k8s/values.yaml's default image): the learner
# release only (the lessons, the released problem sets and the library's wheel without the grader), nbgrader
# with ngshare's exchange and the learner's Jupyter settings, in a venv at /opt/venv, run as jovyan (uid 1000).
# It copies named paths, never the repository: no solution, hidden test, key or grader module can reach it
# (tests/hub/test_hub_files.py checks every COPY). Build from the repository root, after `make release`:
#   docker build -f hub/k8s/learner.Dockerfile -t REGISTRY/pagedkv-learner:0.1.0 .
FROM python:3.11-slim-bookworm

RUN useradd --create-home --uid 1000 --shell /bin/bash jovyan

COPY --chown=root:root release/notebooks /opt/pagedkv/notebooks
COPY --chown=root:root release/exercises /opt/pagedkv/exercises
COPY --chown=root:root release/dist /opt/pagedkv/dist
COPY --chown=root:root release/README.md /opt/pagedkv/README.md
COPY --chown=root:root hub/singleuser/learner /opt/pagedkv/hub/singleuser/learner
COPY --chown=root:root hub/k8s/nbgrader /opt/pagedkv/hub/k8s/nbgrader
COPY --chown=root:root hub/k8s/start-singleuser.sh /opt/pagedkv/hub/k8s/start-singleuser.sh
COPY --chown=root:root constraints.txt /opt/pagedkv/constraints.txt
# The release's wheel with torch's CPU wheels (no GPU is needed), JupyterHub's single-user server, ngshare's client.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN python -m venv /opt/venv \
    && wheel=$(ls /opt/pagedkv/dist/pagedkv_lib-*.whl) \
    && /opt/venv/bin/pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu \
        -c /opt/pagedkv/constraints.txt "${wheel}[course,fast]" "jupyterhub>=5.0,<6" "ngshare-exchange==0.5.3"

ENV PATH=/opt/venv/bin:$PATH
USER 1000
WORKDIR /home/jovyan
CMD ["/opt/pagedkv/hub/k8s/start-singleuser.sh"]
