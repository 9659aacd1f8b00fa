"""Results -> Rich tables, JSON and traces; pure functions of their inputs."""
