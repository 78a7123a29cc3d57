"""kvmm.compress (components land here; see DESIGN.md)."""
