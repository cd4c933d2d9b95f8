"""What is scored: task data (offline and hub), prompts built by lm-eval from the YAMLs here, ko_rag."""
