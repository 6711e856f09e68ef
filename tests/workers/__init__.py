"""Tests of gitrun/workers/."""
