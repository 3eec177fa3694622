"""Loading the model-visible history (package mode in-process, service mode over HTTP)."""
