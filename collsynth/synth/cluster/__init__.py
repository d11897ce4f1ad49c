"""Cluster-scale synthesizers (DESIGN.md, `synth/`): the time-expanded greedy (`greedy`), tree packing
(`trees`) and the size-based chooser (`auto`). Every one returns a `SynthesisResult` of verified,
timed `Algorithm`s."""
