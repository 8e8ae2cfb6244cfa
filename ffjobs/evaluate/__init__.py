"""Evaluation of a trained face-swap model on held-out identities, and the gate before review."""
