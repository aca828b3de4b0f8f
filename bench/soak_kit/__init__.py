"""Parts of bench/soak.py: the server it runs, what it records, the attacks, the report."""
