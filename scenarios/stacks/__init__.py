"""The built-in scenarios, one stack a module; ``scenarios.registry`` imports them all."""
