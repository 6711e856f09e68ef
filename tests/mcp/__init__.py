"""Tests of gitrun/mcp/."""
