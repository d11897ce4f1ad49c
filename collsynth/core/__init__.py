"""The shared vocabulary every stage may import (DESIGN.md, `core/`): errors, units, atomic files, the enums
(`Op`, `Status`, `StepType`), the one step-semantics table, and the runtimes' limits. Imports no stage."""
