"""Schedules: a serialisable list of loop-transformation steps over a TE graph."""
