"""A small kube-scheduler for the local control plane: binds pending pods to nodes, DRA claims included.

The decisions that need no API access (may this pod go to this node? which claim do its extended
resources need?) are pure functions of the JSON objects in their own modules; the scheduling loop
around them reads and writes the API server.  Like the rest of the local control plane, nothing here
is imported by production code paths.
"""
