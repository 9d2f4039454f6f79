"""The only room that knows kopf: thin handlers that validate, call core, and write status."""
