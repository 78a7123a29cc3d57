"""kvmm.policies (components land here; see DESIGN.md)."""
