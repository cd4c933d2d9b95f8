"""What a run writes for people: the leaderboard CSV, report, model cards, plots, diff."""
