"""positional.py (placeholder until its suite is written)."""
from . import Suite

suite = Suite("positional")
