"""Progress for people and logs for later: step lines and logs (reporter.py), and one live
line per target when targets build side by side on a terminal (board.py)."""
