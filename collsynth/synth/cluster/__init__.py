"""Cluster-scale synthesizers (DESIGN.md, `synth/`): the time-expanded greedy (`greedy`), tree packing
(`trees`), the hierarchical composition on NxTOPO (`hierarchical`, with `hier_plans` and `hier_phases`) and
the size-based chooser (`auto`). Every one returns a `SynthesisResult` of verified `Algorithm`s (timed for
greedy and trees, step-based for the hierarchical compositions)."""
