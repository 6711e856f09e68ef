"""Tests of gitrun/definition/."""
