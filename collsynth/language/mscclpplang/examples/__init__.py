"""Example programs in MSCCL++'s DSL, in the shape of mscclpp's python/examples: run one as a module to print
its execution plan (checked by the plan interpreter)."""
