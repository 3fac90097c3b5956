"""The bundled simulator inference node: a server that acts like vLLM (prefix
caching, continuous batching latency, vLLM metrics, faults) without a GPU or
weights, and speaks the OpenAI, Anthropic Messages and Gemini protocols (with
vendor API keys, per-key faults and request capture) so vendor channels can be
tested without a vendor. It does not import Django, so it starts fast:
``python -m tooling.simulator --port 9001``."""
