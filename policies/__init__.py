"""Policy tree, Reflexion engine and rollouts (see issue: learning loop). Not built yet."""
