"""nbgrader on the hub, for every user: the course id and the exchange (JUPYTER_CONFIG_PATH names this folder)."""
import os

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "pagedkv"
c.Exchange.root = os.environ["PAGEDKV_EXCHANGE"]   # set by hub/jupyterhub_config.py from make hub's EXCHANGE
# Submissions go to inbound/<user>/ (each learner's own folder, on their own disk), readable by the instructor's
# group only, not by every user (hub/singleuser/python/pagedkv_exchange.py, hub/inbound_folders.py).
c.ExchangeFactory.submit = "pagedkv_exchange.PrivateSubmit"
