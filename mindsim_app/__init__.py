"""The application layer: commands that compose the stages (profiles, simulation, validation, judges)."""
