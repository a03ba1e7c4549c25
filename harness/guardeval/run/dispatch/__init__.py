"""Sending calls: the dispatcher, its gates (adaptive limit, budget, stalls, room), progress, decisions."""
