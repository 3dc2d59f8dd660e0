"""Development infrastructure (local services for tests and demos)."""
