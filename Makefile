# Two entry points for everyone: `make lab` and `make test`. Each sets up .venv when needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
ROOT_OK := $(if $(filter 0,$(shell id -u)),--allow-root)
# nbgrader runs `alembic` as a subprocess, so the venv's bin must be on PATH.
RUN    := PATH="$(BIN):$$PATH"

.PHONY: setup lab instructor hub hub-stop test test-long test-colab test-fast exercises keys collect autograde feedback export report clean-grading colab release collect-lessons

# Which torch (README, "On your own machine"): auto reuses a torch >= 2.4 that $(PYTHON) already has
# (conda, Colab), else the index's; TORCH=cpu takes PyTorch's CPU-only wheels; TORCH=reuse, TORCH=pypi.
TORCH  ?= auto
CHOICE := $(PYTHON) tools/torch_choice.py $(TORCH)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || { args=$$($(CHOICE) venv) && $(PYTHON) -m venv $$args $(VENV); }
	args=$$($(CHOICE) pip) && $(BIN)/python -m pip install -q --disable-pip-version-check $$args -e '.[course,dev,triton,fast,browser,hub]'
	@# JupyterLab: no "get notified about Jupyter news?" pop-up over the lessons
	@mkdir -p $(VENV)/share/jupyter/lab/settings
	@echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}' > $(VENV)/share/jupyter/lab/settings/overrides.json
	@touch $(STAMP)

setup: $(STAMP)  ## create or update .venv with the course, the tools and the test deps

# Learners: nbgrader's Validate button stays; formgrader, create-assignment and the exchange-based lists
# go (their server parts off on the command line, their JupyterLab plugins off in a learner-only config dir).
LEARNER_CFG := $(VENV)/learner-config
LEARNER := --ServerApp.jpserver_extensions="{'nbgrader.server_extensions.formgrader': False, 'nbgrader.server_extensions.assignment_list': False, 'nbgrader.server_extensions.course_list': False}"
LAB_OFF := "@jupyter/nbgrader:formgrader": true, "@jupyter/nbgrader:create-assignment": true, "@jupyter/nbgrader:assignment-list": true, "@jupyter/nbgrader:course-list": true, "@jupyter/nbgrader:menu": true

lab: $(STAMP)  ## serve the course to learners in JupyterLab on 127.0.0.1 (prints the URL with its token)
	@mkdir -p $(LEARNER_CFG)/labconfig
	@echo '{"disabledExtensions": {$(LAB_OFF)}}' > $(LEARNER_CFG)/labconfig/page_config.json
	$(RUN) JUPYTER_CONFIG_PATH="$(CURDIR)/$(LEARNER_CFG)" jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --ServerApp.root_dir="$(CURDIR)" $(ROOT_OK) $(LEARNER)

instructor: $(STAMP)  ## serve the course to the instructor, with nbgrader's formgrader
	$(RUN) jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --ServerApp.root_dir="$(CURDIR)" $(ROOT_OK)

# A class on one server (README, "Teaching a class"; hub/README.md): JupyterHub as root, one system user per
# roster row, nbgrader's exchange. Its proxy, configurable-http-proxy, comes from the npm registry into hub/node_modules.
HUB_PROXY := hub/node_modules/.bin/configurable-http-proxy
HUB_PORT  := $(if $(filter command line environment,$(origin PORT)),$(PORT),8000)
HUB_IP    ?= 127.0.0.1
CLASS     ?= hub/roster.csv
EXCHANGE  ?= /srv/nbgrader/exchange
HUB_STATE ?= hub/state
HOMES     ?=
COURSE    ?=
# What learners run (hub/accounts.py): the learner release and a venv with its library, readable by all.
RUNTIME   ?= /srv/pagedkv
# Each learner's home and hand-ins: a file system of its own, this many MiB, its image in HOME_IMAGES (hub/home_images.py).
LEARNER_HOME_MIB ?= 512
HOME_IMAGES      ?= /var/lib/pagedkv-homes

$(HUB_PROXY): hub/package.json hub/package-lock.json
	@command -v npm >/dev/null || { echo "the hub's proxy needs node >= 20 and npm (e.g. apt-get install nodejs npm)" >&2; exit 1; }
	npm ci --prefix hub --no-audit --no-fund --loglevel=error
	@touch $(HUB_PROXY)

