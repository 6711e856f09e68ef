"""Tests of gitrun/engine/."""
