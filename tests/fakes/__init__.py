"""Test doubles that speak the real wire protocols of services outside the machine."""
