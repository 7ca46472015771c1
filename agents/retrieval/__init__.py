"""Retrieval: the knowledge base search and the Self-RAG loop built on it."""
