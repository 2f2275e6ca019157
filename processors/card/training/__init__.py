"""Synthetic data for the card localiser (generation, held-out evaluation sets)."""
