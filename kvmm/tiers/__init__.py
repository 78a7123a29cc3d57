"""kvmm.tiers (components land here; see DESIGN.md)."""
