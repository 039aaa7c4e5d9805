"""The privileged expert and the controllers: world-agnostic (no SUMO), used by every world and by evaluation."""
