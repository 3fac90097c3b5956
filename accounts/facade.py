"""What other apps may use of ``accounts``: its one public face.

Other apps import from here and nowhere else in ``accounts`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it).
"""
