"""kvmm.allocators (components land here; see DESIGN.md)."""
