"""What other apps may use of ``invoicing``: its one public face.

Other apps import from here and nowhere else in ``invoicing`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it).
"""
