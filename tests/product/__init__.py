"""Promises of gitrun as a whole: through the real command, or across the package."""
