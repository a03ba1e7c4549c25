"""Guards compared on one schedule: paired differences, leaderboard, rankings, their text and plots."""