hub: $(STAMP) $(HUB_PROXY) release  ## JupyterHub for a class on this server, as root (PORT=8000 CLASS=hub/roster.csv EXCHANGE=/srv/nbgrader/exchange RUNTIME=/srv/pagedkv)
	@test "$$(id -u)" = 0 || { echo "make hub creates system users and starts servers as them: run it as root (sudo make hub)" >&2; exit 1; }
	$(BIN)/python hub/accounts.py create --roster "$(abspath $(CLASS))" --exchange "$(abspath $(EXCHANGE))" \
		--release "$(abspath $(RELEASE))" --runtime "$(abspath $(RUNTIME))" \
		$(if $(HOMES),--homes "$(abspath $(HOMES))") $(if $(COURSE),--course "$(abspath $(COURSE))") \
		--images "$(abspath $(HOME_IMAGES))" --home-mib "$(LEARNER_HOME_MIB)"
	@mkdir -p "$(HUB_STATE)" && chmod 700 "$(HUB_STATE)"
	cd "$(HUB_STATE)" && PATH="$(BIN):$$PATH" PAGEDKV_HUB_IP=$(HUB_IP) PAGEDKV_HUB_PORT=$(HUB_PORT) \
		PAGEDKV_HUB_STATE="$(abspath $(HUB_STATE))" PAGEDKV_ROSTER="$(abspath $(CLASS))" \
		PAGEDKV_EXCHANGE="$(abspath $(EXCHANGE))" PAGEDKV_COURSE="$(if $(COURSE),$(abspath $(COURSE)))" \
		PAGEDKV_RUNTIME="$(abspath $(RUNTIME))" PAGEDKV_HUB_ADMINS="$(ADMINS)" \
		PAGEDKV_LEARNER_MEMORY_GIB="$(LEARNER_MEMORY_GIB)" PAGEDKV_LEARNER_CPUS="$(LEARNER_CPUS)" \
		PAGEDKV_LEARNER_PROCESSES="$(LEARNER_PROCESSES)" \
		exec $(BIN)/jupyterhub -f "$(CURDIR)/hub/jupyterhub_config.py"

hub-stop:  ## stop the hub started by make hub (by its pid): it stops every user's server and the proxy
	kill -TERM $$(cat "$(HUB_STATE)/jupyterhub.pid")

test: $(STAMP)  ## the suite a newcomer runs (16 to 26 minutes on two cores): library, properties, notebooks, grading, browser
	$(RUN) python -m pytest -n 2 --dist loadgroup -m "not long" --durations=25

# The long tests (pytest's `long` marker, about 30 minutes more): class-scale grading (fifty learners per set, a
# hostile class), every catalogued slip on the learners' keys, the run-time patch attacks, the stub evidence probe,
# axe-core over every page, the hub journey, and the learner's route from the release (tests/test_release_route.py:
# the release README's install block in a new venv, every lesson and every set Validated; then the Colab route on a
# stand-in runtime, lessons and answered sets). CI runs them after `make test`; run them before changing grading.
test-long: $(STAMP) $(if $(shell command -v npm 2>/dev/null),$(HUB_PROXY))  ## the long tests: class-scale grading, attacks, the hub, axe (CI runs them)
	$(RUN) python -m pytest -n 2 --dist loadgroup -m long --durations=25

# Colab's widget stack: a separate venv with ipywidgets 7.7.1 and notebook 6.5.7 (Colab ships both); the widget
# and lab tests, the Colab setup cell, and every lesson with its gates committed from Python, all under 7.7.1;
# then 04_demo in the classic notebook in chromium (PAGEDKV_CLASSIC=1: that test may not skip here).
# widgetsnbextension 3.6.6: in 3.6.7 to 3.6.10 the classic notebook cannot create an Output widget
# ("_deserialize_state is not a function"), so no gate appears; Colab draws widgets with its own front end.
COLAB_VENV  := .venv-colab
COLAB_STAMP := $(COLAB_VENV)/.installed
COLAB_PINS  := 'ipywidgets==7.7.1' 'notebook==6.5.7' 'widgetsnbextension==3.6.6'
# Installed once, like .venv; again when the package's requirements or these pins (in this file) change.
$(COLAB_STAMP): pyproject.toml constraints.txt Makefile
	@test -x $(COLAB_VENV)/bin/python || $(PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,browser]' $(COLAB_PINS)
	$(COLAB_VENV)/bin/python -c "import ipywidgets; assert ipywidgets.__version__ == '7.7.1', ipywidgets.__version__"
	@touch $(COLAB_STAMP)

