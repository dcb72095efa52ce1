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

.PHONY: setup lab instructor test test-colab test-fast exercises collect autograde feedback export report clean-grading colab

# Which torch (README, "On your own machine"): auto reuses a torch >= 2.4 that $(PYTHON) already has
# (conda, Colab), else the index's; TORCH=cpu takes PyTorch's CPU-only wheels; TORCH=reuse, TORCH=pypi.
TORCH  ?= auto
CHOICE := $(PYTHON) tools/torch_choice.py $(TORCH)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || { args=$$($(CHOICE) venv) && $(PYTHON) -m venv $$args $(VENV); }
	args=$$($(CHOICE) pip) && $(BIN)/python -m pip install -q --disable-pip-version-check $$args -e '.[course,dev,triton,fast,browser]'
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

test: $(STAMP)  ## the whole suite: library, properties, notebooks, nbgrader pipeline
	$(RUN) python -m pytest -n 2 --dist loadgroup

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
		tests/browser/test_classic_notebook.py

test-fast: $(STAMP)  ## library tests only (skips notebook execution and the nbgrader pipeline)
	$(RUN) python -m pytest -m "not slow"

exercises: $(STAMP)  ## regenerate exercises/ (student copies) from solutions/ with nbgrader
	$(RUN) python -m pagedkv_lib.course generate

collect: $(STAMP)  ## place and clean downloaded notebooks: make collect FROM=downloads/ (a folder or zip)
	$(RUN) python -m pagedkv_lib.course collect "$(FROM)"

TIMEOUT ?= 30
autograde: $(STAMP)  ## grade submitted/ (TIMEOUT=30 s per cell): grades.csv, status.csv, autograded/
	$(RUN) python -m pagedkv_lib.course autograde --timeout=$(TIMEOUT)

feedback: $(STAMP)  ## HTML feedback for every autograded submission, in feedback/
	$(RUN) python -m pagedkv_lib.course feedback

colab: $(STAMP)  ## write SOURCE (what Colab pip-installs: a git URL or wheel) into every notebook's setup cell
	$(if $(filter undefined,$(origin SOURCE)),$(error give the install source: make colab SOURCE=git+https://github.com/ORG/REPO (SOURCE= clears it)))
	$(BIN)/python -m pagedkv_lib.lesson.colab "$(SOURCE)" notebooks/*.ipynb $(wildcard solutions/*/*.ipynb)
	@echo "Now run 'make exercises' so the released problem sets carry the same setup cell."

export: $(STAMP)  ## the gradebook as grades.csv, with each student's status
	$(RUN) python -m pagedkv_lib.course export

report: $(STAMP)  ## the class report: report/report.md with a score histogram and pass rates
	$(RUN) python -m pagedkv_lib.course report

clean-grading:  ## remove the instructor's grading outputs (gradebook, autograded/, feedback/, report/)
	rm -rf autograded feedback report grading-logs grading-cache gradebook.db grades.csv status.csv collect.json
