"""Deterministic simulation: odradek's code on virtual time and a simulated network, every
choice drawn from one seed (docs/simulation.md)."""
