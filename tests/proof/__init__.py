"""Tests of gitrun/proof/."""
