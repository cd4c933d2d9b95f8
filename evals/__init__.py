"""Serving under one vLLM profile, tasks, scoring, paired statistics and the leaderboard."""
