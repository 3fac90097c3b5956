"""The gateway bridge: the hot path from SDK calls to inference nodes, and the usage it emits."""
