"""The bundled simulator inference node: an OpenAI-compatible server that acts
like vLLM (prefix caching, continuous batching latency, vLLM metrics, faults)
without a GPU or weights. It does not import Django, so it starts fast:
``python -m inference_node.server --port 9001``."""
