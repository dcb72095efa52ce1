"""Browser tests: the course opened in JupyterLab (and the classic notebook) in headless chromium."""
