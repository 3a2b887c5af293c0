"""Reports read from records: statistics, leaderboards, terminal text, HTML, figures and tables."""
