"""What only migdra's tools run -- the command line's planning and checking commands, the benchmarks and
the development cluster -- never the node plugin or the controller (an import-linter contract):

- ``allocation``: kube-scheduler's structured allocator, ported (``migdra allocate``, the packing
  simulation; kube-scheduler judges it in the allocator differential);
- ``packing``: the placement simulation, its repacking oracle, ``migdra plan`` and ``migdra bench placement``;
- ``cel``: DRA's CEL environment (``migdra cel``, the allocator's selectors, DeviceClass lint and cost);
- ``validation``: kube-apiserver's resource.k8s.io validation (``migdra allocate``'s input checks).
"""
