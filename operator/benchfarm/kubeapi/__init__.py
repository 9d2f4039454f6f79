"""The Kubernetes API without kopf, for the operator and the session runner alike."""