test-colab: $(COLAB_STAMP)  ## the widget tests and all lessons under ipywidgets 7.7.1 (Colab's), 04_demo in the classic notebook, in .venv-colab
	PATH="$(CURDIR)/$(COLAB_VENV)/bin:$$PATH" PAGEDKV_CLASSIC=1 $(COLAB_VENV)/bin/python -m pytest -n 2 -p no:cacheprovider \
		tests/test_widgets.py tests/test_learner_panels.py tests/test_lab.py tests/test_colab.py tests/test_lessons_gated.py \
		tests/test_notebook_runs.py \
		tests/browser/test_classic_notebook.py

test-fast: $(STAMP)  ## library tests only (skips notebook execution and the nbgrader pipeline)
	$(RUN) python -m pytest -m "not slow"

exercises: $(STAMP)  ## regenerate exercises/ (student copies) from solutions/ with nbgrader
	$(RUN) python -m pagedkv_lib.course generate

keys: $(STAMP)  ## one variant key per learner, in keys.csv: make keys ROSTER=<Canvas gradebook export, hub roster or one id per line>
	$(RUN) python -m pagedkv_lib.course keys $(if $(ROSTER),--roster="$(ROSTER)")

collect: $(STAMP)  ## place and clean downloaded notebooks: make collect FROM=downloads/ (a folder or zip; Canvas's zip with ROSTER=)
	$(RUN) python -m pagedkv_lib.course collect "$(FROM)" $(if $(ROSTER),--roster="$(ROSTER)")

# On a hub (hub/README.md): the lessons learners handed in from the Assignment List, for the report's predictions;
# in their own folder, since they are not graded.
collect-lessons: $(STAMP)  ## on a hub: bring the handed-in lessons to submitted-lessons/ (make report reads their predictions)
	$(RUN) nbgrader collect lessons --CourseDirectory.submitted_directory=submitted-lessons

TIMEOUT ?= 30
autograde: $(STAMP)  ## grade submitted/ in the bubblewrap sandbox (TIMEOUT=30 s per cell; TRUST=1: no sandbox)
	$(RUN) python -m pagedkv_lib.course autograde --timeout=$(TIMEOUT) $(if $(TRUST),--trust-submissions)

feedback: $(STAMP)  ## HTML feedback for every autograded submission, in feedback/
	$(RUN) python -m pagedkv_lib.course feedback

colab: $(STAMP)  ## write SOURCE (what Colab pip-installs: a git URL or wheel) into every notebook's setup cell
	$(if $(filter undefined,$(origin SOURCE)),$(error give the install source: make colab SOURCE=git+https://github.com/ORG/REPO (SOURCE= clears it)))
	$(BIN)/python -m pagedkv_lib.lesson.colab "$(SOURCE)" notebooks/*.ipynb $(wildcard solutions/*/*.ipynb)
	@echo "Now run 'make exercises' so the released problem sets carry the same setup cell."

# The learner release (README, "Publishing the course"): lessons, released sets and the library without the
# grader, with its wheel, in release/ (git-ignored); it fails if any solution or hidden-test line is in it.
RELEASE ?= release
release: $(STAMP)  ## the learner-facing tree in release/, ready to push or install (GITHUB=ORG/REPO: where it goes, for Colab)
	$(BIN)/python tools/learner_release.py --out "$(RELEASE)" $(if $(GITHUB),--github "$(GITHUB)")

FORMAT ?= csv
export: $(STAMP)  ## the gradebook as grades.csv, with each student's status (FORMAT=canvas ROSTER=x.csv: also grades-canvas.csv)
	$(RUN) python -m pagedkv_lib.course export --format="$(FORMAT)" $(if $(ROSTER),--roster="$(ROSTER)")

report: $(STAMP)  ## the class report: report/report.md (and .html): scores, pass rates, the class's predictions (NAMES=1 names learners)
	$(RUN) python -m pagedkv_lib.course report $(if $(NAMES),--names)

clean-grading:  ## remove the instructor's grading outputs (gradebook, autograded/, feedback/, report/)
	rm -rf autograded feedback report grading-logs grading-cache submitted-lessons gradebook.db grades.csv grades-canvas.csv status.csv results collect.json
