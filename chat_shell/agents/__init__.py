"""Agent assembly and turn execution: the graph, the request-local checkpointer, the finalizer."""
