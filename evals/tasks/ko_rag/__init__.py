"""Korean RAG: documents, questions, retrieval, context budgeting, metrics, and its lm-eval YAMLs."""
