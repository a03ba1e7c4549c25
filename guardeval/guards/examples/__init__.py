"""Example guards shipped with guardeval (`--guard python-example`)."""
