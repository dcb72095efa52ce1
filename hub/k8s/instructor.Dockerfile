# The instructor's single-user image for Zero to JupyterHub (hub/k8s/values.yaml gives it to instructors
# only): this whole repository, solutions/ and the grader included, its library and nbgrader with ngshare's
# exchange, in a venv at /opt/venv, run as jovyan (uid 1000, the chart's default). Keep it in a private
# registry. Learners get hub/k8s/learner.Dockerfile's image, which holds none of the instructor's material.
# Build from the repository root:  docker build -f hub/k8s/instructor.Dockerfile -t REGISTRY/pagedkv-instructor:0.1.0 .
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends make=4.3-4.1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 --shell /bin/bash jovyan

COPY --chown=root:root . /opt/pagedkv
# The course with torch's CPU wheels (no GPU is needed), JupyterHub's single-user server, and ngshare's client.
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu \
        -c /opt/pagedkv/constraints.txt "/opt/pagedkv[course,fast]" "jupyterhub>=5.0,<6" "ngshare-exchange==0.5.3" \
    && touch /opt/venv/.installed \
    && rm -rf /opt/pagedkv/.venv /opt/pagedkv/hub/node_modules /opt/pagedkv/hub/state

ENV PATH=/opt/venv/bin:$PATH
USER 1000
WORKDIR /home/jovyan
CMD ["/opt/pagedkv/hub/k8s/start-singleuser.sh"]
