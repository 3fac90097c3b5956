"""The gateway's hot path as a pipeline of stages, one module each."""
