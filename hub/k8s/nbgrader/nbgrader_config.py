"""nbgrader on Kubernetes, for every user: the course id and ngshare as the exchange (no shared folder).

In Zero to JupyterHub every user's pod runs as the same uid (1000), so a shared exchange folder would
not keep one learner out of another's submission: ngshare, a JupyterHub service, keeps submissions
in its own database and checks who asks through the hub. JUPYTER_CONFIG_PATH names this folder
(hub/k8s/values.yaml's pre-spawn hook); the role's own folder (hub/singleuser/<role>) comes first.
"""
import os

import ngshare_exchange

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "pagedkv"
# The hub's proxy inside the namespace routes /services/ngshare to the ngshare pod.
ngshare_exchange.configureExchange(c, os.environ.get("NGSHARE_URL", "http://proxy-public/services/ngshare"))
