"""What other apps may use of ``usage``: its one public face.

Other apps import from here and nowhere else in ``usage`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it).
"""
