"""`benchfarm web`: the lab's dashboard (boards, queues, runs, results over time) for people.

A separate program beside the operator and the sessions: it reads the Kubernetes API with its own
account and the artifact store, and shows a person only the namespaces Kubernetes says they may
read (`access`: TokenReview and SubjectAccessReview, as Kubernetes' own dashboard signs in).
Server-side HTML and SVG, every asset served from here (a lab is often offline).
"""
