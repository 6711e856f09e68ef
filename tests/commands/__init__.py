"""Tests of gitrun/commands/."""
