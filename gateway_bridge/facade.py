"""What other apps may use of ``gateway_bridge``: its one public face.

Other apps import from here and nowhere else in ``gateway_bridge`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it).
"""
