"""The thin Typer layer: one module per command; nothing imports it."""
