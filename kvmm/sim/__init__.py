"""kvmm.sim (components land here; see DESIGN.md)."""
