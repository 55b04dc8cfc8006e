"""The product's hands and eyes on the cluster: the REST client and its credentials, the
shared watch with its trimmed cache, and readers of plain Kubernetes objects.
"""
