"""Review queue items, decisions and the audit log."""
