"""What other apps may use of ``inference_node``: its one public face.

Other apps import from here and nowhere else in ``inference_node`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it).
"""

# --- used by console.analytics (splits): the node registry ---
from inference_node.models import Node as Node
