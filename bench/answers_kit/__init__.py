"""Parts of bench/answers.py: the plain peer, the report."""
