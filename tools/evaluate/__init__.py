"""Closed-loop evaluation: drive routes in the embedded world with a trained policy."""
