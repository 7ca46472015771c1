"""Review queue for low-confidence strategies (see issue: learning loop). Not built yet."""
