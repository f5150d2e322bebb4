"""Small scenarios to copy from: ``loomsim --scenarios examples.two_cadences run two-cadences``."""
