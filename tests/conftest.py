"""Shared fixtures. Tests use the real local PostgreSQL and Redis; nothing is skipped."""
