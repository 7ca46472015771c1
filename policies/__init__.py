"""Policy tree, confidence bookkeeping and the Reflexion engine."""
